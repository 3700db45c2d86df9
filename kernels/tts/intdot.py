"""Exact integer matrix products for ONNX Runtime's dynamic int8 graphs (MatMulInteger,
ConvInteger, DynamicQuantizeLSTM): uint8 activations x int8 (or uint8) weights, both with
zero points, summed in int32 as ONNX Runtime does, so the float result that follows is
the reference's to the last bit of the integer part.

The products are vpdpbusd's (AVX-512 VNNI, AVX-VNNI): u8 x s8, four of them summed into an
int32 lane, wrapping, never saturating. Zero points come out of the sum by algebra,
    sum_k (a - za)(w - zw) = sum_k a w - zw sum_k a - za sum_k w + K za zw,
exact modulo 2**32 and so exact wherever the true sum fits an int32 (ORT's sum is the same
int32). uint8 weights are stored as w - 128 in int8 with their zero point moved by the same.

The tile is an outer product over quads of the summed axis: C (rows x width*lanes int32)
+= A (rows x quads of 4 bytes, one broadcast per row) . B (quads x width*lanes lanes of 4
bytes), accumulators in registers for the whole sum. A convolution is that tile with the
taps as an outer loop, B the input packed as (C_in / 4, time, 4) and shifted by one
dilation a tap: no im2col. `matmul_int_ref` is the plain reference every path is tested
against bit for bit.
"""
from dataclasses import dataclass, replace

import numpy as np
from numba import njit, prange
from numba.extending import intrinsic

from ..amx import empty_aligned
from ..cpu import llvm_has
from . import amx
from ..ir import I8, I32, I64, Gen, i64_call, vec
from ..quants import JIT
from ..simd import _loop

PAR = dict(JIT, parallel=True)

# vpdpbusd on zmm with AVX-512 VNNI, on ymm with AVX-VNNI; elsewhere the same sums in plain
# IR on ymm (Gen.dpbusd), exact and slower
VNNI = llvm_has("avx512vnni", "avx512bw", "avx512vl") or llvm_has("avxvnni")
LANES = 16 if llvm_has("avx512vnni", "avx512bw", "avx512vl") else 8
# rows x width accumulators + width B vectors + a broadcast within the register file
# (32 zmm; 16 ymm)
ROWS, WIDTH = (4, 6) if LANES == 16 else (4, 3)

_tiles = {}


def quad_tile(rows, width, lanes, vnni, a_unsigned):
    """numba intrinsic tile(a, a_rs, b, b_rs, c, c_rs, n_rows, n_quads, n_taps, a_tap, b_tap),
    addresses and strides in bytes as int64: C (rows x width*lanes int32 at c, row r at
    c + r*c_rs) += sum over taps t and quads q of A[r, t, q] . B[t, q], A[r, t, q] the 4 bytes
    at a + r*a_rs + t*a_tap + 4q, B[t, q] the width*lanes 4-byte lanes at b + t*b_tap + q*b_rs.
    Rows past n_rows re-read the last valid one and are not stored. a_unsigned: A holds the
    u8 activations and B the s8 weights (a matrix-vector product), else the reverse."""
    key = (rows, width, lanes, vnni, a_unsigned)
    if key in _tiles:
        return _tiles[key]
    name = f"dasllama_quad_tile_{rows}x{width}x{lanes}{'_vnni' if vnni else ''}{'_au' if a_unsigned else ''}"
    vi32, vbytes = vec(I32, lanes), 4 * lanes

    def emit(b, args):
        g = Gen(b, vnni=vnni)
        a_addr, a_rs, b_addr, b_rs, c_addr, c_rs, n_rows, n_quads, n_taps, a_tap, b_tap = args
        a_p, b_p, c_p = (b.inttoptr(v, I8.as_pointer()) for v in (a_addr, b_addr, c_addr))
        last = b.sub(n_rows, g.c(I64, 1))
        clamped = [b.select(b.icmp_signed("<", g.c(I64, r), n_rows), g.c(I64, r), last) for r in range(rows)]
        a_rows = [g.at(a_p, b.mul(r, a_rs)) for r in clamped]
        c_rows = [g.at(c_p, b.mul(r, c_rs)) for r in clamped]
        init = [g.load(c_rows[r], vbytes * w, vi32) for r in range(rows) for w in range(width)]

        def tap(t, acc):
            a_t = [g.at(p, b.mul(t, a_tap)) for p in a_rows]
            b_t = g.at(b_p, b.mul(t, b_tap))

            def quad(q, acc):
                b_q = g.at(b_t, b.mul(q, b_rs))
                bv = [g.load(b_q, vbytes * w, vi32) for w in range(width)]
                q4 = b.mul(q, g.c(I64, 4))
                av = [g.splat(g.load(p, q4, I32), lanes) for p in a_t]
                if a_unsigned:
                    return [g.dpbusd(acc[r * width + w], av[r], bv[w]) for r in range(rows) for w in range(width)]
                return [g.dpbusd(acc[r * width + w], bv[w], av[r]) for r in range(rows) for w in range(width)]

            return _loop(g, g.c(I64, 0), n_quads, acc, quad)

        acc = _loop(g, g.c(I64, 0), n_taps, init, tap)
        for r in range(rows):
            with b.if_then(b.icmp_signed("<", g.c(I64, r), n_rows)):
                for w in range(width):
                    ptr = b.bitcast(g.at(c_rows[r], vbytes * w), vi32.as_pointer())
                    b.store(acc[r * width + w], ptr).align = 4

    @intrinsic
    def tile(typingctx, a, a_rs, bb, b_rs, c, c_rs, n_rows, n_quads, n_taps, a_tap, b_tap):
        return i64_call(11, name, emit)

    tile._set_uuid(f"dasllama.intdot.{name}")      # stable across processes: see simd.py
    _tiles[key] = tile
    return tile


# --- weights ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class IntWeights:
    """A constant int8/uint8 weight ready for the tiles: N output rows over taps x quads."""
    rows: np.ndarray      # (N, taps * quads * 4) int8, tap-major, uint8 weights as w - 128
    zero: np.ndarray      # (N,) int32: the zero point in the same offset
    sums: np.ndarray      # (N,) int32: each row's sum
    n_taps: int
    n_quads: int          # quads of input channels (or of the summed axis) per tap
    n_sum: int            # the true length of the sum: taps * input channels
    wide: np.ndarray = None   # (N, taps * quads * 4) int16 w - zero point, CPUs without VNNI
    tiles: np.ndarray = None  # amx.pack_weights' B tiles, where the AMX conv takes these weights

    @property
    def n_out(self):
        return self.rows.shape[0]


def as_signed(w, zero_point, n_out):
    """w as int8 (uint8 moved by -128) and its (n_out,) int32 zero point in the same offset."""
    zp = np.broadcast_to(np.asarray(zero_point, np.int32).reshape(-1), (n_out,))
    if w.dtype == np.uint8:
        return (w.astype(np.int16) - 128).astype(np.int8), (zp - 128).astype(np.int32)
    return w.astype(np.int8, copy=False), zp.astype(np.int32)


def int_weights(w, zero_point):
    """ConvInteger's W (C_out, C_in, K) or MatMulInteger's B (K, N) (as (N, K, 1) below:
    one tap) with its zero point (scalar or per output) -> IntWeights."""
    if w.ndim == 2:
        w = w.T[:, :, None]                               # (N, K, 1)
    n_out, c_in, n_taps = w.shape
    ws, zp = as_signed(w, zero_point, n_out)
    n_quads = -(-c_in // 4)
    rows = np.zeros((n_out, n_taps, n_quads * 4), np.int8)
    rows[:, :, :c_in] = ws.transpose(0, 2, 1)
    weights = IntWeights(rows.reshape(n_out, -1), zp, ws.reshape(n_out, -1).sum(1, dtype=np.int64).astype(np.int32),
                         n_taps, n_quads, c_in * n_taps)
    if amx_takes(weights):
        tiles = amx.pack_weights(weights.rows, n_taps, c_in)
        weights = replace(weights, tiles=empty_aligned(tiles.shape, np.int8))
        weights.tiles[...] = tiles
    return weights if VNNI else replace(weights, wide=widened_rows(weights))


# AMX's tiles where the OS grants them, for outputs in whole 2 x 2 tile blocks and sums long
# enough that padding the channels to 64 costs little (a 22-channel 1 x 1 conv ran 2x slower)
AMX_TILES = (2, 2)
AMX_MIN_SUM = 128


def amx_takes(weights):
    return amx.AMX and weights.n_out % (amx.TILE * AMX_TILES[1]) == 0 and weights.n_sum >= AMX_MIN_SUM


def widened_rows(weights):
    """(N, taps * quads * 4) int16: w - zero point, 0 in the padded channels: the rows the
    widening loop (_widened_product) reads."""
    c_in = weights.n_sum // weights.n_taps
    rows = (weights.rows.reshape(weights.n_out, weights.n_taps, -1).astype(np.int16)
            - weights.zero.astype(np.int16)[:, None, None])
    rows[:, :, c_in:] = 0
    return rows.reshape(weights.n_out, -1)


# --- packing the activations -----------------------------------------------------------------

_SUM_BLOCK = 2048           # positions a thread sums over the quads at once (its col_sums in L1)


@njit(**PAR)
def _pack_channels(x, pad_left, pad_value, x4, col_sums):
    """x (C, T) uint8 -> x4 (C/4 rounded up, n, 4): x4[c // 4, pad_left + j, c % 4] = x[c, j],
    pad_value in the padding, 0 in the channels past C; col_sums[j] = the sum over real
    channels at padded position j."""
    c_in, n = x.shape
    n_quads, n_pos = x4.shape[0], x4.shape[1]
    for q in prange(n_quads):
        for j in range(n_pos):
            for i in range(4):
                x4[q, j, i] = pad_value if 4 * q + i < c_in else 0
        if 4 * q + 4 <= c_in:      # a whole quad: four rows interleaved in one pass
            r0, r1, r2, r3 = x[4 * q], x[4 * q + 1], x[4 * q + 2], x[4 * q + 3]
            for j in range(n):
                x4[q, pad_left + j, 0] = r0[j]
                x4[q, pad_left + j, 1] = r1[j]
                x4[q, pad_left + j, 2] = r2[j]
                x4[q, pad_left + j, 3] = r3[j]
        else:
            for i in range(c_in - 4 * q):
                row = x[4 * q + i]
                for j in range(n):
                    x4[q, pad_left + j, i] = row[j]
    for block in prange((n_pos + _SUM_BLOCK - 1) // _SUM_BLOCK):
        j0, j1 = block * _SUM_BLOCK, min(n_pos, (block + 1) * _SUM_BLOCK)
        for j in range(j0, j1):
            col_sums[j] = 0
        for q in range(n_quads):
            for j in range(j0, j1):
                col_sums[j] += np.int32(x4[q, j, 0]) + np.int32(x4[q, j, 1]) + np.int32(x4[q, j, 2]) + np.int32(x4[q, j, 3])


@njit(**PAR)
def _pack_rows(a, x4, row_sums):
    """a (M, K) uint8 -> x4 (K/4 rounded up, >= M, 4): x4[k // 4, m, k % 4] = a[m, k], zeros
    past K; row_sums[m] = the sum of a[m]."""
    m, k = a.shape
    n_quads = x4.shape[0]
    for q in prange(n_quads):
        for j in range(x4.shape[1]):
            for i in range(4):
                x4[q, j, i] = a[j, 4 * q + i] if j < m and 4 * q + i < k else 0
    for j in range(m):
        s = np.int32(0)
        for i in range(k):
            s += np.int32(a[j, i])
        row_sums[j] = s


# --- the drivers -----------------------------------------------------------------------------

_kernels = {}


def product_kernel(rows, width, lanes, vnni):
    """run(w_rows, zero, sums, n_taps, n_quads, n_sum, x4, act_sums, act_zero, dilation, out):
    out (N, n_lanes int32) = the exact sum over taps, quads of (x - act_zero) (w - zero), x4
    (quads, positions, 4) u8 shifted by `dilation` positions a tap; out's width a multiple of
    `lanes`, act_sums[t] the sum of the activations lane t reads."""
    key = (rows, width, lanes, vnni)
    if key in _kernels:
        return _kernels[key]
    main = quad_tile(rows, width, lanes, vnni, False)
    single = quad_tile(rows, 1, lanes, vnni, False)
    span = width * lanes

    @njit(**PAR)
    def run(w_rows, zero, sums, n_taps, n_quads, n_sum, x4, act_sums, act_zero, dilation, out):
        n_out, n_lanes = out.shape
        n_vec = n_lanes // lanes
        n_main = n_vec // width
        n_items = n_main + n_vec - n_main * width        # full spans, then single vectors
        n_row_tiles = (n_out + rows - 1) // rows
        # enough jobs for the threads when there are few lanes (a matmul over 97 tokens)
        n_blocks = max(1, min(n_row_tiles, (16 + n_items - 1) // n_items))
        base = np.empty(n_out, np.int32)
        for n in range(n_out):     # the terms of za, as int64 wrapped to int32
            base[n] = np.int32(np.int64(act_zero) * (np.int64(n_sum) * zero[n] - sums[n]))
        wa, xa, oa = w_rows.ctypes.data, x4.ctypes.data, out.ctypes.data
        w_rs, x_rs, o_rs = w_rows.strides[0], x4.strides[0], out.strides[0]
        tap_a, tap_b = n_quads * 4, dilation * 4
        for job in prange(n_items * n_blocks):
            item, block = job // n_blocks, job % n_blocks
            t0 = item * span if item < n_main else (n_main * width + item - n_main) * lanes
            t1 = t0 + (span if item < n_main else lanes)
            r0 = rows * (n_row_tiles * block // n_blocks)
            r1 = min(n_out, rows * (n_row_tiles * (block + 1) // n_blocks))
            for n in range(r0, r1):         # the zero-point terms, then the tiles add sum a w
                for t in range(t0, t1):
                    out[n, t] = base[n] - zero[n] * act_sums[t]
            for r in range(r0, r1, rows):
                args = (wa + r * w_rs, w_rs, xa + t0 * 4, x_rs, oa + r * o_rs + t0 * 4, o_rs,
                        min(rows, r1 - r), n_quads, n_taps, tap_a, tap_b)
                if item < n_main:
                    main(*args)
                else:
                    single(*args)

    _kernels[key] = run
    return run


# Without VNNI the tile's sums in plain IR ran 4x slower than numba's widening loop (an AVX2
# build, NUMBA_CPU_FEATURES, on the 128 x 128 x 11 conv: 235 ms against 60 ms): that loop
# stays the path there (kernel None), the tile variants only tested.
_run = product_kernel(ROWS, WIDTH, LANES, VNNI) if VNNI else None


@njit(**PAR)
def _widened_product(a, a_zp, wide, out):
    """out (M, N) int32 = (a (M, K) uint8 - a_zp) . wide[:, :K] (N, >= K int16), exact: int16
    products summed in int32, which LLVM vectorises to vpmaddwd."""
    m, k = a.shape
    for i in prange(m):
        row = np.empty(k, np.int16)
        for j in range(k):
            row[j] = np.int16(a[i, j]) - a_zp
        for c in range(wide.shape[0]):
            acc = np.int32(0)
            for j in range(k):
                acc += np.int32(row[j]) * np.int32(wide[c, j])
            out[i, c] = acc


@njit(**PAR)
def _im2col(x, pad_left, pad_value, n_taps, dilation, n_chan, cols):
    """cols (T_out, taps * n_chan) uint8: cols[t, tap * n_chan + c] = x[c] padded with
    pad_value, at t + tap * dilation; 0 in the channels past x's."""
    c_in, n = x.shape
    for t in prange(cols.shape[0]):
        for tap in range(n_taps):
            p = t + tap * dilation - pad_left
            for c in range(n_chan):
                v = pad_value if p < 0 or p >= n else x[min(c, c_in - 1), p]
                cols[t, tap * n_chan + c] = v if c < c_in else np.uint8(0)


def _wide(weights):
    return weights.wide if weights.wide is not None else widened_rows(weights)


@njit(**PAR)
def scale_rows(acc, bias, scale, residual, out):
    """out (N, T) float32 = float32(acc (N, T) int32 + bias[n]) * scale (+ residual (N, T),
    (0, 0) for none): ORT's Add, Cast and Mul after a quantised conv, in that order, and the
    resblock's skip Add after them, one pass."""
    with_residual = residual.shape[0] == acc.shape[0]
    for n in prange(acc.shape[0]):
        b = bias[n]
        if with_residual:
            for t in range(acc.shape[1]):
                out[n, t] = np.float32(acc[n, t] + b) * scale + residual[n, t]
        else:
            for t in range(acc.shape[1]):
                out[n, t] = np.float32(acc[n, t] + b) * scale


def _lanes_for(n):
    return -(-n // LANES) * LANES


def conv_int(x, x_zero_point, weights, pads=(0, 0), dilation=1, kernel=_run):
    """ConvInteger at stride 1: x (C_in, T) uint8, weights from int_weights(W (C_out, C_in, K))
    -> (C_out, T_out) int32 (a view: lanes past T_out cut); padding holds x_zero_point, as ORT
    pads. kernel: a product_kernel whose lanes divide LANES (the machine's by default), None
    for the widening loop over im2col columns."""
    c_in, n = x.shape
    reach = dilation * (weights.n_taps - 1)
    n_out = n + pads[0] + pads[1] - reach
    if kernel is None:
        cols = np.empty((n_out, weights.n_taps * weights.n_quads * 4), np.uint8)
        _im2col(x, pads[0], np.uint8(x_zero_point), weights.n_taps, dilation, weights.n_quads * 4, cols)
        out = np.empty((n_out, weights.n_out), np.int32)
        _widened_product(cols, np.int16(x_zero_point), _wide(weights), out)
        return out.T
    n_lanes = _lanes_for(n_out)
    x4 = np.empty((weights.n_quads, n_lanes + reach, 4), np.uint8)
    col_sums = np.empty(n_lanes + reach, np.int32)
    _pack_channels(x, pads[0], np.uint8(x_zero_point), x4, col_sums)
    act_sums = col_sums[:n_lanes].copy()
    for tap in range(1, weights.n_taps):
        act_sums += col_sums[tap * dilation:tap * dilation + n_lanes]
    out = np.empty((weights.n_out, n_lanes), np.int32)
    kernel(weights.rows, weights.zero, weights.sums, weights.n_taps, weights.n_quads, weights.n_sum,
         x4, act_sums, np.int32(x_zero_point), dilation, out)
    return out[:, :n_out]


def conv_int_scaled(x, x_zero_point, weights, pads, dilation, bias, scale, residual=None):
    """float32(conv_int(...) + bias) * scale (+ residual): ConvInteger at stride 1 and the
    scaling after it (scale_rows), x (C_in, T) uint8, bias (C_out,) int32, scale float32,
    residual (C_out, T_out) float32 or None ((0, 0) also) -> (C_out, T_out) float32; on AMX tiles where
    the weights have them (one pass: the tiles' sums are scaled as they are stored)."""
    residual = _NONE if residual is None else residual
    if weights.tiles is None:
        acc = conv_int(x, x_zero_point, weights, pads, dilation)
        out = np.empty(acc.shape, np.float32)
        scale_rows(acc, bias, scale, residual, out)
        return out
    c_in, n = x.shape
    reach = dilation * (weights.n_taps - 1)
    n_out = n + pads[0] + pads[1] - reach
    span = amx.TILE * AMX_TILES[0]
    n_lanes = -(-n_out // span) * span
    xt = empty_aligned((n_lanes + reach, -(-c_in // 64) * 64), np.uint8)     # whole cache lines a tile row
    pos_sums = np.empty(n_lanes + reach, np.int32)
    amx.pack_positions(x, pads[0], np.uint8(x_zero_point), xt, pos_sums)
    act_sums = pos_sums[:n_lanes].copy()
    for tap in range(1, weights.n_taps):
        act_sums += pos_sums[tap * dilation:tap * dilation + n_lanes]
    out = np.empty((weights.n_out, n_out), np.float32)
    _amx_run(weights.tiles, weights.zero, weights.sums, weights.n_taps, weights.n_sum, xt, act_sums,
             np.int32(x_zero_point), dilation, bias, np.float32(scale), residual, out)
    return out


_amx_run = amx.scaled_conv_kernel(*AMX_TILES) if amx.AMX else None
_NONE = np.zeros((0, 0), np.float32)


def matmul_int_t(a, a_zero_point, weights, kernel=_run):
    """(a (M, K) uint8 - a_zero_point) @ (B - zero point), B given as int_weights(B (K, N)),
    transposed: -> (N, M) int32 (a view, lanes past M cut)."""
    m = a.shape[0]
    if kernel is None:
        out = np.empty((m, weights.n_out), np.int32)
        _widened_product(a, np.int16(a_zero_point), _wide(weights), out)
        return out.T
    n_lanes = _lanes_for(m)
    x4 = np.empty((weights.n_quads, n_lanes, 4), np.uint8)
    act_sums = np.zeros(n_lanes, np.int32)
    _pack_rows(a, x4, act_sums)
    out = np.empty((weights.n_out, n_lanes), np.int32)
    kernel(weights.rows, weights.zero, weights.sums, 1, weights.n_quads, weights.n_sum,
         x4, act_sums, np.int32(a_zero_point), 1, out)
    return out[:, :m]


def matmul_int(a, a_zero_point, weights, kernel=_run):
    """(a (M, K) uint8 - a_zero_point) @ (B - zero point) -> (M, N) int32, exact."""
    a = np.ascontiguousarray(a, np.uint8)
    return np.ascontiguousarray(matmul_int_t(a, a_zero_point, weights, kernel).T)


def matmul_int_ref(a, a_zero_point, b, b_zero_point):
    """The plain reference: int64 numpy, (M, K) x (K, N)."""
    return ((a.astype(np.int64) - int(a_zero_point)) @
            (b.astype(np.int64) - np.asarray(b_zero_point, np.int64))).astype(np.int32)


def conv_int_ref(x, x_zero_point, w, w_zero_point, pads=(0, 0), dilation=1):
    """The plain reference of conv_int: im2col and matmul_int_ref, (C_out, T_out) int32."""
    c_out, c_in, k = w.shape
    xp = np.pad(x, ((0, 0), tuple(pads)), constant_values=x_zero_point)
    n_out = xp.shape[1] - dilation * (k - 1)
    cols = np.stack([xp[:, tap * dilation:tap * dilation + n_out] for tap in range(k)], axis=2)   # (C_in, T_out, K)
    cols = cols.transpose(1, 0, 2).reshape(n_out, c_in * k)
    zp = np.asarray(w_zero_point).reshape(-1)
    return matmul_int_ref(cols, x_zero_point, w.reshape(c_out, c_in * k).T, zp).T

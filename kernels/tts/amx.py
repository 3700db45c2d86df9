"""Exact int8 products on AMX (Sapphire Rapids' tile unit) for ConvInteger: the sums of
intdot's VNNI tile, 16 x 16 int32 a tdpbusd (16 positions x 64 unsigned activation bytes
times 64 x 16 signed weight bytes), ~8x the products a cycle of vpdpbusd's.

A (the activations) is pack_positions' layout: one row a position, its channels contiguous
and padded to 64 with zeros, so a tap is the same tile one dilation of rows further and
the rows are 64-256 bytes apart (the channel-quad layout the VNNI tile reads put a tile's 16
rows ~120 KB apart on the decoder's 30000 frames, and ran 4x slower a tap). B (the weights)
is packed once at load as the 1 KB tiles tdpbusd reads, per block of 16 output channels, tap
and 64 input channels. A call sums a 32 x 32 block over all taps and channels into a
scratch tile; the driver turns each block's column of sums around and applies the
zero-point terms, the bias and the scale (and the resblock's skip Add) as it stores the
float32 output, so the int32 sums never go to memory.

The tile grant, its configuration and `DASLLAMA_AMX=0` are kernels/amx.py's.
"""
import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.extending import intrinsic

from .. import amx as shared
from ..ir import I8, I32, I64, Gen, i64_call, vec
from ..quants import JIT
from ..simd import _loop

QUADS = 16                  # quads of the summed axis a tile covers: 64 bytes a row
TILE = 16                   # rows (output channels) and columns (positions) of a C tile
AMX = shared.INT8

PAR = dict(JIT, parallel=True)
_tiles = {}


def amx_tile(m_tiles, n_tiles):
    """numba intrinsic tile(a, a_rs, b, b_blk, c, n_kb, n_taps, a_tap), addresses and strides
    in bytes as int64: C (16 m_tiles positions x 16 n_tiles int32 output channels, at c, rows
    64 n_tiles bytes apart) = sum over taps t and blocks k of 64 channels of A[t, k] . B[t, k]:
    A the unsigned activations, 64 bytes of position r at a + r*a_rs + t*a_tap + 64k; B the
    signed weights of output block j, 1 KB (16 quads x 16 channels x 4) at
    b + j*b_blk + (t*n_kb + k)*1024."""
    key = (m_tiles, n_tiles)
    if key in _tiles:
        return _tiles[key]
    assert m_tiles * n_tiles + m_tiles + n_tiles <= 8
    name = f"dasllama_amx_tile_{m_tiles}x{n_tiles}"

    def emit(b, args):
        g = Gen(b)
        a_addr, a_rs, b_addr, b_blk, c_addr, n_kb, n_taps, a_tap = args
        a_p, b_p, c_p = (b.inttoptr(v, I8.as_pointer()) for v in (a_addr, b_addr, c_addr))
        shared.configure(g)
        void = ir.VoidType()
        c_tile = lambda i, j: g.c(I8, i * n_tiles + j)
        a_tile = lambda i: g.c(I8, m_tiles * n_tiles + i)
        b_tile = lambda j: g.c(I8, m_tiles * n_tiles + m_tiles + j)
        c_rs = g.c(I64, 64 * n_tiles)
        for i in range(m_tiles):
            for j in range(n_tiles):
                g.intr("llvm.x86.tilezero", void, [c_tile(i, j)])
        a_step = b.mul(g.c(I64, TILE), a_rs)
        b_rows = [g.at(b_p, b.mul(g.c(I64, j), b_blk)) for j in range(n_tiles)]
        zero = [g.c(I64, 0)]

        def tap(t, acc):
            a_t = g.at(a_p, b.mul(t, a_tap))
            b_t = b.mul(b.mul(t, n_kb), g.c(I64, 1024))

            def block(k, acc):
                a_k = g.at(a_t, b.mul(k, g.c(I64, 64)))
                b_k = b.add(b_t, b.mul(k, g.c(I64, 1024)))
                for i in range(m_tiles):
                    g.intr("llvm.x86.tileloadd64", void, [a_tile(i), g.at(a_k, b.mul(g.c(I64, i), a_step)), a_rs])
                for j in range(n_tiles):
                    g.intr("llvm.x86.tileloadd64", void, [b_tile(j), g.at(b_rows[j], b_k), g.c(I64, 64)])
                for i in range(m_tiles):
                    for j in range(n_tiles):
                        g.intr("llvm.x86.tdpbusd", void, [c_tile(i, j), a_tile(i), b_tile(j)])
                return acc

            return _loop(g, g.c(I64, 0), n_kb, acc, block)

        _loop(g, g.c(I64, 0), n_taps, zero, tap)
        for i in range(m_tiles):
            for j in range(n_tiles):
                g.intr("llvm.x86.tilestored64", void,
                       [c_tile(i, j), g.at(c_p, 16 * i * 64 * n_tiles + 64 * j), c_rs])
        g.intr("llvm.x86.tilerelease", void, [])

    @intrinsic
    def tile(typingctx, a, a_rs, bb, b_blk, c, n_kb, n_taps, a_tap):
        return i64_call(8, name, emit)

    tile._set_uuid(f"dasllama.amx.{name}")      # stable across processes: see simd.py
    _tiles[key] = tile
    return tile


def transpose_tile():
    """numba intrinsic transpose(src, src_rs, dst, dst_rs), addresses and strides in bytes as
    int64: the 16 x 16 int32 at src into dst turned around (dst[c][r] = src[r][c]), in
    registers: four rounds of shuffles, each swapping one bit of the row with that of the
    column (the scalar loop it replaces read a column a lane at a time)."""
    name = "dasllama_amx_transpose16"
    if name in _tiles:
        return _tiles[name]
    vi = vec(I32, 16)

    def emit(b, args):
        g = Gen(b)
        src, src_rs, dst, dst_rs = args
        s_p, d_p = (b.inttoptr(v, I8.as_pointer()) for v in (src, dst))
        rows = [g.load(s_p, b.mul(g.c(I64, r), src_rs), vi) for r in range(16)]
        for bit in (8, 4, 2, 1):
            lo = [j if not j & bit else j - bit + 16 for j in range(16)]
            hi = [j + bit if not j & bit else j + 16 for j in range(16)]
            new = list(rows)
            for i in range(16):
                if i & bit:
                    continue
                new[i] = g.shuffle(rows[i], rows[i + bit], lo)
                new[i + bit] = g.shuffle(rows[i], rows[i + bit], hi)
            rows = new
        for r in range(16):
            ptr = b.bitcast(g.at(d_p, b.mul(g.c(I64, r), dst_rs)), vi.as_pointer())
            b.store(rows[r], ptr).align = 4

    @intrinsic
    def transpose(typingctx, src, src_rs, dst, dst_rs):
        return i64_call(4, name, emit)

    transpose._set_uuid(f"dasllama.amx.{name}")
    _tiles[name] = transpose
    return transpose


# --- packing ---------------------------------------------------------------------------------

def pack_weights(rows, n_taps, c_in):
    """IntWeights.rows (N, taps * quads * 4) int8 -> (N / 16, taps, blocks, 16, 16, 4) int8: per
    block of 16 output channels, tap and 64 input channels, the 1 KB B tile tdpbusd reads
    (element [q, n, i] = w[n, 4q + i]), zeros past c_in. N a multiple of 16."""
    n_out = rows.shape[0]
    n_kb = -(-c_in // 64)
    w = np.zeros((n_out, n_taps, n_kb * 64), np.int8)
    w[:, :, :c_in] = rows.reshape(n_out, n_taps, -1)[:, :, :c_in]
    w = w.reshape(n_out // TILE, TILE, n_taps, n_kb, QUADS, 4)      # (nb, n, tap, kb, q, i)
    return np.ascontiguousarray(w.transpose(0, 2, 3, 4, 1, 5))


@njit(**PAR)
def pack_positions(x, pad_left, pad_value, xt, row_sums):
    """x (C, T) uint8 -> xt (positions, C rounded up to 64): xt[pad_left + j, c] = x[c, j],
    pad_value at the padded positions, 0 in the channels past C; row_sums[p] = the sum of
    position p's real channels. One pass a position (gathered down x's rows, which stay in
    cache over a block of 64): 1.2-2.7x the scatter along each row."""
    c_in, n = x.shape
    n_pos, width = xt.shape
    for blk in prange((n_pos + 63) // 64):
        for p in range(blk * 64, min(n_pos, blk * 64 + 64)):
            j = p - pad_left
            dst = xt[p]
            s = np.int32(0)
            if j < 0 or j >= n:
                for c in range(c_in):
                    dst[c] = pad_value
                s = np.int32(pad_value) * c_in
            else:
                for c in range(c_in):
                    v = x[c, j]
                    dst[c] = v
                    s += np.int32(v)
            for c in range(c_in, width):
                dst[c] = 0
            row_sums[p] = s


# --- the driver ------------------------------------------------------------------------------

_kernels = {}
GROUP = 8                   # spans of positions a job scales at once


def scaled_conv_kernel(m_tiles, n_tiles):
    """run(wp, zero, sums, n_taps, n_sum, xt, act_sums, act_zero, dilation, bias, scale,
    residual, out): out (N, T) float32 = float32(sum over taps and channels of
    (x - act_zero)(w - zero) + bias) * scale (+ residual (N, T); (0, 0) for none), the sums
    exact in int32 as ORT's ConvInteger, the float ops as its Add, Cast, Mul (and the skip
    Add) in that order. wp: pack_weights'; xt: pack_positions' (positions n_lanes + reach,
    n_lanes a multiple of 16 m_tiles); act_sums[t] the sum of the activations output t reads."""
    key = (m_tiles, n_tiles)
    if key in _kernels:
        return _kernels[key]
    tile = amx_tile(m_tiles, n_tiles)
    transpose = transpose_tile()
    span, rows = TILE * m_tiles, TILE * n_tiles

    @njit(**PAR)
    def run(wp, zero, sums, n_taps, n_sum, xt, act_sums, act_zero, dilation, bias, scale, residual, out):
        n_out, n_t = out.shape
        n_blocks = n_out // rows
        n_spans = (n_t + span - 1) // span
        n_kb = xt.shape[1] // 64
        with_residual = residual.shape[0] == n_out
        base = np.empty(n_out, np.int32)
        for n in range(n_out):     # the terms of za, as int64 wrapped to int32
            base[n] = np.int32(np.int64(act_zero) * (np.int64(n_sum) * zero[n] - sums[n]))
        xa, wa = xt.ctypes.data, wp.ctypes.data
        x_rs = xt.strides[0]
        b_blk = n_taps * n_kb * 1024
        n_groups = (n_spans + GROUP - 1) // GROUP
        for job in prange(n_groups * n_blocks):     # GROUP spans by one block of rows a job
            g, blk = job // n_blocks, job % n_blocks
            acc = np.empty((span, rows), np.int32)      # (positions, output channels): a tile's sums
            acc_t = np.empty((rows, span * GROUP), np.int32)
            t0 = g * span * GROUP
            t1 = min(n_t, t0 + span * GROUP)
            act = act_sums[t0:t1]
            r0 = blk * rows
            for s in range((t1 - t0 + span - 1) // span):
                tile(xa + (t0 + s * span) * x_rs, x_rs, wa + (r0 // TILE) * b_blk, b_blk,
                     acc.ctypes.data, n_kb, n_taps, dilation * x_rs)
                for i in range(m_tiles):             # acc's 16 x 16 blocks turned into acc_t
                    for j in range(n_tiles):
                        transpose(acc.ctypes.data + (16 * i * rows + 16 * j) * 4, rows * 4,
                                  acc_t.ctypes.data + (16 * j * span * GROUP + s * span + 16 * i) * 4,
                                  span * GROUP * 4)
            for r in range(rows):               # 1-D views: numba vectorises these
                n = r0 + r
                a, z, b = base[n], zero[n], bias[n]
                o, ac = out[n, t0:t1], acc_t[r]
                if with_residual:     # the int32 sum ConvInteger gives, then + bias as scale_rows
                    res = residual[n, t0:t1]
                    for t in range(t1 - t0):
                        v = np.int32(ac[t] + (a - z * act[t]))
                        o[t] = np.float32(v + b) * scale + res[t]
                else:
                    for t in range(t1 - t0):
                        v = np.int32(ac[t] + (a - z * act[t]))
                        o[t] = np.float32(v + b) * scale

    _kernels[key] = run
    return run

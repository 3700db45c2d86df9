"""Float32-accurate 1-D convolutions on AMX-BF16 tiles (kernels/amx.py's bf16_gemm), time-major:
x (T, C_in) -> out (T', C_out), for HiFi-GAN's decoder where AMX is granted.

Time-major because a tile's rows are then positions with their channels contiguous: a tap is
the same tile `dilation` rows further (no windows repeating the reach), the output tile is
stored as the next conv's input, and a ConvTranspose's polyphase output, (frames, stride x
C_out), is already its (samples, C_out). The input pass applies the leaky ReLU and splits each
value into its bf16 parts; the output starts as bias (+ residual) and the tiles add into it.
The weights are split and packed once, as the 1 KB B tiles tdpbf16ps reads.
"""
import numpy as np
from numba import njit

from .. import amx
from ..ir import f32_bits
from ..quants import JIT

# hi.hi + lo.hi + hi.lo: each product to ~2^-17; in HiFi-GAN Piper's verify error is no larger
# than with float32 products (the six passes of three parts, float32's accuracy, cost 1.3-1.5x a
# sentence there for no gain). The VITS flow needs the six: with three its error is 1.6x verify's
# bound.
PASSES = amx.PASSES_2
# C tiles a call, 16 positions by 16 output channels each: 1 x 2 holds both parts of A and of B
# in tiles of their own (a tile is not renamed: reloading one waits for the products reading
# it). One thread, 64-byte aligned, 4096 positions, three passes: 636-993 GF/s of float32
# products on the resblock shapes, 2 x 2 604-936, 2 x 1 642-977 (load 6).
TILES = (1, 2)
# six passes (three parts: A's and B's tiles do not fit beside the C tiles) reload the parts
# in turn, and 2 x 2 C tiles hide it better: the flow's k 5 192 -> 384 over 512 frames
# 369 against 253-265 GF/s, the encoder's k 3 192 -> 768 324-331 against 196-210 (load 7)
TILES_6 = (2, 2)
M_SPAN, N_SPAN = 32, 32     # positions and output channels padded to: both tile shapes' blocks


class TimeMajorTaps:
    """A conv's taps (K, C_out, C_in) split and packed for conv_time_major: tiles (parts,
    C_out / 16, K, C_in / 32, 16, 16, 2) bf16 bits, element [p, nb, k, kb, r, n, e] = part p of
    taps[k, 16 nb + n, 32 kb + 2r + e], zeros past C_out and C_in (padded to N_SPAN and 32)."""

    def __init__(self, taps, bias, passes=PASSES):
        self.passes, self.n_parts = tuple(passes), amx.n_parts(passes)
        self.run = conv_kernel(self.passes)
        n_taps, c_out, c_in = taps.shape
        self.n_taps, self.c_out, self.c_in = n_taps, c_out, c_in
        self.c_out_pad, self.c_in_pad = amx.pad_to(c_out, N_SPAN), amx.pad_to(c_in, 32)
        parts = amx.bf16_parts(taps, self.n_parts)              # (p, k, co, ci)
        self.tiles = amx.zeros_aligned((self.n_parts, self.c_out_pad // amx.TILE, n_taps, self.c_in_pad // 32,
                                        amx.TILE, amx.TILE, 2), np.uint16)
        _pack_taps(parts, self.tiles)
        self.bias = amx.zeros_aligned((self.c_out_pad,), np.float32)   # the tiles' start: (c_out_pad,)
        if bias is not None:
            self.bias[:c_out] = bias


@njit(**JIT)
def _pack_taps(parts, tiles):
    """tiles[p, co // 16, k, ci // 32, ci % 32 // 2, co % 16, ci % 2] = parts[p, k, co, ci]."""
    n_parts, n_taps, c_out, c_in = parts.shape
    for p in range(n_parts):
        for k in range(n_taps):
            for co in range(c_out):
                for ci in range(c_in):
                    tiles[p, co // 16, k, ci // 32, ci % 32 // 2, co % 16, ci % 2] = parts[p, k, co, ci]


_split_2, _split_3 = amx.split_row(2), amx.split_row(3)
_NONE = np.zeros((0, 0), np.float32)
_NO_BIAS = np.zeros(0, np.float32)


@njit(**JIT)
def pack_input(x, pad_left, slope, xt, out, bias, accumulate):
    """xt[p, i, c] = part p of leaky_relu(x[i - pad_left, c], slope) (zero outside x and past
    C_in): x (T, C_in) float32 with contiguous rows, xt (2 or 3 parts, rows, C_in padded to 32)
    bf16 bits. Where out is not (0, 0), also out[t] = x[t] + bias (the output of a conv whose
    residual is its input, C_out = C_in a multiple of 16, started in the same pass), or
    out[t] += that where accumulate."""
    n, c_in = x.shape
    n_parts, n_rows, width = xt.shape
    xt[:, :, c_in:] = 0
    slope_bits = f32_bits(slope)
    n_vec = c_in // 16 * 16
    copy = out.shape[0] > 0
    for i in range(n_rows):
        j = i - pad_left
        if j < 0 or j >= n:
            xt[:, i, :c_in] = 0
            continue
        src, dst, part = x.ctypes.data + j * x.strides[0], xt.ctypes.data + i * width * 2, n_rows * width * 2
        dst_out = out.ctypes.data + j * out.strides[0] if copy else 0
        if n_parts == 2:
            _split_2(src, dst, part, n_vec, slope_bits, dst_out, bias.ctypes.data, accumulate)
        else:
            _split_3(src, dst, part, n_vec, slope_bits, dst_out, bias.ctypes.data, accumulate)
        for c in range(n_vec, c_in):
            v = x[j, c]
            v = max(v, v * slope)
            for p in range(n_parts):
                h = amx.bf16_round(v)
                xt[p, i, c] = h
                v = v - amx.bf16_value(h)


@njit(**JIT)
def init_output(bias, residual, out, accumulate):
    """out[t, c] = bias[c] + residual[t, c] (+ out[t, c] where accumulate): the rows of the
    residual (n_res, C_out), out (rows >= n_res, C_out padded)."""
    n_res, c_res = residual.shape
    for t in range(n_res):
        row, res = out[t], residual[t]
        if accumulate:
            for c in range(c_res):
                row[c] += bias[c] + res[c]
        else:
            for c in range(c_res):
                row[c] = bias[c] + res[c]


_kernels = {}


def conv_kernel(passes):
    """run(xt, tiles, n_taps, dilation, out, t_lo, t_hi, bias): out[t_lo:t_hi] += the conv of
    pack_input's xt by TimeMajorTaps' tiles with this pass list (out = bias + the conv where
    bias is given, not (0,)), M_SPAN positions a block."""
    if passes in _kernels:
        return _kernels[passes]
    tiles_mn = TILES_6 if len(passes) > 3 else TILES
    gemm = amx.bf16_gemm(*tiles_mn, passes)
    m_span, n_tiles = amx.TILE * tiles_mn[0], tiles_mn[1]

    @njit(**JIT)
    def run(xt, tiles, n_taps, dilation, out, t_lo, t_hi, bias):
        n_parts, n_rows, width = xt.shape
        n_cols = out.shape[1]
        n_kb = width // 32
        a_rs, c_rs = width * 2, n_cols * 4
        b_ns = n_taps * n_kb * 1024
        c = out.ctypes.data + t_lo * c_rs
        if bias.shape[0] > 0:            # each block starts as the bias, its rows loaded with stride 0
            s, s_rs, s_ib = bias.ctypes.data, 0, 0
        else:
            s, s_rs, s_ib = c, c_rs, m_span * c_rs
        gemm(xt.ctypes.data + t_lo * a_rs, a_rs, 64, n_rows * a_rs, dilation * a_rs, m_span * a_rs,
             tiles.ctypes.data, 64, 1024, b_ns, tiles.size // n_parts * 2, n_kb * 1024, n_tiles * b_ns,
             c, c_rs, m_span * c_rs, 64 * n_tiles, s, s_rs, s_ib, 64 * n_tiles,
             n_kb, n_taps, (t_hi - t_lo) // m_span, n_cols // (16 * n_tiles))

    _kernels[passes] = run
    return run


def conv_time_major(x, taps, pads, dilation=1, slope=1.0, residual=None, pool=None, n_parts=1,
                    out=None, accumulate=False):
    """residual + conv1d(leaky_relu(x, slope)) time-major: x (T, C_in) float32, taps a
    TimeMajorTaps, residual (n_out, C_out) or None -> (n_out, C_out), n_out = T + pads -
    dilation * (K - 1), a view of rows and channels padded. pool: an executor to split the
    positions over in n_parts (the kernel frees the GIL). out: the buffer to write, (n_out
    padded to M_SPAN, C_out padded) from out_buffer, and with accumulate (and a residual) the
    result is added to what it holds (a sum of resblocks without a pass of its own)."""
    reach = dilation * (taps.n_taps - 1)
    n_out = x.shape[0] + pads[0] + pads[1] - reach
    n_pos = amx.pad_to(n_out, M_SPAN)
    xt = amx.empty_aligned((taps.n_parts, n_pos + reach, taps.c_in_pad), np.uint16)
    if accumulate and residual is None:
        raise ValueError("conv_time_major accumulates a conv with a residual only")
    if out is None:
        out = out_buffer(n_out, taps)
    # a resblock's conv, residual its own input: the output starts in the input's pass (its
    # rows past n_out are never read, and need no start)
    fused = residual is x and n_out == x.shape[0] and taps.c_out == taps.c_out_pad == x.shape[1] \
        and x.shape[1] % 16 == 0 and x.flags.c_contiguous
    if x.strides[1] != 4:
        x = np.ascontiguousarray(x)
    pack_input(x, pads[0], np.float32(slope), xt, out if fused else _NONE, taps.bias, accumulate)
    if residual is not None and not fused:
        init_output(taps.bias, residual, out, accumulate)
    start = taps.bias if residual is None else _NO_BIAS
    n_parts = min(n_parts, n_pos // M_SPAN) if pool is not None else 1
    if n_parts > 1:
        bounds = [M_SPAN * (n_pos // M_SPAN * i // n_parts) for i in range(n_parts + 1)]
        list(pool.map(lambda i: taps.run(xt, taps.tiles, taps.n_taps, dilation, out, bounds[i], bounds[i + 1], start),
                      range(n_parts)))
    else:
        taps.run(xt, taps.tiles, taps.n_taps, dilation, out, 0, n_pos, start)
    return out[:n_out, :taps.c_out]


def out_buffer(n_out, taps):
    """The (n_out padded to M_SPAN, C_out padded) float32 a conv by `taps` writes."""
    return amx.empty_aligned((amx.pad_to(n_out, M_SPAN), taps.c_out_pad), np.float32)


def polyphase_taps(weight, stride):
    """A ConvTranspose's weight (C_in, C_out, K) as the taps (M, stride C_out, C_in) of a conv
    with M = ceil(K / stride) taps and M - 1 zeros of padding either side: its output row q,
    as (stride, C_out), is the transposed conv's samples q*stride .. q*stride + stride - 1."""
    c_in, c_out, k = weight.shape
    m = -(-k // stride)
    w = np.zeros((c_in, c_out, m * stride), np.float32)
    w[:, :, :k] = weight
    w = w.reshape(c_in, c_out, m, stride)[:, :, ::-1]            # tap k' reads x[q - (M-1-k')]
    return np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(m, stride * c_out, c_in))


def conv_transpose_time_major(x, taps, stride, pad, n_out, slope=1.0, pool=None, n_parts=1):
    """ConvTranspose1d(leaky_relu(x, slope)) time-major through polyphase_taps' conv: x (T, C_in)
    -> (n_out, C_out), the samples from `pad` on."""
    m = taps.n_taps
    y = conv_time_major(x, taps, (m - 1, m - 1), 1, slope, None, pool, n_parts)  # (T + M - 1, stride C_out)
    return y.reshape(-1, taps.c_out // stride)[pad:pad + n_out]

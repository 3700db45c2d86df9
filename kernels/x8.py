"""Q8_0 weights repacked in groups of 8 rows for prefill: 8 rows a vector, the token broadcast.

The register tiles of simd.py hold one (row, token) pair per accumulator, ggml's 8 int32 lanes
of the block dot side by side; each pair's fold then needs its own scale product dw*dx spread
over 8 lanes (a vmulss and a vbroadcastss) beside psign, pmaddubsw, pmaddwd, vcvtdq2ps and
the fma: 7 vector operations a pair and block. On the Zen 3 measured here a tile's time goes
with that count (~0.45 cycles an operation), not with its shape or its spills. Here a vector
holds one lane of 8 rows instead: lane l of the 32-byte block is elements 4l..4l+3, and

    acc[l] (8 rows) += (dw[8 rows] * dx) * f32(sum over the 4 elements of w[row] * x)

is ggml's fma for that lane, for 8 rows at once, with the 4 token bytes broadcast (one
vpbroadcastd, a load) and the 8 rows' bytes of the lane one 32-byte load. The scale product
is one vmulps per block for all 8 lanes; per pair and block there remain psign, pmaddubsw,
pmaddwd, vcvtdq2ps and the fma (~2.4 cycles a lane step, against ~3 for a pair in the 4x4
tile: 1.3-1.4x the GFLOP/s on gemma3's shapes). Each row's result is then ggml's
hsum_float_8 of its 8 lanes, done across the 8 lane vectors at once. Every int32 lane and
every rounding is the gemv's (dots.dot_ref, llama.cpp's vec_dot_q8_0_q8_0 and tinyBLAS), so
results are bit for bit the plain kernels'.

The product sign goes on the weights: pmaddubsw(|x|, sign(w by x)), with |x| computed once per
call. That is exact while no weight quant is -128 (whose negation wraps); ggml's quantiser
never writes one, and `repack` declines a matrix that has one, which then keeps the plain
layout.

Layout (Q8_0_X8): per group of 8 rows, per block: the 8 rows' scales as f32 (32 bytes), then
lanes 0..7, each the 8 rows' 4 bytes of that lane (32 bytes): 288 bytes, 36 a row and block.
"""
import numba
import numpy as np
from numba import njit
from numba.extending import intrinsic

from .ir import I8, I32, I64, V8F32, V16I16, V32I8, Gen, i64_call, keep_alive
from .quants import BLOCK_BYTES, JIT, Q8_0_X8, f16_at

GROUP = 8
_GROUP_BLOCK_BYTES = int(BLOCK_BYTES[Q8_0_X8]) * GROUP     # 288
_ACT_CHUNK_BYTES = 256 * 1024   # tokens per pass over the row groups: x and |x| stay in L2


def applies(n_rows, n_cols):
    """Whether a matrix of this shape can take the layout (rows in whole groups)."""
    return n_rows % GROUP == 0 and n_cols % 32 == 0


def repack(blocks, n_rows, n_cols, out=None):
    """The Q8_0 matrix (n_rows x n_cols, its bytes) in the Q8_0_X8 layout (into `out` if
    given: n_rows * n_cols / 32 * 36 bytes), or None where that does not apply: a shape not
    `applies`, or a quant of -128 (see the module note)."""
    if not applies(n_rows, n_cols):
        return None
    src = np.ascontiguousarray(blocks).reshape(-1)
    if out is None:
        out = np.empty(n_rows * (n_cols // 32) * int(BLOCK_BYTES[Q8_0_X8]), np.uint8)
    return out if _repack(src, n_rows // GROUP, n_cols // 32, out) else None


@njit(**JIT, parallel=True)
def _repack(src, n_groups, n_blocks, out):
    """Fill out from the Q8_0 rows in src; False if a quant is -128."""
    bad = 0
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * _GROUP_BLOCK_BYTES
            scales = out[o:o + 32].view(np.float32)
            for r in range(GROUP):
                p = ((grp * GROUP + r) * n_blocks + blk) * 34
                scales[r] = f16_at(src, p)
                for e in range(32):
                    q = src[p + 2 + e]
                    bad += q == 0x80
                    out[o + 32 + 32 * (e // 4) + 4 * r + e % 4] = q
    return bad == 0


def _emit_tile(b, a):
    """for each token: for each block: 8 lane fmas over 8 rows; then the 8 rows' hsum8."""
    g = Gen(b)
    w = b.inttoptr(a[0], I8.as_pointer())
    n_blocks = a[1]
    x, x_stride = b.inttoptr(a[2], I8.as_pointer()), a[3]
    xabs, xabs_stride = b.inttoptr(a[4], I8.as_pointer()), a[5]
    xd, xd_stride, n_tok = b.inttoptr(a[6], I8.as_pointer()), a[7], a[8]
    out, out_stride = b.inttoptr(a[9], I8.as_pointer()), a[10]
    ones = g.c(V16I16, 1)
    from .simd import _loop

    def token(t, carry):
        xt, at = g.at(x, b.mul(t, x_stride)), g.at(xabs, b.mul(t, xabs_stride))
        dt = g.at(xd, b.mul(t, xd_stride))

        def block(blk, acc):
            wb = g.at(w, b.mul(blk, g.c(I64, _GROUP_BLOCK_BYTES)))
            scale = b.fmul(g.load(wb, 0, V8F32), g.splat(g.f32(dt, b.mul(blk, g.c(I64, 4))), 8))
            new = []
            for lane in range(8):
                off = b.add(b.mul(blk, g.c(I64, 32)), g.c(I64, 4 * lane))
                xs = b.bitcast(g.splat(g.load(xt, off, I32), 8), V32I8)
                xa = b.bitcast(g.splat(g.load(at, off, I32), 8), V32I8)
                ints = g.maddwd(g.maddubs(xa, g.psign(g.load(wb, 32 + 32 * lane, V32I8), xs)), ones)
                new.append(g.fma(scale, g.cvt(ints), acc[lane]))
            return new

        acc = _loop(g, g.c(I64, 0), n_blocks, [g.c(V8F32, 0.0)] * 8, block)
        # hsum_float_8 of each row, lanes (0+4 + 2+6) + (1+5 + 3+7), then + 0.0 as the gemv's
        # fold adds its (empty) leftover sum
        s = [b.fadd(acc[i], acc[i + 4]) for i in range(4)]
        rows = b.fadd(b.fadd(b.fadd(s[0], s[2]), b.fadd(s[1], s[3])), g.c(V8F32, 0.0))
        st = b.store(rows, b.bitcast(g.at(out, b.mul(t, out_stride)), V8F32.as_pointer()))
        st.align = 4
        return carry

    _loop(g, g.c(I64, 0), n_tok, [g.c(I64, 0)], token)


@intrinsic
def _tile(typingctx, w, n_blocks, x, x_stride, xabs, xabs_stride, xd, xd_stride, n_tok, out,
          out_stride):
    """One group of 8 rows (w: its bytes) against n_tok tokens; out: 8 floats a token."""
    return i64_call(11, "dasllama_tile_q8_0_x8", _emit_tile)


_tile._set_uuid("dasllama.x8.tile")    # a stable disk-cache key (see simd.tile_intrinsic)


@njit(**JIT)
def abs_quants(xq, n_tokens, n_cols):
    """|x| of each token's int8 quants as uint8 (x is never -128: ggml's quantiser rounds
    into [-127, 127])."""
    out = np.empty((n_tokens, n_cols), np.uint8)
    for t in range(n_tokens):
        src, dst = xq[t], out[t]
        for i in range(n_cols):
            v = np.int32(src[i])
            dst[i] = np.uint8(v if v >= 0 else -v)
    return out


@njit(**JIT, parallel=True)
def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """out[:T, :R] = the Q8_0_X8 matrix w times the Q8_0 activations, as matmul's kernels."""
    n_blocks = n_cols // 32
    group_bytes = n_blocks * _GROUP_BLOCK_BYTES
    xabs = abs_quants(xq, n_tokens, n_cols)
    wp, xp, ap = np.int64(w.ctypes.data), np.int64(xq.ctypes.data), np.int64(xabs.ctypes.data)
    dp, op = np.int64(xd.ctypes.data), np.int64(out.ctypes.data)
    xs, as_, ds, os = xq.strides[0], xabs.strides[0], xd.strides[0], out.strides[0]
    chunk = max(1, _ACT_CHUNK_BYTES // max(2 * n_cols, 1))
    for c0 in range(0, n_tokens, chunk):
        nt = min(chunk, n_tokens - c0)
        for grp in numba.prange(n_rows // GROUP):
            _tile(wp + grp * group_bytes, n_blocks, xp + c0 * xs, xs, ap + c0 * as_, as_,
                  dp + c0 * ds, ds, nt, op + c0 * os + 4 * GROUP * grp, os)
    keep_alive(xabs)


"""Weights repacked in groups of 8 rows for prefill: 8 rows a vector, the token broadcast.

Four layouts, each a copy model.prefill_copies makes at load (decode keeps the file's
blocks): Q8_0_X8 (of Q8_0 and Q5_0 weights), Q4_0_X8, Q4_K_X8 and Q6_K_X8, each with its tile
and kernel below. The Q8_0 case first, which shows the idea.

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

The K-quants' batch folds (llama.cpp's repacked Q4_K gemm, its tiled K-quant matmul) take one
exact integer sum per pair and chunk of a block, so there the lanes of a sub-block add up in
int16 before the sub-block scale, and a lane step costs ~2 operations; see their sections.
"""
import numba
import numpy as np
from numba import njit
from numba.extending import intrinsic

from .dots import TILED_MIN_TOKENS, gemm_tokens
from .ir import I8, I32, I64, V8F32, V8I32, V16I16, V32I8, Gen, i64_call, keep_alive
from .quants import (BLOCK_BYTES, JIT, Q4_0_X8, Q4_K, Q4_K_X8, Q6_K_X8, Q8_0_X8, f16_at, q_q4_0,
                     q_q6_k, scale_min_k4)

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



# --- Q4_K ------------------------------------------------------------------------------------
#
# Q4_K_X8: per group of 8 rows, per 256-element block (2496 bytes, 312 a row and block):
#   0    d of the 8 rows, f32            32   dmin, f32
#   64   the 8 sub-block scales: per sub-block 16 int16, row r's scale at 2r and 2r+1
#   320  the mins: per 64-element chunk k 16 int16, row r's min of sub-blocks 2k, 2k+1 at 2r, 2r+1
#   448  the quants (0..15, a byte each) in 64 lanes of 4 elements, 8 rows x 4 bytes a lane
# The nibbles stay unsigned, so pmaddubsw takes them against the token's bytes as they are
# (no psign), and a sub-block's 8 lanes add up in int16 (|sum| <= 8 * 2 * 15 * 128 < 2**15)
# before one pmaddwd by the scales: ~2 operations a lane step against Q8_0's 5.

_Q4_K_GROUP_BLOCK = int(BLOCK_BYTES[Q4_K_X8]) * GROUP      # 2496
_Q4K_SC, _Q4K_MIN, _Q4K_Q = 64, 320, 448


def repack_q4_k(blocks, n_rows, n_cols, out=None):
    """The Q4_K matrix in the Q4_K_X8 layout (into `out` if given), or None if its rows do
    not come in whole groups of 8."""
    if n_rows % GROUP or n_cols % 256:
        return None
    src = np.ascontiguousarray(blocks).reshape(-1)
    if out is None:
        out = np.empty(n_rows * (n_cols // 256) * int(BLOCK_BYTES[Q4_K_X8]), np.uint8)
    _repack_q4_k(src, n_rows // GROUP, n_cols // 256, out)
    return out


@njit(**JIT, parallel=True)
def _repack_q4_k(src, n_groups, n_blocks, out):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * _Q4_K_GROUP_BLOCK
            d = out[o:o + 64].view(np.float32)
            sc = out[o + _Q4K_SC:o + _Q4K_Q].view(np.int16)
            for r in range(GROUP):
                p = ((grp * GROUP + r) * n_blocks + blk) * 144
                d[r] = f16_at(src, p)
                d[8 + r] = f16_at(src, p + 2)
                for j in range(8):
                    s, m = scale_min_k4(src, p + 4, j)
                    sc[16 * j + 2 * r] = s
                    sc[16 * j + 2 * r + 1] = s
                    sc[128 + 16 * (j // 2) + 2 * r + j % 2] = m
                for e in range(256):
                    j = e // 32
                    q = (src[p + 16 + 32 * (j // 2) + e % 32] >> (4 * (j % 2))) & 0xF
                    out[o + _Q4K_Q + 32 * (e // 4) + 4 * r + e % 4] = q


def _emit_tile_q4_k(chunks):
    """The tile of one row group over n_tok tokens: chunks=4 folds as llama.cpp's repacked
    gemm (ggml_gemm_q4_K_8x8_q8_K: one fma per 64-element chunk), chunks=1 as its repacked
    gemv (one per block); both as dots.dot_scalar, ints and mins in their own sums."""
    def emit(b, a):
        g = Gen(b)
        w = b.inttoptr(a[0], I8.as_pointer())
        n_blocks = a[1]
        x, x_stride = b.inttoptr(a[2], I8.as_pointer()), a[3]
        bs, bs_stride = b.inttoptr(a[4], I8.as_pointer()), a[5]
        xd, xd_stride, n_tok = b.inttoptr(a[6], I8.as_pointer()), a[7], a[8]
        out, out_stride = b.inttoptr(a[9], I8.as_pointer()), a[10]
        from .simd import _loop

        def token(t, carry):
            xt, bt = g.at(x, b.mul(t, x_stride)), g.at(bs, b.mul(t, bs_stride))
            dt = g.at(xd, b.mul(t, xd_stride))

            def block(blk, acc):
                acc_s, acc_m = acc
                wb = g.at(w, b.mul(blk, g.c(I64, _Q4_K_GROUP_BLOCK)))
                dx = g.splat(g.f32(dt, b.mul(blk, g.c(I64, 4))), 8)
                d, dmin = b.fmul(g.load(wb, 0, V8F32), dx), b.fmul(g.load(wb, 32, V8F32), dx)
                ints, mins = [], []
                for k in range(4):
                    chunk = None
                    for sub in (2 * k, 2 * k + 1):
                        sum16 = None
                        for lane in range(8 * sub, 8 * sub + 8):
                            off = b.add(b.mul(blk, g.c(I64, 256)), g.c(I64, 4 * lane))
                            xs = b.bitcast(g.splat(g.load(xt, off, I32), 8), V32I8)
                            p16 = g.maddubs(g.load(wb, _Q4K_Q + 32 * lane, V32I8), xs)
                            sum16 = p16 if sum16 is None else b.add(sum16, p16)
                        v = g.maddwd(sum16, g.load(wb, _Q4K_SC + 32 * sub, V16I16))
                        chunk = v if chunk is None else b.add(chunk, v)
                    pair = g.load(bt, b.add(b.mul(blk, g.c(I64, 16)), g.c(I64, 4 * k)), I32)
                    m = g.maddwd(g.load(wb, _Q4K_MIN + 32 * k, V16I16),
                                 b.bitcast(g.splat(pair, 8), V16I16))
                    ints.append(chunk)
                    mins.append(m)
                if chunks == 1:
                    ints = [b.add(b.add(ints[0], ints[1]), b.add(ints[2], ints[3]))]
                    mins = [b.add(b.add(mins[0], mins[1]), b.add(mins[2], mins[3]))]
                for i, m in zip(ints, mins):
                    acc_s = g.fma(b.sitofp(i, V8F32), d, acc_s)
                    acc_m = g.fma(b.sitofp(m, V8F32), dmin, acc_m)
                return [acc_s, acc_m]

            acc_s, acc_m = _loop(g, g.c(I64, 0), n_blocks, [g.c(V8F32, 0.0)] * 2, block)
            dst = b.bitcast(g.at(out, b.mul(t, out_stride)), V8F32.as_pointer())
            st = b.store(b.fsub(acc_s, acc_m), dst)
            st.align = 4
            return carry

        _loop(g, g.c(I64, 0), n_tok, [g.c(I64, 0)], token)
    return emit


@intrinsic
def _tile_q4_k_gemm(typingctx, w, n_blocks, x, x_stride, bs, bs_stride, xd, xd_stride, n_tok, out,
                    out_stride):
    return i64_call(11, "dasllama_tile_q4_k_x8_gemm", _emit_tile_q4_k(4))


@intrinsic
def _tile_q4_k_gemv(typingctx, w, n_blocks, x, x_stride, bs, bs_stride, xd, xd_stride, n_tok, out,
                    out_stride):
    return i64_call(11, "dasllama_tile_q4_k_x8_gemv", _emit_tile_q4_k(1))


_tile_q4_k_gemm._set_uuid("dasllama.x8.tile_q4_k_gemm")
_tile_q4_k_gemv._set_uuid("dasllama.x8.tile_q4_k_gemv")


@njit(**JIT)
def bsums32(xa, n_tokens, n_cols):
    """Each token's sums over 32 elements (Q8_K keeps them per 16, xa) as int16."""
    out = np.empty((n_tokens, n_cols // 32), np.int16)
    for t in range(n_tokens):
        for j in range(n_cols // 32):
            out[t, j] = np.int16(xa[t, 2 * j] + xa[t, 2 * j + 1])
    return out


@njit(**JIT, parallel=True)
def kernel_q4_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """out[:T, :R] = the Q4_K_X8 matrix w times the Q8_K activations; the first tokens that
    dots.gemm_tokens gives llama.cpp's repacked gemm take its fold, the rest its gemv's."""
    n_blocks = n_cols // 256
    group_bytes = n_blocks * _Q4_K_GROUP_BLOCK
    bs = bsums32(xa, n_tokens, n_cols)
    n_batch, _ = gemm_tokens(Q4_K, n_rows, n_cols, n_tokens)
    wp, xp, bp = np.int64(w.ctypes.data), np.int64(xq.ctypes.data), np.int64(bs.ctypes.data)
    dp, op = np.int64(xd.ctypes.data), np.int64(out.ctypes.data)
    xs, bss, ds, os = xq.strides[0], bs.strides[0], xd.strides[0], out.strides[0]
    chunk = max(1, _ACT_CHUNK_BYTES // max(n_cols, 1))
    for c0 in range(0, n_tokens, chunk):
        c1 = min(n_tokens, c0 + chunk)
        nb = max(0, min(c1, n_batch) - c0)     # this chunk's gemm tokens, then its gemv tokens
        for grp in numba.prange(n_rows // GROUP):
            wg, og = wp + grp * group_bytes, op + 4 * GROUP * grp
            if nb:
                _tile_q4_k_gemm(wg, n_blocks, xp + c0 * xs, xs, bp + c0 * bss, bss, dp + c0 * ds, ds,
                                nb, og + c0 * os, os)
            if c0 + nb < c1:
                t0 = c0 + nb
                _tile_q4_k_gemv(wg, n_blocks, xp + t0 * xs, xs, bp + t0 * bss, bss, dp + t0 * ds, ds,
                                c1 - t0, og + t0 * os, os)
    keep_alive(bs)


# --- Q6_K ------------------------------------------------------------------------------------
#
# Q6_K_X8: per group of 8 rows, per 256-element block (2848 bytes, 356 a row and block):
#   0    d of the 8 rows, f32
#   32   the 16 sub-block scales: per sub-block 16 int16, row r's scale at 2r and 2r+1
#   544  the scales again in pairs: per i 16 int16, row r's scales 2i, 2i+1 at 2r, 2r+1
#   800  the quants (0..63, unsigned as stored) in 64 lanes of 4 elements, 8 rows x 4 bytes
# Only llama.cpp's tiled fold (batches of TILED_MIN_TOKENS or more) is spelt here:
#   s = sum_j sc_j * sum (q - 32) x = sum_j sc_j * sum q x - 32 * sum_j sc_j * bsum16_j,
#   res = f32(s) * d, acc = fma(res, dx, acc)   (dots.dot_tiled)
# pmaddubsw takes the unsigned quants as they are; two lanes add up in int16
# (|sum| <= 2 * 2 * 63 * 128 < 2**15) before a pmaddwd by the scale.

_Q6_K_GROUP_BLOCK = int(BLOCK_BYTES[Q6_K_X8]) * GROUP      # 2848
_Q6K_SC, _Q6K_SC2, _Q6K_Q = 32, 544, 800


def repack_q6_k(blocks, n_rows, n_cols, out=None):
    """The Q6_K matrix in the Q6_K_X8 layout (into `out` if given), or None if its rows do
    not come in whole groups of 8."""
    if n_rows % GROUP or n_cols % 256:
        return None
    src = np.ascontiguousarray(blocks).reshape(-1)
    if out is None:
        out = np.empty(n_rows * (n_cols // 256) * int(BLOCK_BYTES[Q6_K_X8]), np.uint8)
    _repack_q6_k(src, n_rows // GROUP, n_cols // 256, out)
    return out


@njit(**JIT, parallel=True)
def _repack_q6_k(src, n_groups, n_blocks, out):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * _Q6_K_GROUP_BLOCK
            d = out[o:o + 32].view(np.float32)
            sc = out[o + _Q6K_SC:o + _Q6K_Q].view(np.int16)
            for r in range(GROUP):
                p = ((grp * GROUP + r) * n_blocks + blk) * 210
                d[r] = f16_at(src, p + 208)
                for j in range(16):
                    v = np.int16(np.int8(src[p + 192 + j]))
                    sc[16 * j + 2 * r] = v
                    sc[16 * j + 2 * r + 1] = v
                    sc[256 + 16 * (j // 2) + 2 * r + j % 2] = v
                for e in range(256):
                    out[o + _Q6K_Q + 32 * (e // 4) + 4 * r + e % 4] = np.uint8(q_q6_k(src, p, e))


def _emit_tile_q6_k(b, a):
    g = Gen(b)
    w = b.inttoptr(a[0], I8.as_pointer())
    n_blocks = a[1]
    x, x_stride = b.inttoptr(a[2], I8.as_pointer()), a[3]
    bs, bs_stride = b.inttoptr(a[4], I8.as_pointer()), a[5]
    xd, xd_stride, n_tok = b.inttoptr(a[6], I8.as_pointer()), a[7], a[8]
    out, out_stride = b.inttoptr(a[9], I8.as_pointer()), a[10]
    from .simd import _loop

    def token(t, carry):
        xt, bt = g.at(x, b.mul(t, x_stride)), g.at(bs, b.mul(t, bs_stride))
        dt = g.at(xd, b.mul(t, xd_stride))

        def block(blk, acc):
            wb = g.at(w, b.mul(blk, g.c(I64, _Q6_K_GROUP_BLOCK)))
            total = None
            for sub in range(16):
                for half in (0, 1):
                    sum16 = None
                    for lane in range(4 * sub + 2 * half, 4 * sub + 2 * half + 2):
                        off = b.add(b.mul(blk, g.c(I64, 256)), g.c(I64, 4 * lane))
                        xs = b.bitcast(g.splat(g.load(xt, off, I32), 8), V32I8)
                        p16 = g.maddubs(g.load(wb, _Q6K_Q + 32 * lane, V32I8), xs)
                        sum16 = p16 if sum16 is None else b.add(sum16, p16)
                    v = g.maddwd(sum16, g.load(wb, _Q6K_SC + 32 * sub, V16I16))
                    total = v if total is None else b.add(total, v)
            corr = None
            for i in range(8):
                pair = g.load(bt, b.add(b.mul(blk, g.c(I64, 32)), g.c(I64, 4 * i)), I32)
                v = g.maddwd(g.load(wb, _Q6K_SC2 + 32 * i, V16I16), b.bitcast(g.splat(pair, 8), V16I16))
                corr = v if corr is None else b.add(corr, v)
            ints = b.sub(total, b.shl(corr, g.c(V8I32, 5)))
            res = b.fmul(b.sitofp(ints, V8F32), g.load(wb, 0, V8F32))
            dx = g.splat(g.f32(dt, b.mul(blk, g.c(I64, 4))), 8)
            return [g.fma(res, dx, acc[0])]

        acc, = _loop(g, g.c(I64, 0), n_blocks, [g.c(V8F32, 0.0)], block)
        st = b.store(acc, b.bitcast(g.at(out, b.mul(t, out_stride)), V8F32.as_pointer()))
        st.align = 4
        return carry

    _loop(g, g.c(I64, 0), n_tok, [g.c(I64, 0)], token)


@intrinsic
def _tile_q6_k(typingctx, w, n_blocks, x, x_stride, bs, bs_stride, xd, xd_stride, n_tok, out,
               out_stride):
    return i64_call(11, "dasllama_tile_q6_k_x8_tiled", _emit_tile_q6_k)


_tile_q6_k._set_uuid("dasllama.x8.tile_q6_k_tiled")


@njit(**JIT)
def bsums16(xa, n_tokens, n_cols):
    """Each token's Q8_K sums over 16 elements (xa, as f32) as int16."""
    out = np.empty((n_tokens, n_cols // 16), np.int16)
    for t in range(n_tokens):
        for j in range(n_cols // 16):
            out[t, j] = np.int16(xa[t, j])
    return out


@njit(**JIT, parallel=True)
def kernel_q6_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """out[:T, :R] = the Q6_K_X8 matrix w times the Q8_K activations, in llama.cpp's tiled
    fold: batches of TILED_MIN_TOKENS or more only (model.copy_tokens sees to it)."""
    n_blocks = n_cols // 256
    group_bytes = n_blocks * _Q6_K_GROUP_BLOCK
    bs = bsums16(xa, n_tokens, n_cols)
    wp, xp, bp = np.int64(w.ctypes.data), np.int64(xq.ctypes.data), np.int64(bs.ctypes.data)
    dp, op = np.int64(xd.ctypes.data), np.int64(out.ctypes.data)
    xs, bss, ds, os = xq.strides[0], bs.strides[0], xd.strides[0], out.strides[0]
    chunk = max(1, _ACT_CHUNK_BYTES // max(n_cols, 1))
    for c0 in range(0, n_tokens, chunk):
        nt = min(chunk, n_tokens - c0)
        for grp in numba.prange(n_rows // GROUP):
            _tile_q6_k(wp + grp * group_bytes, n_blocks, xp + c0 * xs, xs, bp + c0 * bss, bss,
                       dp + c0 * ds, ds, nt, op + c0 * os + 4 * GROUP * grp, os)
    keep_alive(bs)


@njit(**JIT, inline="always")
def copy_tokens(layout, n_tokens):
    """Whether a batch of n_tokens may take a prefill copy in `layout`: Q6_K_X8 spells only
    llama.cpp's tiled fold, which batches of fewer than TILED_MIN_TOKENS do not take."""
    return n_tokens >= TILED_MIN_TOKENS if layout == Q6_K_X8 else n_tokens > 1


# --- Q4_0 ------------------------------------------------------------------------------------
#
# Q4_0_X8: Q8_0_X8's layout (8 f32 scales, then 8 lanes of 8 rows x 4 bytes: 36 bytes a row and
# block) holding the nibbles as they are stored, u = q + 8 in [0, 15]. llama.cpp multiplies
# Q4_0 weights whose rows come in eights with its repacked kernels, one fma per pair and block
# of the exact integer sum (dots.dot_scalar), so the 8 lanes add up in int16 (|sum| <= 8 * 2 *
# 15 * 127 < 2**15), one pmaddwd makes each row's sum of u * x, and 8 * (the token's block sum)
# comes off it: ~2 operations a lane step.


def repack_q4_0(blocks, n_rows, n_cols, out=None):
    """The Q4_0 matrix in the Q4_0_X8 layout (into `out` if given), or None if its rows do
    not come in whole groups of 8."""
    if not applies(n_rows, n_cols):
        return None
    src = np.ascontiguousarray(blocks).reshape(-1)
    if out is None:
        out = np.empty(n_rows * (n_cols // 32) * int(BLOCK_BYTES[Q4_0_X8]), np.uint8)
    _repack_q4_0(src, n_rows // GROUP, n_cols // 32, out)
    return out


@njit(**JIT, parallel=True)
def _repack_q4_0(src, n_groups, n_blocks, out):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * _GROUP_BLOCK_BYTES
            scales = out[o:o + 32].view(np.float32)
            for r in range(GROUP):
                p = ((grp * GROUP + r) * n_blocks + blk) * 18
                scales[r] = f16_at(src, p)
                for e in range(32):
                    out[o + 32 + 32 * (e // 4) + 4 * r + e % 4] = np.uint8(q_q4_0(src, p, e) + 8)


def _emit_tile_q4_0(b, a):
    g = Gen(b)
    w = b.inttoptr(a[0], I8.as_pointer())
    n_blocks = a[1]
    x, x_stride = b.inttoptr(a[2], I8.as_pointer()), a[3]
    bs, bs_stride = b.inttoptr(a[4], I8.as_pointer()), a[5]
    xd, xd_stride, n_tok = b.inttoptr(a[6], I8.as_pointer()), a[7], a[8]
    out, out_stride = b.inttoptr(a[9], I8.as_pointer()), a[10]
    ones = g.c(V16I16, 1)
    from .simd import _loop

    def token(t, carry):
        xt, bt = g.at(x, b.mul(t, x_stride)), g.at(bs, b.mul(t, bs_stride))
        dt = g.at(xd, b.mul(t, xd_stride))

        def block(blk, acc):
            wb = g.at(w, b.mul(blk, g.c(I64, _GROUP_BLOCK_BYTES)))
            scale = b.fmul(g.load(wb, 0, V8F32), g.splat(g.f32(dt, b.mul(blk, g.c(I64, 4))), 8))
            sum16 = None
            for lane in range(8):
                off = b.add(b.mul(blk, g.c(I64, 32)), g.c(I64, 4 * lane))
                xs = b.bitcast(g.splat(g.load(xt, off, I32), 8), V32I8)
                p16 = g.maddubs(g.load(wb, 32 + 32 * lane, V32I8), xs)
                sum16 = p16 if sum16 is None else b.add(sum16, p16)
            offset = g.splat(g.load(bt, b.mul(blk, g.c(I64, 4)), I32), 8)
            ints = b.sub(g.maddwd(sum16, ones), offset)
            return [g.fma(b.sitofp(ints, V8F32), scale, acc[0])]

        acc, = _loop(g, g.c(I64, 0), n_blocks, [g.c(V8F32, 0.0)], block)
        rows = b.fsub(acc, g.c(V8F32, 0.0))     # the repacked kernels' acc - (empty) min sum
        st = b.store(rows, b.bitcast(g.at(out, b.mul(t, out_stride)), V8F32.as_pointer()))
        st.align = 4
        return carry

    _loop(g, g.c(I64, 0), n_tok, [g.c(I64, 0)], token)


@intrinsic
def _tile_q4_0(typingctx, w, n_blocks, x, x_stride, bs, bs_stride, xd, xd_stride, n_tok, out,
               out_stride):
    return i64_call(11, "dasllama_tile_q4_0_x8", _emit_tile_q4_0)


_tile_q4_0._set_uuid("dasllama.x8.tile_q4_0")


@njit(**JIT)
def block_sums8(xq, n_tokens, n_cols):
    """8 x each token's sums over its 32-element blocks, int32."""
    out = np.empty((n_tokens, n_cols // 32), np.int32)
    for t in range(n_tokens):
        row = xq[t]
        for j in range(n_cols // 32):
            s = np.int32(0)
            for e in range(32 * j, 32 * j + 32):
                s += np.int32(row[e])
            out[t, j] = 8 * s
    return out


@njit(**JIT, parallel=True)
def kernel_q4_0(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """out[:T, :R] = the Q4_0_X8 matrix w times the Q8_0 activations (the repacked fold)."""
    n_blocks = n_cols // 32
    group_bytes = n_blocks * _GROUP_BLOCK_BYTES
    bs = block_sums8(xq, n_tokens, n_cols)
    wp, xp, bp = np.int64(w.ctypes.data), np.int64(xq.ctypes.data), np.int64(bs.ctypes.data)
    dp, op = np.int64(xd.ctypes.data), np.int64(out.ctypes.data)
    xs, bss, ds, os = xq.strides[0], bs.strides[0], xd.strides[0], out.strides[0]
    chunk = max(1, _ACT_CHUNK_BYTES // max(n_cols, 1))
    for c0 in range(0, n_tokens, chunk):
        nt = min(chunk, n_tokens - c0)
        for grp in numba.prange(n_rows // GROUP):
            _tile_q4_0(wp + grp * group_bytes, n_blocks, xp + c0 * xs, xs, bp + c0 * bss, bss,
                       dp + c0 * ds, ds, nt, op + c0 * os + 4 * GROUP * grp, os)
    keep_alive(bs)

"""Plain-loop row dots: one weight row against one quantised activation row, as ggml folds it.

Every integer sum is exact, so what decides the float result is how ggml folds the block
sums into floats. On x86 (AVX2 and up) llama.cpp 0c1e570 does one of three things:

* LANES8 (vec_dot for Q8_0, Q5_0, Q4_1, Q5_1, Q3_K, Q5_K, Q6_K, and Q2_K where it is not
  repacked, i.e. without AVX-512: its mins' products summed by lane pairs of sub-blocks
  (pmaddwd) fold into the same 8 lanes first, `acc8 = fma(-dx*dmin, mins8, acc8)`, then the
  scaled quants' as below): the int products of each
  32-element group go into 8 int32 lanes, lane l holding elements 4l..4l+3 (pmaddubsw +
  pmaddwd); per block `acc8 = fma(d, float(lanes), acc8)`; at the end `hsum8(acc8)` in the
  order of hsum_float_8, plus a scalar fma-accumulated min term for Q4_1/Q5_1/Q5_K.
* SCALAR (the repacked 8-row kernels for Q4_0, Q4_K and, with AVX-512, Q2_K, on weights with
  rows % 8 == 0): per chunk of a block one int32 sum, `acc = fma(float(isum), dw*dx, acc)`,
  mins in a second accumulator subtracted at the end. The gemv (one token) takes the whole
  block as one chunk; the gemm, which serves the first T - T%4 tokens of a batch of T >= 4
  (repack.cpp forward_mul_mat_one_chunk; the last T%4 go through the gemv), takes chunks of
  64 for Q4_K and 128 for Q2_K (arch/x86/repack.cpp ggml_gemm_q4_K_8x8_q8_K and
  ggml_gemm_q2_K_8x8_q8_K: one fma per `sb`), and the whole block for Q4_0.
* FLOAT (F32/F16/BF16): 4 accumulators x 16 lanes of fma over steps of 64, pairwise
  reduced, then the tail summed in double (the AVX-512 ggml_vec_dot_f16). For two tokens or
  more llamafile's tinyBLAS takes over where it can (rows % 4 == 0, cols % 16 == 0): one
  16-lane fma accumulator per (row, token), then _mm512_reduce_add_ps.

For batches llama.cpp takes other paths, which fold otherwise (see gemm_tokens):

* REPACKED GEMM (Q4_K, Q2_K as above): chunks of 64 / 128 elements per fma.
* TILED (ggml-cpu/tiled, batches of 8 tokens and more, K-quants that are not repacked: Q3_K,
  Q5_K, Q6_K, and Q4_K/Q2_K where they are not): per 256-block one exact int32 sum s1 (and s2
  of mins*bsums), `res = f32(s1)*dw`, `res = fma(-dmin, f32(s2), res)`, then
  `acc = fma(res, dx, acc)` (gcc contracts the kernel's add(mul)), block after block.

These are the references the fast kernels are tested against, bit for bit.

Which CPU: all of the above is read from llama.cpp 0c1e570 built with GGML_NATIVE on an AVX-512
(F/BW/VL/VNNI) x86 CPU and checked bit for bit against it (tests/core/llm/test_exact.py). On an
AVX2-only CPU the quantized folds hold as they are (ggml's x86 quant dots and the tiled
microtile are AVX2 code with the same fold; Q2_K is not repacked there, see REPACK_Q2_K), but
FLOAT does not: ggml_vec_dot_f16 and tinyBLAS run 8 lanes wide there, which is not modelled.
"""
import numpy as np
from numba import njit

from . import formats
from .formats.common import FOLD_FLOAT, FOLD_LANES8, FOLD_SCALAR  # noqa: F401  (the folds, told above)
from .formats.q2_k import REPACKED as REPACK_Q2_K  # noqa: F401  (the Q2_K fold told above)
from .ir import fma_f32
from .quants import (BF16, BLOCK_BYTES, BLOCK_ELEMS, F16, F32, JIT, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K,
                     Q6_K, Q8_0, f16_at, scale_min_k4)

# batch paths of llama.cpp (gemm_tokens): none, tinyBLAS or repacked gemm, tiled K-quant matmul
PATH_VEC, PATH_GEMM, PATH_TILED = 0, 1, 2
TILED_MIN_TOKENS = 8      # ggml_tiled_min_batch

# per format (formats/<name>.py), indexed by qtype: the fold of its gemv, whether llama.cpp
# repacks its rows in eights, the elements per fma of that repacked gemm, whether it is a
# K-quant (batches of TILED_MIN_TOKENS take the tiled matmul where it is not repacked)
_FOLD = formats.table("FOLD")
_REPACKED = formats.table("REPACKED", default=False, dtype=np.bool_)
_GEMM_CHUNK = formats.table("GEMM_CHUNK", default=256)
_K_QUANT = formats.table("K_QUANT", default=False, dtype=np.bool_)
quant_of = formats.dispatch("quant_of", ("w", "p", "e"), "quant(w, p, e)", globals(), default="np.int32(0)",
                            doc="Integer quant of element e of the block at p, as the integer dot multiplies it.")
scale_of = formats.dispatch("scale_of", ("w", "p", "e"), "scale(w, p, e)", globals(), default="np.int32(1)",
                            doc="Integer sub-block scale multiplying element e (1 for formats without one).")
float_at = formats.dispatch("float_at", ("w", "p"), "value(w, p)", globals(), default="np.float32(0)",
                            doc="The float weight at byte p (F32, F16, BF16).")


@njit(**JIT)
def fold_of(qtype):
    return _FOLD[qtype]


@njit(**JIT, inline="always")
def hsum8(a):
    """hsum_float_8: (a0+a4 + a2+a6) + (a1+a5 + a3+a7)."""
    s0, s1, s2, s3 = a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]
    return (s0 + s2) + (s1 + s3)


@njit(**JIT, inline="always")
def reduce16(a):
    """_mm512_reduce_add_ps as gcc expands it: halves 8, 4, 2, 1."""
    s8 = np.empty(8, np.float32)
    for i in range(8):
        s8[i] = a[i] + a[i + 8]
    s4 = np.empty(4, np.float32)
    for i in range(4):
        s4[i] = s8[i] + s8[i + 4]
    return (s4[0] + s4[2]) + (s4[1] + s4[3])


@njit(**JIT, inline="always")
def _min_dot(qtype, w, p, bsums, g0, e0=0, e1=256):
    """Sum of min * activation sum over the sub-blocks of elements e0..e1 (K-quants with
    mins), exact int."""
    s = np.int32(0)
    if qtype == Q2_K:
        for j in range(e0 // 16, e1 // 16):
            s += np.int32(w[p + j] >> 4) * np.int32(bsums[g0 + j])
    else:
        for j in range(e0 // 32, e1 // 32):
            s += scale_min_k4(w, p + 4, j)[1] * np.int32(bsums[g0 + 2 * j] + bsums[g0 + 2 * j + 1])
    return s


@njit(**JIT)
def dot_lanes8(qtype, w, p0, n_cols, xq, xd, xa):
    be = BLOCK_ELEMS[qtype]
    bb = BLOCK_BYTES[qtype]
    acc = np.zeros(8, np.float32)
    lanes = np.zeros(8, np.int32)
    summs = np.float32(0)
    for b in range(n_cols // be):
        p = p0 + b * bb
        o = b * be
        for l in range(8):
            s = np.int32(0)
            for g in range(be // 32):
                for i in range(4):
                    e = 32 * g + 4 * l + i
                    s += scale_of(qtype, w, p, e) * quant_of(qtype, w, p, e) * np.int32(xq[o + e])
            lanes[l] = s
        if qtype == Q8_0 or qtype == Q5_0:
            d = f16_at(w, p) * xd[b]
        elif qtype == Q4_1 or qtype == Q5_1:
            d = f16_at(w, p) * xd[b]
            summs = fma_f32(f16_at(w, p + 2), xa[b], summs)
        elif qtype == Q2_K:  # not repacked: the mins' lane pairs fold first, into the same lanes
            d = xd[b] * f16_at(w, p + 80)
            dmin = -xd[b] * f16_at(w, p + 82)
            for l in range(8):
                m = (np.int32(w[p + 2 * l] >> 4) * np.int32(xa[16 * b + 2 * l])
                     + np.int32(w[p + 2 * l + 1] >> 4) * np.int32(xa[16 * b + 2 * l + 1]))
                acc[l] = fma_f32(dmin, np.float32(m), acc[l])
        elif qtype == Q3_K:
            d = xd[b] * f16_at(w, p + 108)
        elif qtype == Q5_K:
            d = xd[b] * f16_at(w, p)
            dmin = -xd[b] * f16_at(w, p + 2)
            summs = fma_f32(dmin, np.float32(_min_dot(qtype, w, p, xa, 16 * b)), summs)
        else:  # Q6_K: the -32 offset is taken out per lane pair of 16-sums, as pmaddwd does
            d = xd[b] * f16_at(w, p + 208)
            for l in range(8):
                sc0 = np.int32(np.int8(w[p + 192 + 2 * l]))
                sc1 = np.int32(np.int8(w[p + 192 + 2 * l + 1]))
                lanes[l] -= 32 * (sc0 * np.int32(xa[16 * b + 2 * l]) + sc1 * np.int32(xa[16 * b + 2 * l + 1]))
        for l in range(8):
            acc[l] = fma_f32(d, np.float32(lanes[l]), acc[l])
    return hsum8(acc) + summs


@njit(**JIT, inline="always")
def gemm_chunk(qtype):
    """Elements per fma in the repacked gemm (the block in the gemv)."""
    return _GEMM_CHUNK[qtype]


@njit(**JIT, inline="always")
def repacked(qtype, n_rows):
    """Whether llama.cpp keeps this weight in its repack buffer (x86: Q4_0, Q4_K; Q2_K with
    AVX-512; 8-row interleave)."""
    return n_rows % 8 == 0 and _REPACKED[qtype]


@njit(**JIT, inline="always")
def gemm_tokens(qtype, n_rows, n_cols, n_tokens):
    """(n, path): the first n tokens of a batch go through llama.cpp's batch `path` (PATH_GEMM,
    PATH_TILED), which folds unlike its gemv/vec_dot; the rest through the latter. Float
    weights under tinyBLAS: all tokens. Repacked Q4_K/Q2_K: the first T - T%4. K-quants not
    repacked, batches of 8 or more: all tokens through the tiled matmul."""
    if qtype == F32 or qtype == F16 or qtype == BF16:
        return (n_tokens if float_gemm_applies(n_rows, n_cols, n_tokens) else 0), PATH_GEMM
    if repacked(qtype, n_rows):
        if (qtype == Q4_K or qtype == Q2_K) and n_tokens >= 4:
            return n_tokens - n_tokens % 4, PATH_GEMM
        return 0, PATH_VEC
    if _K_QUANT[qtype] and n_tokens >= TILED_MIN_TOKENS:
        return n_tokens, PATH_TILED
    return 0, PATH_VEC


@njit(**JIT)
def dot_scalar(qtype, w, p0, n_cols, xq, xd, xa, chunk):
    """chunk: elements per fma (see gemm_chunk), the block size in the gemv."""
    be = BLOCK_ELEMS[qtype]
    bb = BLOCK_BYTES[qtype]
    acc = np.float32(0)
    accm = np.float32(0)
    for b in range(n_cols // be):
        p = p0 + b * bb
        o = b * be
        for e0 in range(0, be, chunk):
            s = np.int32(0)
            for e in range(e0, e0 + chunk):
                s += scale_of(qtype, w, p, e) * quant_of(qtype, w, p, e) * np.int32(xq[o + e])
            if qtype == Q4_0:
                acc = fma_f32(np.float32(s), f16_at(w, p) * xd[b], acc)
            else:
                dd = p + 80 if qtype == Q2_K else p
                acc = fma_f32(np.float32(s), f16_at(w, dd) * xd[b], acc)
                m = _min_dot(qtype, w, p, xa, 16 * b, e0, e0 + chunk)
                accm = fma_f32(np.float32(m), f16_at(w, dd + 2) * xd[b], accm)
    return acc - accm


@njit(**JIT)
def dot_tiled(qtype, w, p0, n_cols, xq, xd, xa):
    """ggml-cpu/tiled's fold (AVX-512 VNNI and AVX2 microtiles alike) of one K-quant row."""
    bb = BLOCK_BYTES[qtype]
    acc = np.float32(0)
    for b in range(n_cols // 256):
        p = p0 + b * bb
        o = b * 256
        s = np.int32(0)
        for e in range(256):
            s += scale_of(qtype, w, p, e) * quant_of(qtype, w, p, e) * np.int32(xq[o + e])
        if qtype == Q6_K:
            for j in range(16):
                s -= 32 * np.int32(np.int8(w[p + 192 + j])) * np.int32(xa[16 * b + j])
            res = np.float32(s) * f16_at(w, p + 208)
        elif qtype == Q3_K:
            res = np.float32(s) * f16_at(w, p + 108)
        else:
            dd = p + 80 if qtype == Q2_K else p
            res = fma_f32(-f16_at(w, dd + 2), np.float32(_min_dot(qtype, w, p, xa, 16 * b)),
                          np.float32(s) * f16_at(w, dd))
        acc = fma_f32(res, xd[b], acc)
    return acc


@njit(**JIT)
def dot_float(qtype, w, p0, n_cols, xf):
    esize = 4 if qtype == F32 else 2
    acc = np.zeros((4, 16), np.float32)
    n_main = n_cols - n_cols % 64
    for i in range(0, n_main, 64):
        for j in range(4):
            for k in range(16):
                e = i + 16 * j + k
                acc[j, k] = fma_f32(float_at(qtype, w, p0 + esize * e), xf[e], acc[j, k])
    for k in range(16):
        acc[0, k] = acc[0, k] + acc[2, k]
        acc[1, k] = acc[1, k] + acc[3, k]
    for k in range(16):
        acc[0, k] = acc[0, k] + acc[1, k]
    total = np.float64(reduce16(acc[0]))
    for e in range(n_main, n_cols):
        total += np.float64(float_at(qtype, w, p0 + esize * e) * xf[e])
    return np.float32(total)


@njit(**JIT, inline="always")
def float_gemm_applies(n_rows, n_cols, n_tokens):
    """Whether llama.cpp multiplies float weights with tinyBLAS rather than vec_dot."""
    return n_tokens >= 2 and n_rows % 4 == 0 and n_cols % 16 == 0


@njit(**JIT)
def dot_float_gemm(qtype, w, p0, n_cols, xf):
    esize = 4 if qtype == F32 else 2
    acc = np.zeros(16, np.float32)
    for i in range(0, n_cols, 16):
        for k in range(16):
            acc[k] = fma_f32(float_at(qtype, w, p0 + esize * (i + k)), xf[i + k], acc[k])
    return reduce16(acc)


@njit(**JIT)
def dot_ref(qtype, w, p0, n_cols, xq, xd, xa, xf, path):
    """Row at byte p0 of w against one activation row (xq, xd, xa, xf of one token);
    path: the llama.cpp path this token takes (PATH_VEC, or gemm_tokens' path)."""
    if path == PATH_TILED:
        return dot_tiled(qtype, w, p0, n_cols, xq, xd, xa)
    fold = fold_of(qtype)
    if fold == FOLD_FLOAT:
        if path == PATH_GEMM:
            return dot_float_gemm(qtype, w, p0, n_cols, xf)
        return dot_float(qtype, w, p0, n_cols, xf)
    if fold == FOLD_SCALAR:
        chunk = gemm_chunk(qtype) if path == PATH_GEMM else BLOCK_ELEMS[qtype]
        return dot_scalar(qtype, w, p0, n_cols, xq, xd, xa, chunk)
    return dot_lanes8(qtype, w, p0, n_cols, xq, xd, xa)

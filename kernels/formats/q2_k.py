"""Q2_K: 256 elements a block of 84 bytes: 16 bytes of 4-bit (scale, min) pairs, one a
sub-block of 16, 64 bytes of 2-bit quants, then f16 d and dmin;
x = d * scale * q - dmin * min. Its integer dot takes Q8_K activations. llama.cpp repacks it
(8-row interleave, one scalar fma per chunk) only on AVX-512 CPUs; elsewhere its vec_dot
folds in 8 lanes (kernels/dots.py)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8, Scalar, pair_scales, tok_q8k
from ..cpu import probe
from ..ir import F32T, V16F32, V16I8, V16I16, V32I8
from .common import ACT_Q8_K, FOLD_LANES8, FOLD_SCALAR, JIT, QK_K, block_size, f16_at

ID = int(GGMLQuantizationType.Q2_K)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (80, 82)  # d, dmin
REFERENCE = gq.Q2_K
# llama.cpp repacks Q2_K only on AVX-512 CPUs (repack.cpp ggml_repack_get_optimal_repack_type)
REPACKED = "avx512f" in probe().features
ACT, FOLD = ACT_Q8_K, (FOLD_SCALAR if REPACKED else FOLD_LANES8)
GEMM_CHUNK = 128     # elements per fma in the repacked gemm (ggml_gemm_q2_K_8x8_q8_K)
K_QUANT = True       # batches of 8 tokens and more take llama.cpp's tiled matmul where not repacked


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned 2-bit; layout scales[16] qs[64] d dmin
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    return np.int32((w[off + 16 + 32 * n + l] >> (2 * k)) & 3)


@njit(**JIT, inline="always")
def scale(w, p, e):
    """The integer sub-block scale that multiplies element e's quant."""
    return np.int32(w[p + (e >> 4)] & 0xF)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d, dmin = f16_at(w, p + 80), f16_at(w, p + 82)
    for e in range(QK_K):
        s = w[p + (e >> 4)]
        dl = d * np.float32(s & 0xF)
        ml = dmin * np.float32(s >> 4)
        out[o + e] = dl * np.float32(quant(w, p, e)) - ml


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(Scalar):
    """Q2_K as llama.cpp's repacked gemv folds it: one fma of the block's int sum, mins apart."""

    def row(self, g, p):
        b = g.b
        groups = []
        for n in range(2):
            qs = g.load(p, 16 + 32 * n, V32I8)
            for k in range(4):
                groups.append(b.and_(b.lshr(qs, g.c(V32I8, 2 * k)), g.c(V32I8, 3)))
        sc8 = g.load(p, 0, V16I8)
        sc16 = b.zext(b.and_(sc8, g.c(V16I8, 0xF)), V16I16)
        mins = b.uitofp(b.lshr(sc8, g.c(V16I8, 4)), V16F32)
        return g.f16(p, 80), g.f16(p, 82), pair_scales(g, sc16), mins, groups

    def tok(self, g, x, xd, xa, b):
        return tok_q8k(g, x, xd, xa, b)

    def int_lanes(self, g, R, X):
        """The 8 int32 lanes of the scaled quants' products over the block."""
        _, _, scv, _, groups = R
        qx = X[0]
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
            total = v if total is None else g.b.add(total, v)
        return total

    def parts(self, g, R, X):
        b = g.b
        dw, dminw, _, mins, _ = R
        _, dx, bsums = X
        total = self.int_lanes(g, R, X)
        m16 = b.fmul(mins, bsums)
        m8 = b.fadd(g.shuffle(m16, m16, range(8)), g.shuffle(m16, m16, range(8, 16)))  # exact
        return total, m8, b.fmul(dw, dx), b.fmul(dminw, dx)

    def block_ints(self, g, R, X):
        total, m8, _, _ = self.parts(g, R, X)
        return total, m8, R[0], R[1], X[1]

    def chunk_parts(self, g, R, X, k, n_chunks):
        """Int lanes of 32-groups 4k..4k+3 and the min products of 16-sub-blocks 8k..8k+7."""
        b = g.b
        _, _, scv, mins, groups = R
        qx, _, bsums = X
        lanes = None
        for j in range(4 * k, 4 * k + 4):
            v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
            lanes = v if lanes is None else b.add(lanes, v)
        m16 = b.fmul(mins, bsums)
        return lanes, g.shuffle(m16, m16, range(8 * k, 8 * k + 8))

    def chunk_min_sums(self, g, pairs, n_chunks):
        return None


class LanesBlockDot(Lanes8, BlockDot):
    """Q2_K through ggml's vec_dot (not repacked, CPUs without AVX-512): per block the mins'
    8 lanes (sub-blocks 2l and 2l+1, as pmaddwd pairs them) fold with -dx*dmin, then the
    quants' lanes with dx*d, into one 8-lane accumulator."""

    def pair(self, g, R, X, acc):
        b = g.b
        dw, dminw, _, mins, _ = R
        _, dx, bsums = X
        total = self.int_lanes(g, R, X)
        m16 = b.fmul(mins, bsums)                                           # exact
        m8 = b.fadd(g.shuffle(m16, m16, range(0, 16, 2)), g.shuffle(m16, m16, range(1, 16, 2)))
        dmin = b.fmul(b.fsub(g.c(F32T, -0.0), dx), dminw)
        acc8 = g.fma(g.splat(dmin, 8), m8, acc[0])
        return (g.fma(g.splat(b.fmul(dx, dw), 8), g.cvt(total), acc8), acc[1])


# the repacked gemv where llama.cpp repacks Q2_K, else its vec_dot; the repacked gemm either way
GEMM_DOT = BlockDot()
BLOCK_DOT = GEMM_DOT if REPACKED else LanesBlockDot()

"""Q6_K: 256 elements a block of 210 bytes: 128 bytes of low nibbles, 64 bytes of 2-bit high
parts, 16 signed 8-bit scales (one a sub-block of 16), then f16 d; x = d * scale * (q - 32).
Its integer dot takes Q8_K activations; llama.cpp folds it in 8 lanes (its tiled matmul for
batches)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8, pair_scales, tok_q8k
from ..ir import V8I32, V16I8, V16I16, V32I8
from .common import ACT_Q8_K, FOLD_LANES8, JIT, QK_K, block_size, f16_at

ID = int(GGMLQuantizationType.Q6_K)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (208,)  # d
REFERENCE = gq.Q6_K
ACT, FOLD = ACT_Q8_K, FOLD_LANES8
K_QUANT = True


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned 6-bit (ggml subtracts 32 later); ql[128] qh[64] scales[16] d
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    lo = np.int32((w[off + 64 * n + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF)
    h = np.int32((w[off + 128 + 32 * n + l] >> (2 * k)) & 3)
    return lo | (h << 4)


@njit(**JIT, inline="always")
def scale(w, p, e):
    return np.int32(np.int8(w[p + 192 + (e >> 4)]))


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d = f16_at(w, p + 208)
    for e in range(QK_K):
        dl = d * np.float32(scale(w, p, e))
        out[o + e] = dl * np.float32(quant(w, p, e) - 32)


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(Lanes8):
    """Q6_K through ggml's vec_dot: 8 lanes, the -32 offset taken out by the token's sums."""

    def row(self, g, p):
        b = g.b
        groups = []
        for n in range(2):
            qh = g.load(p, 128 + 32 * n, V32I8)
            for k in range(4):
                ql = g.load(p, 64 * n + 32 * (k & 1), V32I8)
                lo = b.and_(ql, g.c(V32I8, 0xF)) if k < 2 else b.lshr(ql, g.c(V32I8, 4))
                hi = b.shl(b.and_(b.lshr(qh, g.c(V32I8, 2 * k)), g.c(V32I8, 3)), g.c(V32I8, 4))
                groups.append(b.or_(lo, hi))
        sc16 = b.sext(g.load(p, 192, V16I8), V16I16)
        return g.f16(p, 208), pair_scales(g, sc16), groups, sc16

    def tok(self, g, x, xd, xa, b):
        groups, d, bsums = tok_q8k(g, x, xd, xa, b)
        return groups, d, g.b.fptosi(bsums, V16I16)    # sums of 16 int8s: within i16

    def pair(self, g, R, X, acc):
        total, _, dw, _, dx = self.block_ints(g, R, X)
        return (g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(total), acc[0]), acc[1])

    def block_ints(self, g, R, X):
        b = g.b
        dw, scv, groups, sc16 = R
        qx, dx, bs16 = X
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
            total = v if total is None else b.add(total, v)
        # sc[2i] bs[2i] + sc[2i+1] bs[2i+1] per lane, as one pmaddwd (exact: int8 scales by
        # int16 sums), not two 32-bit multiplies of their even and odd halves
        corr = b.shl(g.maddwd(sc16, bs16), g.c(V8I32, 5))
        return b.sub(total, corr), None, dw, None, dx


BLOCK_DOT = BlockDot()

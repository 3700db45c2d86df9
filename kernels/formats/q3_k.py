"""Q3_K: 256 elements a block of 110 bytes: 32 bytes of high-bit masks, 64 bytes of 2-bit
quants, 12 bytes of signed 6-bit scales (one a sub-block of 16), then f16 d;
x = d * scale * q, q = 2-bit value - 4 unless its mask bit is set. Its integer dot takes
Q8_K activations; llama.cpp folds it in 8 lanes (its tiled matmul for batches)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8, pair_scales, tok_q8, words_to_bytes
from ..ir import I32, V16I16, V32I8
from .common import ACT_Q8_K, FOLD_LANES8, JIT, QK_K, block_size, f16_at

ID = int(GGMLQuantizationType.Q3_K)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (108,)  # d
REFERENCE = gq.Q3_K
ACT, FOLD = ACT_Q8_K, FOLD_LANES8
K_QUANT = True


@njit(**JIT, inline="always")
def scale_q3_k(w, off, j):
    """Signed 6-bit scale of sub-block j (0..15) of a Q3_K 12-byte scales field at `off`."""
    lo = (w[off + (j & 7)] >> (4 * (j >> 3))) & 0xF
    hi = (w[off + 8 + (j & 3)] >> (2 * (j >> 2))) & 3
    return np.int32(lo | (hi << 4)) - 32


@njit(**JIT, inline="always")
def quant(w, off, e):  # signed: 2-bit - 4 unless the hmask bit is set; hmask[32] qs[64] scales[12] d
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    lo = np.int32((w[off + 32 + 32 * n + l] >> (2 * k)) & 3)
    h = (w[off + l] >> (4 * n + k)) & 1
    return lo - (0 if h else 4)


@njit(**JIT, inline="always")
def scale(w, p, e):
    return scale_q3_k(w, p + 96, e >> 4)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d = f16_at(w, p + 108)
    for e in range(QK_K):
        dl = d * np.float32(scale(w, p, e))
        out[o + e] = dl * np.float32(quant(w, p, e))


# --- the IR block dot of simd.py's tiles -------------------------------------------------

def q3_scales(g, p, off):
    """Q3_K 12-byte field -> 16 signed scales as <16 x i16> (ggml's aux unpacking)."""
    b = g.b
    a0, a1, a2 = (g.load(p, off + 4 * i, I32) for i in range(3))
    k1, k2 = g.c(I32, 0x03030303), g.c(I32, 0x0F0F0F0F)

    def word(lo, lo_shift, hi_shift):
        low = b.and_(b.lshr(lo, g.c(I32, lo_shift)) if lo_shift else lo, k2)
        high = b.and_(b.lshr(a2, g.c(I32, hi_shift)) if hi_shift else a2, k1)
        return b.or_(low, b.shl(high, g.c(I32, 4)))

    by = words_to_bytes(g, [word(a0, 0, 0), word(a1, 0, 2), word(a0, 4, 4), word(a1, 4, 6)])
    return b.sub(b.zext(by, V16I16), g.c(V16I16, 32))


class BlockDot(Lanes8):
    """Q3_K through ggml's vec_dot: the signed quants by psign, 8 lanes, one fma a block."""

    def row(self, g, p):
        b = g.b
        hmask = g.load(p, 0, V32I8)
        groups, absg = [], []
        for n in range(2):
            qs = g.load(p, 32 + 32 * n, V32I8)
            for k in range(4):
                lo = b.and_(b.lshr(qs, g.c(V32I8, 2 * k)), g.c(V32I8, 3))
                h = b.and_(b.lshr(hmask, g.c(V32I8, 4 * n + k)), g.c(V32I8, 1))
                q = b.sub(lo, b.shl(b.xor(h, g.c(V32I8, 1)), g.c(V32I8, 2)))  # -4 unless h
                groups.append(q)
                absg.append(g.psign(q, q))
        sc16 = q3_scales(g, p, 96)
        return g.f16(p, 108), pair_scales(g, sc16), groups, absg

    def tok(self, g, x, xd, xa, b):
        groups, d = tok_q8(g, x, xd, xa, b, 256)
        return groups, d

    def pair(self, g, R, X, acc):
        total, _, dw, _, dx = self.block_ints(g, R, X)
        return (g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(total), acc[0]), acc[1])

    def block_ints(self, g, R, X):
        """(int lanes of the block's scaled products, no mins, dw, no dmin, dx)."""
        dw, scv, groups, absg = R
        qx, dx = X
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(absg[j], g.psign(qx[j], groups[j])), scv[j])
            total = v if total is None else g.b.add(total, v)
        return total, None, dw, None, dx


BLOCK_DOT = BlockDot()

"""Q5_K: 256 elements a block of 176 bytes: f16 d and dmin, 12 bytes of 6-bit (scale, min)
pairs (as Q4_K's), 32 bytes of high bits, then 128 bytes of nibbles;
x = d * scale * q - dmin * min. Its integer dot takes Q8_K activations; llama.cpp folds it in
8 lanes plus a scalar min sum (its tiled matmul for batches)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8
from ..ir import V32I8
from . import q4_k
from .common import ACT_Q8_K, FOLD_LANES8, JIT, QK_K, block_size, f16_at
from .q4_k import scale, scale_min_k4  # noqa: F401  (scale: the same field as Q4_K's)

ID = int(GGMLQuantizationType.Q5_K)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0, 2)  # d, dmin
REFERENCE = gq.Q5_K
ACT, FOLD = ACT_Q8_K, FOLD_LANES8
K_QUANT = True


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned 5-bit; d dmin scales[12] qh[32] qs[128]
    c, hi, l = e >> 6, (e >> 5) & 1, e & 31
    lo = np.int32((w[off + 48 + 32 * c + l] >> (4 * hi)) & 0xF)
    h = np.int32((w[off + 16 + l] >> (2 * c + hi)) & 1)
    return lo | (h << 4)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d, dmin = f16_at(w, p), f16_at(w, p + 2)
    for e in range(QK_K):
        sc, m = scale_min_k4(w, p + 4, e >> 5)
        out[o + e] = (d * np.float32(sc)) * np.float32(quant(w, p, e)) - dmin * np.float32(m)


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(Lanes8):
    """Q5_K through ggml's vec_dot: Q4_K's scales and lanes in 8 lanes, the mins a scalar sum."""

    def row(self, g, p):
        sc, mins = q4_k.k4_scales(g, p, 4)
        qh = g.load(p, 16, V32I8)
        groups = []
        for c in range(4):
            q = g.load(p, 48 + 32 * c, V32I8)
            for hi, nib in ((0, g.b.and_(q, g.c(V32I8, 0xF))), (1, g.b.lshr(q, g.c(V32I8, 4)))):
                bit = g.b.and_(g.b.lshr(qh, g.c(V32I8, 2 * c + hi)), g.c(V32I8, 1))
                groups.append(g.b.or_(nib, g.b.shl(bit, g.c(V32I8, 4))))
        return g.f16(p, 0), g.f16(p, 2), sc, mins, groups

    tok = q4_k.BlockDot.tok
    int_lanes = q4_k.BlockDot.int_lanes
    block_ints = q4_k.BlockDot.block_ints

    def pair(self, g, R, X, acc):
        dw, dminw, _, mins, _ = R
        _, dx, bs32 = X
        acc8 = g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(self.int_lanes(g, R, X)), acc[0])
        dmin = g.b.fmul(g.b.fneg(dx), dminw)
        return (acc8, g.fma(dmin, g.hsum_exact(g.b.fmul(mins, bs32)), acc[1]))


BLOCK_DOT = BlockDot()

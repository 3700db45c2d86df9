"""Q5_1: 32 elements a block of 24 bytes: f16 scale d and min m, 4 bytes of high bits (as
Q5_0's), then 16 bytes of nibbles; x = 5-bit value * d + m. Its integer dot takes Q8_1
activations; llama.cpp folds it in 8 lanes plus a scalar min sum."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..ir import I32
from . import q4_1
from .common import ACT_Q8_1, FOLD_LANES8, JIT, block_size, f16_at, u32_at

ID = int(GGMLQuantizationType.Q5_1)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0, 2)  # d, m
REFERENCE = gq.Q5_1
ACT, FOLD = ACT_Q8_1, FOLD_LANES8


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned 5-bit
    b = w[off + 8 + (e & 15)]
    hi = (u32_at(w, off + 4) >> np.uint32(e)) & np.uint32(1)
    return np.int32((b >> (4 * (e >> 4))) & 0xF) + np.int32(hi << np.uint32(4))


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d, m = f16_at(w, p), f16_at(w, p + 2)
    for e in range(32):
        out[o + e] = d * np.float32(quant(w, p, e)) + m


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(q4_1.BlockDot):
    """Q5_1: Q4_1's fold, the fifth bits or-ed into the nibbles."""

    def row(self, g, p):
        q = g.b.or_(g.nibbles(p, 8), g.bits32(g.load(p, 4, I32)))
        d, m = q4_1.f16_pair(g, p)
        return g.splat(d, 8), m, q


BLOCK_DOT = BlockDot()

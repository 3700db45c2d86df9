"""Q4_1: 32 elements a block of 20 bytes: f16 scale d and min m, then 16 bytes of nibbles (as
Q4_0's); x = nibble * d + m. Its integer dot takes Q8_1 activations (their block sums carry
the min term); llama.cpp folds it in 8 lanes plus a scalar min sum."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8, tok_q8
from ..ir import F32T, HALF, I32, I64, vec
from .common import ACT_Q8_1, FOLD_LANES8, JIT, block_size, f16_at

ID = int(GGMLQuantizationType.Q4_1)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0, 2)  # d, m
REFERENCE = gq.Q4_1
ACT, FOLD = ACT_Q8_1, FOLD_LANES8


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned nibble
    b = w[off + 4 + (e & 15)]
    return np.int32((b >> (4 * (e >> 4))) & 0xF)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d, m = f16_at(w, p), f16_at(w, p + 2)
    for e in range(32):
        out[o + e] = d * np.float32(quant(w, p, e)) + m


# --- the IR block dot of simd.py's tiles -------------------------------------------------

def f16_pair(g, p):
    """The f16 scale and min at the start of a Q4_1/Q5_1 block, as two f32: one 4-byte load
    and one conversion (two scalar f16 loads cost two inserts and two conversions; ~5 % of the
    Q4_1 gemv, hot)."""
    dm = g.b.fpext(g.load(p, 0, vec(HALF, 2)), vec(F32T, 2))
    return g.b.extract_element(dm, g.c(I32, 0)), g.b.extract_element(dm, g.c(I32, 1))


class BlockDot(Lanes8):
    """Q4_1 through ggml's vec_dot: 8 lanes of nibbles x int8, the min by the token's sum."""

    def row(self, g, p):
        d, m = f16_pair(g, p)
        return g.splat(d, 8), m, g.nibbles(p, 4)

    def tok(self, g, x, xd, xa, b):
        (q,), d = tok_q8(g, x, xd, xa, b, 32)
        return q, g.splat(d, 8), g.f32(xa, g.b.mul(b, g.c(I64, 4)))

    def pair(self, g, R, X, acc):
        dw, mw, qw = R
        qx, dx, sx = X
        acc8 = g.fma(g.b.fmul(dw, dx), g.cvt(g.lanes(qw, qx)), acc[0])
        return (acc8, g.fma(mw, sx, acc[1]))


BLOCK_DOT = BlockDot()

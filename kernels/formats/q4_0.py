"""Q4_0: 32 elements a block of 18 bytes: an f16 scale d, then 16 bytes of nibbles (element e
in the low nibble of byte e, element e + 16 in its high one); x = (nibble - 8) * d.
Its integer dot takes Q8_0 activations; llama.cpp repacks weights whose rows come in eights
and folds them one scalar fma per block (dots.FOLD_SCALAR)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Scalar, lanes_unsigned, tok_q8, tok_unsigned
from ..ir import V32I8
from .common import ACT_Q8_0, FOLD_SCALAR, JIT, block_size, f16_at

ID = int(GGMLQuantizationType.Q4_0)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0,)    # d
REFERENCE = gq.Q4_0
ACT, FOLD = ACT_Q8_0, FOLD_SCALAR
REPACKED = True      # llama.cpp's x86 build repacks it (rows % 8 == 0): dots.repacked
GEMM_CHUNK = 32      # elements per fma in its repacked gemm: the block


@njit(**JIT, inline="always")
def quant(w, off, e):  # signed: nibble - 8
    b = w[off + 2 + (e & 15)]
    return np.int32((b >> (4 * (e >> 4))) & 0xF) - 8


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d = f16_at(w, p)
    for e in range(32):
        out[o + e] = d * np.float32(quant(w, p, e))


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(Scalar):
    """Without VNNI the nibbles stay unsigned (q + 8) as Q5_0Fmt's quants do."""
    offset = 8

    def row(self, g, p):
        n = g.nibbles(p, 2)
        if not g.vnni:
            return g.f16(p, 0), n
        q = g.b.sub(n, g.c(V32I8, self.offset))
        return g.f16(p, 0), q, g.psign(q, q)

    def tok(self, g, x, xd, xa, b):
        if not g.vnni:
            return tok_unsigned(g, x, xd, xa, b)
        (q,), d = tok_q8(g, x, xd, xa, b, 32)
        return q, d

    def parts(self, g, R, X):
        if not g.vnni:
            (dw, nw), (qx, dx, sums) = R, X
            return lanes_unsigned(g, nw, qx, sums), None, g.b.fmul(dw, dx), None
        dw, qw, aw = R
        qx, dx = X
        return g.lanes_signed(qw, aw, qx), None, g.b.fmul(dw, dx), None


BLOCK_DOT = BlockDot()

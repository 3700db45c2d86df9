"""Q8_0: 32 elements a block of 34 bytes: an f16 scale d, then 32 int8 quants; x = q * d.
Its integer dot takes Q8_0 activations; llama.cpp's vec_dot_q8_0_q8_0 folds it in 8 lanes."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Lanes8, tok_q8
from ..ir import V32I8
from .common import ACT_Q8_0, FOLD_LANES8, JIT, block_size, f16_at

ID = int(GGMLQuantizationType.Q8_0)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0,)    # byte offsets of the f16 fields: d
REFERENCE = gq.Q8_0
ACT, FOLD = ACT_Q8_0, FOLD_LANES8


@njit(**JIT, inline="always")
def quant(w, off, e):
    """The integer quant of element e of the block at `off`, as the integer dot multiplies it."""
    return np.int32(np.int8(w[off + 2 + e]))


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d = f16_at(w, p)
    for e in range(32):
        out[o + e] = np.float32(quant(w, p, e)) * d


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(Lanes8):
    # scales are splatted once per row and per token; the per-pair product is then one
    # vector multiply, lane for lane the scalar dw*dx ggml broadcasts
    def quants(self, g, p):
        """The block's f16 scale as f32 and its 32 signed quants."""
        return g.f16(p, 0), g.load(p, 2, V32I8)

    def row(self, g, p):
        d, q = self.quants(g, p)
        return g.splat(d, 8), q, g.psign(q, q)

    def tok(self, g, x, xd, xa, b):
        (q,), d = tok_q8(g, x, xd, xa, b, 32)
        return q, g.splat(d, 8)

    def pair(self, g, R, X, acc):
        dw, qw, aw = R
        qx, dx = X
        return (g.fma(g.b.fmul(dw, dx), g.cvt(g.lanes_signed(qw, aw, qx)), acc[0]), acc[1])


BLOCK_DOT = BlockDot()
WIDE = True          # a 512-bit tile of two token pairs a vector (blockdots.Wide8)

"""Q5_0: 32 elements a block of 22 bytes: an f16 scale d, 4 bytes of high bits (bit e of the
little-endian word: element e's fifth bit), then 16 bytes of nibbles (as Q4_0's);
x = (5-bit value - 16) * d. Its integer dot takes Q8_0 activations; llama.cpp folds it in 8
lanes. `as_q8_0` rewrites it as Q8_0 (the copy the model multiplies batches through)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import lanes_unsigned, tok_q8, tok_unsigned
from ..ir import I32, I64, V8I32, V32I8
from . import q8_0
from .common import ACT_Q8_0, FOLD_LANES8, JIT, block_size, f16_at, u32_at

ID = int(GGMLQuantizationType.Q5_0)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0,)    # d
REFERENCE = gq.Q5_0
ACT, FOLD = ACT_Q8_0, FOLD_LANES8


@njit(**JIT, inline="always")
def quant(w, off, e):  # signed: 5-bit - 16
    b = w[off + 6 + (e & 15)]
    hi = (u32_at(w, off + 2) >> np.uint32(e)) & np.uint32(1)
    return np.int32((b >> (4 * (e >> 4))) & 0xF) + np.int32(hi << np.uint32(4)) - 16


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d = f16_at(w, p)
    for e in range(32):
        out[o + e] = d * np.float32(quant(w, p, e))


def as_q8_0(blocks):
    """Q5_0 blocks (uint8, 22 bytes each) rewritten as Q8_0 blocks (34 bytes each): the same
    f16 scale and qs = the 5-bit quants minus 16. Both dot with Q8_0 activations through the
    same int lanes and the same fold, so a matmul on the copy is bit for bit one on the
    original; only the bytes streamed differ."""
    src = np.ascontiguousarray(blocks).reshape(-1)
    out = np.empty(src.size // BLOCK_BYTES * q8_0.BLOCK_BYTES, np.uint8)
    _as_q8_0(src, out)
    return out


@njit(**JIT)
def _as_q8_0(src, out):
    for blk in range(src.size // 22):
        p, o = 22 * blk, 34 * blk
        out[o], out[o + 1] = src[p], src[p + 1]
        for e in range(32):
            out[o + 2 + e] = np.uint8(quant(src, p, e) & 0xFF)


# --- the IR block dot of simd.py's tiles -------------------------------------------------

class BlockDot(q8_0.BlockDot):
    """Q5_0 against Q8_0 activations. The quants stay unsigned, u = q + 16 in [0, 31], as they
    unpack (no -16, no psign of the row, none of the token by the row's signs), and the
    token's sums times 16 come off. Without VNNI pmaddubsw forms u*x pairs, less the token's
    pair sums times 16 (simd.offset_sums), then pmaddwd; with it vpdpbusd forms u*x fours
    starting from -16 * the token's sums of four (simd.offset_quad_sums). The sums are made
    once per call; xa points at them. Each int32 lane is exactly ggml's sum of four q*x, so
    the fold is the same. (The 512-bit wide tiles take the signed quants.)"""
    offset = 16
    vnni_unsigned = True

    def quants(self, g, p):
        q = g.b.sub(self.unsigned(g, p), g.c(V32I8, self.offset))
        return g.f16(p, 0), q

    def unsigned(self, g, p):
        return g.b.or_(g.nibbles(p, 6), g.bits32(g.load(p, 2, I32)))

    def row(self, g, p):
        return g.splat(g.f16(p, 0), 8), self.unsigned(g, p)

    def tok(self, g, x, xd, xa, b):
        if g.vnni:
            (q,), d = tok_q8(g, x, xd, xa, b, 32)
            return q, g.splat(d, 8), g.load(xa, g.b.mul(b, g.c(I64, 32)), V8I32)
        q, d, sums = tok_unsigned(g, x, xd, xa, b)
        return q, g.splat(d, 8), sums

    def pair(self, g, R, X, acc):
        (dw, uw), (qx, dx, sums) = R, X
        lanes = g.dpbusd(sums, uw, qx) if g.vnni else lanes_unsigned(g, uw, qx, sums)
        return (g.fma(g.b.fmul(dw, dx), g.cvt(lanes), acc[0]), acc[1])


BLOCK_DOT = BlockDot()
WIDE = True

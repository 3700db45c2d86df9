"""Q4_K: 256 elements a block of 144 bytes: f16 d and dmin, 12 bytes of 6-bit (scale, min)
pairs (one a sub-block of 32), then 128 bytes of nibbles; x = d * scale * q - dmin * min.
Its integer dot takes Q8_K activations; llama.cpp repacks weights whose rows come in eights
and folds them one scalar fma per block (its gemm: per chunk of 64) (kernels/dots.py)."""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from ..blockdots import Scalar, tok_q8k, words_to_bytes
from ..ir import I32, V8F32, V16I16, V32I8
from .common import ACT_Q8_K, FOLD_SCALAR, JIT, QK_K, block_size, f16_at

ID = int(GGMLQuantizationType.Q4_K)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = (0, 2)  # d, dmin
REFERENCE = gq.Q4_K
ACT, FOLD = ACT_Q8_K, FOLD_SCALAR
REPACKED = True
GEMM_CHUNK = 64      # elements per fma in the repacked gemm (ggml_gemm_q4_K_8x8_q8_K)
K_QUANT = True


@njit(**JIT, inline="always")
def scale_min_k4(w, off, j):
    """6-bit (scale, min) of sub-block j of a Q4_K/Q5_K 12-byte scales field at `off`."""
    if j < 4:
        sc = np.int32(w[off + j] & 63)
        m = np.int32(w[off + j + 4] & 63)
    else:
        sc = np.int32((w[off + j + 4] & 0xF) | ((w[off + j - 4] >> 6) << 4))
        m = np.int32((w[off + j + 4] >> 4) | ((w[off + j] >> 6) << 4))
    return sc, m


@njit(**JIT, inline="always")
def quant(w, off, e):  # unsigned nibble; d dmin scales[12] qs[128]
    c, hi, l = e >> 6, (e >> 5) & 1, e & 31
    return np.int32((w[off + 16 + 32 * c + l] >> (4 * hi)) & 0xF)


@njit(**JIT, inline="always")
def scale(w, p, e):
    return scale_min_k4(w, p + 4, e >> 5)[0]


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    d, dmin = f16_at(w, p), f16_at(w, p + 2)
    for e in range(QK_K):
        sc, m = scale_min_k4(w, p + 4, e >> 5)
        out[o + e] = (d * np.float32(sc)) * np.float32(quant(w, p, e)) - dmin * np.float32(m)


# --- the IR block dot of simd.py's tiles -------------------------------------------------

def k4_scales(g, p, off):
    """Q4_K/Q5_K 12-byte field -> (8 scales splatted to <16 x i16>, <8 x f32> mins).

    The word arithmetic is ggml's utmp unpacking: bytes 0-7 scales, 8-15 mins."""
    b = g.b
    u0, u1, u2 = (g.load(p, off + 4 * i, I32) for i in range(3))
    k1, k2, k3 = g.c(I32, 0x3F3F3F3F), g.c(I32, 0x0F0F0F0F), g.c(I32, 0x03030303)
    w3 = b.or_(b.and_(b.lshr(u2, g.c(I32, 4)), k2), b.shl(b.and_(b.lshr(u1, g.c(I32, 6)), k3), g.c(I32, 4)))
    w1 = b.or_(b.and_(u2, k2), b.shl(b.and_(b.lshr(u0, g.c(I32, 6)), k3), g.c(I32, 4)))
    w2 = b.and_(u1, k1)
    w0 = b.and_(u0, k1)
    sm = b.zext(words_to_bytes(g, [w0, w1, w2, w3]), V16I16)
    scales = [g.shuffle(sm, sm, [j] * 16) for j in range(8)]
    mins = b.uitofp(g.shuffle(sm, sm, range(8, 16)), V8F32)
    return scales, mins


def bsum32(g, bsums):
    """16 per-16 sums -> <8 x f32> per-32 sums (exact)."""
    return g.b.fadd(g.shuffle(bsums, bsums, range(0, 16, 2)), g.shuffle(bsums, bsums, range(1, 16, 2)))


class BlockDot(Scalar):
    """Q4_K as llama.cpp's repacked gemv folds it (its gemm: chunk_parts, chunk_min_sums)."""

    def row(self, g, p):
        sc, mins = k4_scales(g, p, 4)
        groups = []
        for c in range(4):
            q = g.load(p, 16 + 32 * c, V32I8)
            groups.append(g.b.and_(q, g.c(V32I8, 0xF)))
            groups.append(g.b.lshr(q, g.c(V32I8, 4)))
        return g.f16(p, 0), g.f16(p, 2), sc, mins, groups

    def tok(self, g, x, xd, xa, b):
        groups, d, bsums = tok_q8k(g, x, xd, xa, b)
        return groups, d, bsum32(g, bsums)

    def int_lanes(self, g, R, X):
        scv, groups = R[2], R[4]
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(groups[j], X[0][j]), scv[j])
            total = v if total is None else g.b.add(total, v)
        return total

    def parts(self, g, R, X):
        dw, dminw, _, mins, _ = R
        _, dx, bs32 = X
        return (self.int_lanes(g, R, X), g.b.fmul(mins, bs32), g.b.fmul(dw, dx), g.b.fmul(dminw, dx))

    def block_ints(self, g, R, X):
        """(int lanes of s1, min products of s2, dw, dmin, dx) of a Q4_K/Q5_K block pair."""
        dw, dminw, _, mins, _ = R
        _, dx, bs32 = X
        return self.int_lanes(g, R, X), g.b.fmul(mins, bs32), dw, dminw, dx

    def chunk_parts(self, g, R, X, k, n_chunks):
        """Int lanes of 32-groups 2k, 2k+1 (the gemm's `sb`); their min products come from
        chunk_min_sums."""
        _, _, scv, _, groups = R
        qx, _, _ = X
        lanes = g.b.add(g.maddwd(g.maddubs(groups[2 * k], qx[2 * k]), scv[2 * k]),
                        g.maddwd(g.maddubs(groups[2 * k + 1], qx[2 * k + 1]), scv[2 * k + 1]))
        return lanes, None

    def chunk_min_sums(self, g, pairs, n_chunks):
        """Per chunk k, <8 x f32> whose lane p is pair p's m[2k] + m[2k+1], m = mins * bsums of
        its 32-groups (integers below 2**24, so exact): the sum the gemm folds per chunk, as one
        level of pairwise adds and a transpose, ~24 vector ops where summing all 8 lanes of each
        chunk's products masked to its 2 took ~120."""
        b = g.b
        ms = [b.fmul(r[3], x[2]) for r, x in pairs] + [g.c(V8F32, 0.0)] * (8 - len(pairs))
        even, odd = list(range(0, 16, 2)), list(range(1, 16, 2))
        # level[i] lanes 0..3: chunks 0..3 of pair 2i; lanes 4..7: those of pair 2i + 1
        level = [b.fadd(g.shuffle(ms[i], ms[i + 1], even), g.shuffle(ms[i], ms[i + 1], odd))
                 for i in range(0, 8, 2)]
        out = []
        for k in range(n_chunks):
            lo = g.shuffle(level[0], level[1], [k, 4 + k, 8 + k, 12 + k])
            hi = g.shuffle(level[2], level[3], [k, 4 + k, 8 + k, 12 + k])
            out.append(g.shuffle(lo, hi, range(8)))
        return out


BLOCK_DOT = GEMM_DOT = BlockDot()

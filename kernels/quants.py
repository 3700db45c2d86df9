"""GGUF weight block layouts and their dequantisation, bit-exact with `gguf.quants`.

A weight matrix is the file's bytes as they are: a flat uint8 array of R rows x row_bytes,
each row `C // block_elems` blocks. The readers here take (w, byte offset) and decode in
place, so nothing is dequantised up front; only token embeddings use `dequantize_row`.
Element order and the float arithmetic (`d*sc*q - dmin*m` as two roundings, no fma) follow
ggml's dequantize_row_* in ggml-quants.c, which is also what gguf.quants does.
"""
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

import numba
from numba import njit

from .ir import bits_f32, f16_to_f32

F32 = int(GGMLQuantizationType.F32)
F16 = int(GGMLQuantizationType.F16)
BF16 = int(GGMLQuantizationType.BF16)
Q4_0 = int(GGMLQuantizationType.Q4_0)
Q4_1 = int(GGMLQuantizationType.Q4_1)
Q5_0 = int(GGMLQuantizationType.Q5_0)
Q5_1 = int(GGMLQuantizationType.Q5_1)
Q8_0 = int(GGMLQuantizationType.Q8_0)
Q2_K = int(GGMLQuantizationType.Q2_K)
Q3_K = int(GGMLQuantizationType.Q3_K)
Q4_K = int(GGMLQuantizationType.Q4_K)
Q5_K = int(GGMLQuantizationType.Q5_K)
Q6_K = int(GGMLQuantizationType.Q6_K)

SUPPORTED = (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)
QK_K = 256
# dasllama's own layouts, outside ggml's type ids: rows repacked in groups of 8 (X8) or 16
# (X16) (kernels/rowgroups.py); bytes a row and block, either width: Q8_0_X* 36 (an f32 scale, 32
# quants), Q4_0_X* 20 (an f32 scale, 32 nibbles), Q4_K_X* 312 (f32 d and dmin, int16 scales
# and mins, 256 quants), Q6_K_X* 356 (f32 d, int16 scales twice, 256 quants)
Q8_0_X8 = 63
Q4_K_X8 = 62
Q6_K_X8 = 61
Q4_0_X8 = 60
Q8_0_X16 = 59
Q4_K_X16 = 58
Q6_K_X16 = 57
Q4_0_X16 = 56

# (qtype id,) -> elements / bytes per block; indexable from njit code.
BLOCK_ELEMS = np.zeros(64, np.int64)
BLOCK_BYTES = np.zeros(64, np.int64)
for _t in SUPPORTED:
    BLOCK_ELEMS[_t], BLOCK_BYTES[_t] = GGML_QUANT_SIZES[GGMLQuantizationType(_t)]
for _x8, _x16, _elems, _bytes in ((Q8_0_X8, Q8_0_X16, 32, 36), (Q4_K_X8, Q4_K_X16, 256, 312),
                                  (Q6_K_X8, Q6_K_X16, 256, 356), (Q4_0_X8, Q4_0_X16, 32, 20)):
    BLOCK_ELEMS[_x8], BLOCK_BYTES[_x8] = BLOCK_ELEMS[_x16], BLOCK_BYTES[_x16] = _elems, _bytes

# Byte offsets of the f16 scale fields (d, dmin/m) inside each block.
F16_FIELDS = {Q8_0: (0,), Q4_0: (0,), Q5_0: (0,), Q4_1: (0, 2), Q5_1: (0, 2), Q2_K: (80, 82),
              Q3_K: (108,), Q4_K: (0, 2), Q5_K: (0, 2), Q6_K: (208,)}

JIT = dict(cache=True, boundscheck=False, error_model="numpy", nogil=True)


@njit(**JIT, inline="always")
def row_bytes(qtype, n_cols):
    return n_cols // BLOCK_ELEMS[qtype] * BLOCK_BYTES[qtype]


def type_name(qtype):
    names = {Q8_0_X8: "Q8_0_X8", Q4_0_X8: "Q4_0_X8", Q4_K_X8: "Q4_K_X8", Q6_K_X8: "Q6_K_X8",
             Q8_0_X16: "Q8_0_X16", Q4_0_X16: "Q4_0_X16", Q4_K_X16: "Q4_K_X16", Q6_K_X16: "Q6_K_X16"}
    return names[qtype] if qtype in names else GGMLQuantizationType(qtype).name


# --- field readers: (w uint8 array, byte offset) -> value ---------------------------------

@njit(**JIT, inline="always")
def f16_at(w, off):
    return f16_to_f32(np.uint16(np.uint16(w[off]) | (np.uint16(w[off + 1]) << np.uint16(8))))


@njit(**JIT, inline="always")
def u32_at(w, off):
    return (np.uint32(w[off]) | (np.uint32(w[off + 1]) << np.uint32(8))
            | (np.uint32(w[off + 2]) << np.uint32(16)) | (np.uint32(w[off + 3]) << np.uint32(24)))


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
def scale_q3_k(w, off, j):
    """Signed 6-bit scale of sub-block j (0..15) of a Q3_K 12-byte scales field at `off`."""
    lo = (w[off + (j & 7)] >> (4 * (j >> 3))) & 0xF
    hi = (w[off + 8 + (j & 3)] >> (2 * (j >> 2))) & 3
    return np.int32(lo | (hi << 4)) - 32


# --- integer quants of one block: the value ggml's integer dot multiplies ----------------
# Each returns the quant of element e (0 <= e < block_elems) of the block at `off`.

@njit(**JIT, inline="always")
def q_q4_0(w, off, e):  # signed: nibble - 8
    b = w[off + 2 + (e & 15)]
    return np.int32((b >> (4 * (e >> 4))) & 0xF) - 8


@njit(**JIT, inline="always")
def q_q4_1(w, off, e):  # unsigned nibble
    b = w[off + 4 + (e & 15)]
    return np.int32((b >> (4 * (e >> 4))) & 0xF)


@njit(**JIT, inline="always")
def q_q5_0(w, off, e):  # signed: 5-bit - 16
    b = w[off + 6 + (e & 15)]
    hi = (u32_at(w, off + 2) >> np.uint32(e)) & np.uint32(1)
    return np.int32((b >> (4 * (e >> 4))) & 0xF) + np.int32(hi << np.uint32(4)) - 16


@njit(**JIT, inline="always")
def q_q5_1(w, off, e):  # unsigned 5-bit
    b = w[off + 8 + (e & 15)]
    hi = (u32_at(w, off + 4) >> np.uint32(e)) & np.uint32(1)
    return np.int32((b >> (4 * (e >> 4))) & 0xF) + np.int32(hi << np.uint32(4))


@njit(**JIT, inline="always")
def q_q8_0(w, off, e):
    return np.int32(np.int8(w[off + 2 + e]))


@njit(**JIT, inline="always")
def q_q2_k(w, off, e):  # unsigned 2-bit; layout scales[16] qs[64] d dmin
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    return np.int32((w[off + 16 + 32 * n + l] >> (2 * k)) & 3)


@njit(**JIT, inline="always")
def q_q3_k(w, off, e):  # signed: 2-bit - 4 unless the hmask bit is set; hmask[32] qs[64] scales[12] d
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    lo = np.int32((w[off + 32 + 32 * n + l] >> (2 * k)) & 3)
    h = (w[off + l] >> (4 * n + k)) & 1
    return lo - (0 if h else 4)


@njit(**JIT, inline="always")
def q_q4_k(w, off, e):  # unsigned nibble; d dmin scales[12] qs[128]
    c, hi, l = e >> 6, (e >> 5) & 1, e & 31
    return np.int32((w[off + 16 + 32 * c + l] >> (4 * hi)) & 0xF)


@njit(**JIT, inline="always")
def q_q5_k(w, off, e):  # unsigned 5-bit; d dmin scales[12] qh[32] qs[128]
    c, hi, l = e >> 6, (e >> 5) & 1, e & 31
    lo = np.int32((w[off + 48 + 32 * c + l] >> (4 * hi)) & 0xF)
    h = np.int32((w[off + 16 + l] >> (2 * c + hi)) & 1)
    return lo | (h << 4)


@njit(**JIT, inline="always")
def q_q6_k(w, off, e):  # unsigned 6-bit (ggml subtracts 32 later); ql[128] qh[64] scales[16] d
    n, k, l = e >> 7, (e >> 5) & 3, e & 31
    lo = np.int32((w[off + 64 * n + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0xF)
    h = np.int32((w[off + 128 + 32 * n + l] >> (2 * k)) & 3)
    return lo | (h << 4)


# --- dequantisation ------------------------------------------------------------------------

@njit(**JIT)
def dequantize_blocks(qtype, w, off, n_blocks, out, o):
    """Decode n_blocks blocks of `qtype` starting at byte `off` into out[o : o + n]."""
    be = BLOCK_ELEMS[qtype]
    bb = BLOCK_BYTES[qtype]
    for b in range(n_blocks):
        p = off + b * bb
        q0 = o + b * be
        if qtype == F32:
            out[q0] = _f32_at(w, p)
        elif qtype == F16:
            out[q0] = f16_at(w, p)
        elif qtype == BF16:
            out[q0] = _bf16_at(w, p)
        elif qtype == Q8_0:
            d = f16_at(w, p)
            for e in range(32):
                out[q0 + e] = np.float32(q_q8_0(w, p, e)) * d
        elif qtype == Q4_0:
            d = f16_at(w, p)
            for e in range(32):
                out[q0 + e] = d * np.float32(q_q4_0(w, p, e))
        elif qtype == Q4_1:
            d, m = f16_at(w, p), f16_at(w, p + 2)
            for e in range(32):
                out[q0 + e] = d * np.float32(q_q4_1(w, p, e)) + m
        elif qtype == Q5_0:
            d = f16_at(w, p)
            for e in range(32):
                out[q0 + e] = d * np.float32(q_q5_0(w, p, e))
        elif qtype == Q5_1:
            d, m = f16_at(w, p), f16_at(w, p + 2)
            for e in range(32):
                out[q0 + e] = d * np.float32(q_q5_1(w, p, e)) + m
        elif qtype == Q2_K:
            d, dmin = f16_at(w, p + 80), f16_at(w, p + 82)
            for e in range(QK_K):
                s = w[p + (e >> 4)]
                dl = d * np.float32(s & 0xF)
                ml = dmin * np.float32(s >> 4)
                out[q0 + e] = dl * np.float32(q_q2_k(w, p, e)) - ml
        elif qtype == Q3_K:
            d = f16_at(w, p + 108)
            for e in range(QK_K):
                dl = d * np.float32(scale_q3_k(w, p + 96, e >> 4))
                out[q0 + e] = dl * np.float32(q_q3_k(w, p, e))
        elif qtype == Q4_K or qtype == Q5_K:
            d, dmin = f16_at(w, p), f16_at(w, p + 2)
            for e in range(QK_K):
                sc, m = scale_min_k4(w, p + 4, e >> 5)
                q = q_q4_k(w, p, e) if qtype == Q4_K else q_q5_k(w, p, e)
                out[q0 + e] = (d * np.float32(sc)) * np.float32(q) - dmin * np.float32(m)
        elif qtype == Q6_K:
            d = f16_at(w, p + 208)
            for e in range(QK_K):
                dl = d * np.float32(np.int8(w[p + 192 + (e >> 4)]))
                out[q0 + e] = dl * np.float32(q_q6_k(w, p, e) - 32)


@njit(**JIT, inline="always")
def _f32_at(w, off):
    return bits_f32(u32_at(w, off))


@njit(**JIT, inline="always")
def _bf16_at(w, off):
    bits = (np.uint32(w[off]) | (np.uint32(w[off + 1]) << np.uint32(8))) << np.uint32(16)
    return bits_f32(bits)


@njit(**JIT)
def dequantize_row(qtype, w, row, n_cols, out):
    """out[:n_cols] = row `row` of the (R, n_cols) `qtype` matrix w (flat uint8 bytes)."""
    rb = row_bytes(qtype, n_cols)
    dequantize_blocks(qtype, w, row * rb, n_cols // BLOCK_ELEMS[qtype], out, 0)


@njit(**JIT, parallel=True)
def _dequantize(qtype, w, n_rows, n_cols, out):
    for r in numba.prange(n_rows):
        dequantize_row(qtype, w, r, n_cols, out[r])


def dequantize(qtype, w, n_rows, n_cols):
    """The whole (n_rows, n_cols) float32 matrix: for tests and small tensors only."""
    out = np.empty((n_rows, n_cols), np.float32)
    _dequantize(qtype, np.ascontiguousarray(w).reshape(-1).view(np.uint8), n_rows, n_cols, out)
    return out


def q5_0_as_q8_0(blocks):
    """Q5_0 blocks (uint8, 22 bytes each) rewritten as Q8_0 blocks (34 bytes each): the same
    f16 scale and qs = the 5-bit quants minus 16. Both dot with Q8_0 activations through the
    same int lanes and the same fold, so a matmul on the copy is bit for bit one on the
    original; only the bytes streamed differ."""
    src = np.ascontiguousarray(blocks).reshape(-1)
    out = np.empty(src.size // int(BLOCK_BYTES[Q5_0]) * int(BLOCK_BYTES[Q8_0]), np.uint8)
    _q5_0_as_q8_0(src, out)
    return out


@njit(**JIT)
def _q5_0_as_q8_0(src, out):
    for blk in range(src.size // 22):
        p, o = 22 * blk, 34 * blk
        out[o], out[o + 1] = src[p], src[p + 1]
        for e in range(32):
            out[o + 2 + e] = np.uint8(q_q5_0(src, p, e) & 0xFF)

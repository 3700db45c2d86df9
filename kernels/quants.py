"""GGUF weight block layouts and their dequantisation, bit-exact with `gguf.quants`.

A weight matrix is the file's bytes as they are: a flat uint8 array of R rows x row_bytes,
each row `C // block_elems` blocks. The readers here take (w, byte offset) and decode in
place, so nothing is dequantised up front; only token embeddings use `dequantize_row`.
Element order and the float arithmetic (`d*sc*q - dmin*m` as two roundings, no fma) follow
ggml's dequantize_row_* in ggml-quants.c, which is also what gguf.quants does. Each format's
layout and decoding is its module in kernels/formats/; the tables and dispatch here are
generated from that registry.
"""
import numpy as np
from gguf.constants import GGMLQuantizationType

import numba
from numba import njit

from . import formats
from .formats import bf16, f16, f32, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0
from .formats.common import JIT, QK_K, f16_at, u32_at  # noqa: F401  (JIT, QK_K, u32_at: for the kernels)

F32, F16, BF16 = f32.ID, f16.ID, bf16.ID
Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 = q4_0.ID, q4_1.ID, q5_0.ID, q5_1.ID, q8_0.ID
Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = q2_k.ID, q3_k.ID, q4_k.ID, q5_k.ID, q6_k.ID

SUPPORTED = tuple(formats.BY_ID)      # the registry's formats, by id
# dasllama's own layouts, outside ggml's type ids: rows repacked in groups of 8 (X8) or 16
# (X16) (kernels/rowgroups.py), their bytes a row and block: Q8_0_X* 36 (an f32 scale, 32
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
Q6_K_P16 = 55    # Q6_K and Q5_0 in 16-row groups, the file's bytes a row and block (rowgroups_p16.py)
Q5_0_P16 = 54
Q4_K_P16 = 53
# copy layout -> (the file format whose rows it holds and whose activations it takes, bytes a
# row and block)
COPY_LAYOUTS = {Q8_0_X8: (Q8_0, 36), Q8_0_X16: (Q8_0, 36), Q4_0_X8: (Q4_0, 20), Q4_0_X16: (Q4_0, 20),
                Q4_K_X8: (Q4_K, 312), Q4_K_X16: (Q4_K, 312), Q6_K_X8: (Q6_K, 356), Q6_K_X16: (Q6_K, 356),
                Q6_K_P16: (Q6_K, 210), Q5_0_P16: (Q5_0, 22), Q4_K_P16: (Q4_K, 144)}

# (qtype id,) -> elements / bytes per block; indexable from njit code.
BLOCK_ELEMS = formats.table("BLOCK_ELEMS")
BLOCK_BYTES = formats.table("BLOCK_BYTES")
for _layout, (_source, _bytes) in COPY_LAYOUTS.items():
    BLOCK_ELEMS[_layout], BLOCK_BYTES[_layout] = BLOCK_ELEMS[_source], _bytes

# Byte offsets of the f16 scale fields (d, dmin/m) inside each block.
F16_FIELDS = {fmt.ID: fmt.F16_FIELDS for fmt in formats.FORMATS if fmt.F16_FIELDS}


@njit(**JIT, inline="always")
def row_bytes(qtype, n_cols):
    return n_cols // BLOCK_ELEMS[qtype] * BLOCK_BYTES[qtype]


def type_name(qtype):
    names = {Q8_0_X8: "Q8_0_X8", Q4_0_X8: "Q4_0_X8", Q4_K_X8: "Q4_K_X8", Q6_K_X8: "Q6_K_X8",
             Q8_0_X16: "Q8_0_X16", Q4_0_X16: "Q4_0_X16", Q4_K_X16: "Q4_K_X16", Q6_K_X16: "Q6_K_X16",
             Q6_K_P16: "Q6_K_P16", Q5_0_P16: "Q5_0_P16", Q4_K_P16: "Q4_K_P16"}
    return names[qtype] if qtype in names else GGMLQuantizationType(qtype).name


# the field readers and integer quants the kernels read formats by (formats/<name>.py)
scale_min_k4 = q4_k.scale_min_k4
scale_q3_k = q3_k.scale_q3_k
q_q4_0, q_q4_1, q_q5_0, q_q5_1, q_q8_0 = q4_0.quant, q4_1.quant, q5_0.quant, q5_1.quant, q8_0.quant
q_q2_k, q_q3_k, q_q4_k, q_q5_k, q_q6_k = q2_k.quant, q3_k.quant, q4_k.quant, q5_k.quant, q6_k.quant
_f32_at, _bf16_at = f32.value, bf16.value
q5_0_as_q8_0 = q5_0.as_q8_0

# --- dequantisation ------------------------------------------------------------------------

_dequantize_block = formats.dispatch("dequantize_block_of", ("w", "p", "out", "o"), "dequantize_block(w, p, out, o)",
                                     globals(), doc="out[o : o + block_elems] = the block at byte p, decoded.")


@njit(**JIT)
def dequantize_blocks(qtype, w, off, n_blocks, out, o):
    """Decode n_blocks blocks of `qtype` starting at byte `off` into out[o : o + n]."""
    be = BLOCK_ELEMS[qtype]
    bb = BLOCK_BYTES[qtype]
    for b in range(n_blocks):
        _dequantize_block(qtype, w, off + b * bb, out, o + b * be)


@njit(**JIT)
def dequantize_row(qtype, w, row, n_cols, out):
    """out[:n_cols] = row `row` of the (R, n_cols) `qtype` matrix w (flat uint8 bytes)."""
    rb = row_bytes(qtype, n_cols)
    dequantize_blocks(qtype, w, row * rb, n_cols // BLOCK_ELEMS[qtype], out, 0)


_rows_for = {}


def dequantize_row_for(qtypes):
    """`dequantize_row` over the registry's formats in `qtypes` only (copy layouts are left
    out: no row lookup reads them), one per set per process: each branch walks its format's
    blocks through that format's own decoder. dequantize_row, given a runtime qtype, compiles
    every format's decoder into its caller (a model's token lookup: 2-5 s of a cold start).
    The name carries the set, so the disk cache keeps one entry per set (see core/llm/step.py)."""
    key = frozenset(int(q) for q in qtypes if int(q) in formats.BY_ID)
    if key not in _rows_for:
        name = "dequantize_row__q" + "_".join(str(q) for q in sorted(key))
        lines = [f"def {name}(qtype, w, row, n_cols, out):"]
        for i, q in enumerate(sorted(key)):
            fmt = formats.BY_ID[q]
            be, bb = fmt.BLOCK_ELEMS, fmt.BLOCK_BYTES
            lines += [f"    {'if' if i == 0 else 'elif'} qtype == {q}:   # {formats.name_of(fmt)}",
                      f"        p = row * (n_cols // {be}) * {bb}",
                      f"        for b in range(n_cols // {be}):",
                      f"            _{q}.dequantize_block(w, p + b * {bb}, out, b * {be})"]
        if not key:
            lines.append("    pass")
        fn = formats.compiled(lines, {f"_{q}": formats.BY_ID[q] for q in key}, globals())[name]
        _rows_for[key] = njit(**JIT)(fn)
    return _rows_for[key]


@njit(**JIT, parallel=True)
def _dequantize(qtype, w, n_rows, n_cols, out):
    for r in numba.prange(n_rows):
        dequantize_row(qtype, w, r, n_cols, out[r])


def dequantize(qtype, w, n_rows, n_cols):
    """The whole (n_rows, n_cols) float32 matrix: for tests and small tensors only."""
    out = np.empty((n_rows, n_cols), np.float32)
    _dequantize(qtype, np.ascontiguousarray(w).reshape(-1).view(np.uint8), n_rows, n_cols, out)
    return out

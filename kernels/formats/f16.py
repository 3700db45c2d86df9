"""F16: one element a block, an IEEE half. Multiplied by activations rounded to f16, in
ggml's fma lanes (dots.dot_float, and tinyBLAS for batches)."""
from gguf.constants import GGMLQuantizationType
from numba import njit

from .common import ACT_F16, FOLD_FLOAT, JIT, block_size, f16_at

ID = int(GGMLQuantizationType.F16)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = ()
REFERENCE = None     # gguf.quants.dequantize reads it as a numpy float16 array
ACT, FOLD = ACT_F16, FOLD_FLOAT


@njit(**JIT, inline="always")
def value(w, p):
    return f16_at(w, p)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    out[o] = f16_at(w, p)

"""F32: one element a block, the IEEE float32 as it lies in the file. Multiplied by float
activations (x as it is) in ggml's fma lanes (dots.dot_float, and tinyBLAS for batches)."""
from gguf.constants import GGMLQuantizationType
from numba import njit

from .common import ACT_F32, FOLD_FLOAT, JIT, block_size, f32_at

ID = int(GGMLQuantizationType.F32)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = ()
REFERENCE = None     # gguf.quants.dequantize reads it as a numpy float32 array
ACT, FOLD = ACT_F32, FOLD_FLOAT


@njit(**JIT, inline="always")
def value(w, p):
    return f32_at(w, p)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    out[o] = f32_at(w, p)

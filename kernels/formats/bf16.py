"""BF16: one element a block, the high 16 bits of a float32. Multiplied by activations rounded
to bf16 (nearest even), in ggml's fma lanes (dots.dot_float, and tinyBLAS for batches)."""
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType
from numba import njit

from .common import ACT_BF16, FOLD_FLOAT, JIT, bf16_at, block_size

ID = int(GGMLQuantizationType.BF16)
BLOCK_ELEMS, BLOCK_BYTES = block_size(ID)
F16_FIELDS = ()
REFERENCE = gq.BF16
ACT, FOLD = ACT_BF16, FOLD_FLOAT


@njit(**JIT, inline="always")
def value(w, p):
    return bf16_at(w, p)


@njit(**JIT, inline="always")
def dequantize_block(w, p, out, o):
    out[o] = bf16_at(w, p)

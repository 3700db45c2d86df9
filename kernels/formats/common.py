"""What every weight format module shares: numba's options, the byte-field readers, and the
names of the activation formats and folds a format's integer dot is specified by."""
import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from numba import njit

from ..ir import bits_f32, f16_to_f32

JIT = dict(cache=True, boundscheck=False, error_model="numpy", nogil=True)
QK_K = 256

# Activation formats: ggml's vec_dot_type of a weight type (the ggml type ids; Q8_1 = 9 and
# Q8_K = 15 are activation-only)
ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0 = (int(GGMLQuantizationType[n]) for n in ("F32", "F16", "BF16", "Q8_0"))
ACT_Q8_1, ACT_Q8_K = 9, 15
# How llama.cpp's x86 dot folds a format's integer block sums into floats (kernels/dots.py
# tells each): 8 float lanes, one scalar fma per chunk, or the float formats' fma lanes
FOLD_LANES8, FOLD_SCALAR, FOLD_FLOAT = 0, 1, 2


def block_size(qtype):
    """(elements, bytes) of one block of the ggml type `qtype`, as gguf-py has them."""
    return tuple(int(n) for n in GGML_QUANT_SIZES[GGMLQuantizationType(qtype)])


@njit(**JIT, inline="always")
def f16_at(w, off):
    return f16_to_f32(np.uint16(np.uint16(w[off]) | (np.uint16(w[off + 1]) << np.uint16(8))))


@njit(**JIT, inline="always")
def u32_at(w, off):
    return (np.uint32(w[off]) | (np.uint32(w[off + 1]) << np.uint32(8))
            | (np.uint32(w[off + 2]) << np.uint32(16)) | (np.uint32(w[off + 3]) << np.uint32(24)))


@njit(**JIT, inline="always")
def f32_at(w, off):
    return bits_f32(u32_at(w, off))


@njit(**JIT, inline="always")
def bf16_at(w, off):
    bits = (np.uint32(w[off]) | (np.uint32(w[off + 1]) << np.uint32(8))) << np.uint32(16)
    return bits_f32(bits)

"""IEEE half precision in compiled code.

numba has no scalar float16, but LLVM does: these intrinsics emit `fptrunc`/`fpext` on `half`,
which x86 with F16C lowers to vcvtps2ph/vcvtph2ps (round to nearest even, as ggml's
GGML_CPU_FP32_TO_FP16). The KV cache, flash-attention queries and the GELU table index are
rounded through f16 in llama.cpp, so matching it takes exact conversions, not approximations.
"""
import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic


@intrinsic
def f32_to_f16_bits(typingctx, x):
    """float32 -> uint16 bits of the nearest half."""
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        half = builder.fptrunc(args[0], ir.HalfType())
        return builder.bitcast(half, ir.IntType(16))

    return sig, codegen


@intrinsic
def f16_bits_to_f32(typingctx, h):
    """uint16 bits of a half -> float32 (exact)."""
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        half = builder.bitcast(args[0], ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return sig, codegen


@njit(cache=True, inline="always")
def round_f16(x):
    """x rounded to the nearest half, returned as float32."""
    return f16_bits_to_f32(f32_to_f16_bits(np.float32(x)))


def round_f16_ref(x):
    """Reference: numpy's own float16 conversion (round to nearest even)."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)

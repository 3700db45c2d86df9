"""ONNX Runtime's DynamicQuantizeLinear in compiled code: float32 -> uint8 with the range
taken over the values and zero, scale = (max - min) / 255, zero point and quants rounded half
to even, as ORT computes them.

NaN as ORT treats it (measured on onnxruntime 1.32): left out of the range (all NaN: scale 1,
zero point 0) and quantised to 0; only a NaN in the last place of ORT's vector min/max loop
reaches its range (a NaN scale), which is not modelled. Kokoro's export makes NaN where its atan2 divides 0 by 0 on
a silent frame of the harmonic source; a range through NaN would turn the whole next conv
into NaN, and the audio into silence.
"""
import numpy as np
from numba import njit, prange

from ..quants import JIT

F32 = np.float32


# running minima and maxima a lane, so the compares vectorise: 64 lanes are four zmm chains,
# enough to hide vminps' latency (16 lanes, one chain: 2x slower over 4.7M values)
_LANES = 64


@njit(**JIT)
def range_of(x, start, stop):
    """(min, max) of x[start:stop] and 0, NaN left out."""
    los = np.zeros(_LANES, F32)
    his = np.zeros(_LANES, F32)
    n_full = start + (stop - start) // _LANES * _LANES
    for i in range(start, n_full, _LANES):
        for j in range(_LANES):
            v = x[i + j]
            los[j] = v if v < los[j] else los[j]      # a NaN compares false both ways
            his[j] = v if v > his[j] else his[j]
    lo, hi = F32(0.0), F32(0.0)
    for j in range(_LANES):
        lo = los[j] if los[j] < lo else lo
        hi = his[j] if his[j] > hi else hi
    for i in range(n_full, stop):
        v = x[i]
        lo = v if v < lo else lo
        hi = v if v > hi else hi
    return lo, hi


@njit(**JIT)
def params_of(lo, hi):
    """(scale, zero point as float32) of the range [lo, hi] (which holds 0)."""
    scale = F32(1.0) if hi == lo else F32((hi - lo) / F32(255.0))
    return scale, np.rint(min(max(F32(0.0) - lo / scale, F32(0.0)), F32(255.0)))


@njit(**JIT)
def quantize_one(v, scale, zero_point):
    q = np.rint(v / scale) + zero_point
    return np.uint8(min(max(q, F32(0.0)), F32(255.0))) if q == q else np.uint8(0)


@njit(**JIT)
def quantize_params(x):
    """DynamicQuantizeLinear's (scale, zero point as float32) of the flat float32 x: one
    thread, which reads at memory speed (a parallel pass measured 4x slower on a loaded host,
    waiting on its slowest thread)."""
    return params_of(*range_of(x, 0, x.shape[0]))


@njit(**JIT, parallel=True)
def quantize(x, scale, zero_point, out):
    """out = clip(rint(x / scale) + zero_point, 0, 255) as uint8, NaN -> 0 (flat arrays)."""
    for i in prange(x.shape[0]):
        out[i] = quantize_one(x[i], scale, zero_point)


def dynamic_quantize(x):
    """x float32 (any shape) -> (uint8 quants of its shape, scale float32, zero point uint8)."""
    flat = np.ascontiguousarray(x, F32).reshape(-1)
    scale, zp = quantize_params(flat)
    out = np.empty(flat.shape, np.uint8)
    quantize(flat, F32(scale), F32(zp), out)
    return out.reshape(np.shape(x)), F32(scale), np.uint8(zp)

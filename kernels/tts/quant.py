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
_CHUNK = 1 << 16          # values per job of the range's parallel pass


@njit(**JIT)
def range_of(x, start, stop):
    """(min, max) of x[start:stop] and 0, NaN left out."""
    lo, hi = F32(0.0), F32(0.0)
    for i in range(start, stop):
        v = x[i]
        if v < lo:          # a NaN compares false both ways
            lo = v
        if v > hi:
            hi = v
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


@njit(**JIT, parallel=True)
def quantize_params(x):
    """DynamicQuantizeLinear's (scale, zero point as float32) of the flat float32 x."""
    n = x.shape[0]
    n_jobs = max(1, (n + _CHUNK - 1) // _CHUNK)
    los = np.zeros(n_jobs, F32)
    his = np.zeros(n_jobs, F32)
    for job in prange(n_jobs):
        los[job], his[job] = range_of(x, job * _CHUNK, min(n, (job + 1) * _CHUNK))
    return params_of(los.min(), his.max())


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

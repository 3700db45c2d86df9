"""The one sequential step of miniaudio's linear resampler (which llama.cpp's mtmd decodes audio
through): a biquad low-pass section, transposed direct form II in float32, run over a whole
signal. A plain-loop reference beside it; the interpolation around it is numpy
(core/mtmd/audio_in.py)."""
import numpy as np
from numba import njit

from ..quants import JIT


@njit(**JIT)
def biquad_f32(x, b0, b1, b2, a1, a2, out):
    """out (n,) <- the biquad (b0 b1 b2 / 1 a1 a2, float32) over x (n,) from rest; out may be
    x. miniaudio's ma_biquad_process_pcm_frame_f32__direct_form_2_transposed, step for step."""
    r1 = np.float32(0.0)
    r2 = np.float32(0.0)
    for i in range(x.size):
        v = x[i]
        y = b0 * v + r1
        r1 = b1 * v - a1 * y + r2
        r2 = b2 * v - a2 * y
        out[i] = y


def biquad_f32_ref(x, b0, b1, b2, a1, a2):
    """The plain-Python reference of biquad_f32 (float32 scalars throughout)."""
    f = np.float32
    b0, b1, b2, a1, a2 = f(b0), f(b1), f(b2), f(a1), f(a2)
    r1 = r2 = f(0)
    out = np.empty(len(x), np.float32)
    for i, v in enumerate(np.asarray(x, np.float32)):
        y = f(b0 * v + r1)
        r1 = f(f(f(b1 * v) - f(a1 * y)) + r2)
        r2 = f(f(b2 * v) - f(a2 * y))
        out[i] = y
    return out

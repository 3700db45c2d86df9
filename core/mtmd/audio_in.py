"""An audio file to the 16 kHz mono samples mtmd's tower is fed, as llama.cpp's mtmd-helper
gets them: miniaudio decodes and resamples with its linear resampler (ma_linear_resampler:
rates reduced by their gcd, a 4th-order Butterworth low-pass at half the lower rate as two
biquads, linear interpolation one input sample behind), and the length is
ma_calculate_frame_count_after_resampling's. The file is decoded here by formats/audio.py
(libsndfile), which differs from miniaudio's mp3 decoder by ~3e-5 relative on test-2.mp3; a
band-limited resampler (soxr, which `transcribe` uses) would differ from miniaudio's by ~8e-2.
"""
import math

import numpy as np

from dasllama.formats.audio import load_native
from dasllama.kernels.speech.resample import biquad_f32

SAMPLE_RATE = 16000
LPF_ORDER = 4            # MA_DEFAULT_RESAMPLER_LPF_ORDER


def load_clip(path):
    """A file's samples as mtmd would feed them: float32 (n,) at 16 kHz."""
    samples, rate = load_native(path)
    return linear_resample(samples, rate, SAMPLE_RATE)


def frame_count_after_resampling(n_in, rate_in, rate_out):
    """ma_calculate_frame_count_after_resampling: the length mtmd sizes its buffer to."""
    if n_in == 0 or rate_in == rate_out:
        return n_in
    n_out = n_in * rate_out // rate_in
    from_frac = n_out * (rate_in // rate_out) // rate_out
    if n_out * (rate_in % rate_out) + from_frac <= n_in:
        n_out += 1
    return n_out


def lowpass_sections(rate_in, rate_out, order=LPF_ORDER):
    """The float32 (b0, b1, b2, a1, a2) of each biquad of miniaudio's resampling low-pass."""
    fs, fc = max(rate_in, rate_out), min(rate_in, rate_out) * 0.5
    w = 2 * math.pi * fc / fs
    s, c = math.sin(w), math.cos(w)
    sections = []
    for i in range(order // 2):
        q = 1 / (2 * math.cos((1 + 2 * i) * (math.pi / (order * 2))))     # Butterworth, even order
        alpha = s / (2 * q)
        a0 = 1 + alpha
        sections.append(tuple(np.float32(v / a0) for v in ((1 - c) / 2, 1 - c, (1 - c) / 2, -2 * c, 1 - alpha)))
    return sections


def linear_resample(x, rate_in, rate_out=SAMPLE_RATE):
    """miniaudio's linear resampler over a whole mono float32 signal x (n,)."""
    x = np.ascontiguousarray(x, np.float32)
    if rate_in == rate_out or not len(x):
        return x
    g = math.gcd(rate_in, rate_out)
    r_in, r_out = rate_in // g, rate_out // g
    down = r_in > r_out
    if down:                                 # downsampling filters each input as it is loaded
        x = _lowpass(x, r_in, r_out)
    n_out = frame_count_after_resampling(len(x), rate_in, rate_out)
    pos = np.arange(n_out, dtype=np.int64) * r_in
    k, frac = pos // r_out, pos % r_out      # x1 = x[k], x0 = x[k - 1]; 0 before the start
    live = k < len(x)                        # past the input the buffer stays zero
    x1 = x[k[live]]
    x0 = np.where(k[live] > 0, x[np.maximum(k[live] - 1, 0)], np.float32(0))
    a = frac[live].astype(np.float32) / np.float32(r_out)
    out = np.zeros(n_out, np.float32)
    out[:live.sum()] = x0 + (x1 - x0) * a    # ma_mix_f32_fast, in float32
    if not down:                             # upsampling filters each output frame
        out[:live.sum()] = _lowpass(out[:live.sum()], r_in, r_out)
    return out


def _lowpass(x, r_in, r_out):
    y = x.copy()
    for b0, b1, b2, a1, a2 in lowpass_sections(r_in, r_out):
        biquad_f32(y, b0, b1, b2, a1, a2, y)
    return y

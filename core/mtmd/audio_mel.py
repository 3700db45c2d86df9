"""Audio samples to the mel windows a Whisper-style mmproj tower reads, as llama.cpp's mtmd
computes them (mtmd-audio.cpp, mtmd_audio_preprocessor_whisper), which is not quite whisper's:

- the filterbank is mtmd's own Slaney triangles, evaluated in float64 at k * sr / n_fft and
  rounded once (librosa, and so core/asr/mel.py, rounds before the area norm);
- every frame goes through the FFT, the 30 s of padding too, and a silent frame's power is
  floored at 2^-24 (log10 = -7.22), not at 1e-10 (-10), before the (max - 8) clamp;
- the last frame is kept: a clip of n samples gives (n + 480000) // 160 + 1 frames, cut into
  3000-frame windows of which the incomplete last one is dropped.

The FFT here is numpy's (float64) on the float32 windowed frames; mtmd's own float32
radix-2/DFT differs from it by a few ulp of the power, far below what the log mel keeps.
"""
import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400                      # also the Hann window's length
HOP = 160
CHUNK_SAMPLES = 30 * SAMPLE_RATE  # the zeros mtmd appends
N_FRAMES = 3000                  # mel frames per window: the tower's fixed input
MEL_FLOOR = 5.960464477539063e-08  # filter_params::mel_floor, 2^-24


def mel_filters(n_mel, n_fft=N_FFT, sample_rate=SAMPLE_RATE):
    """mtmd's fill_mel_filterbank_matrix (Slaney scale, area norm): float32 (n_mel, n_fft/2 + 1)."""
    min_log_hz, lin_slope = 1000.0, 3 / 200.0
    min_log_mel, log_step = min_log_hz * lin_slope, np.log(6.4) / 27.0

    def hz_to_mel(f):
        return f * lin_slope if f < min_log_hz else min_log_mel + np.log(f / min_log_hz) / log_step

    def mel_to_hz(m):
        return np.where(m < min_log_mel, m / lin_slope, min_log_hz * np.exp((m - min_log_mel) * log_step))

    m_lo, m_hi = hz_to_mel(0.0), hz_to_mel(0.5 * sample_rate)
    hz = mel_to_hz(m_lo + (m_hi - m_lo) * (np.arange(n_mel + 2) / (n_mel + 1)))     # (n_mel + 2,)
    f = np.arange(n_fft // 2 + 1) * (sample_rate / n_fft)                           # (n_bins,)
    left, centre, right = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (f - left) / np.maximum(1e-30, centre - left)
    down = (right - f) / np.maximum(1e-30, right - centre)
    w = np.where((f >= left) & (f <= centre), up, np.where((f > centre) & (f <= right), down, 0.0))
    enorm = 2.0 / np.maximum(1e-30, right - left)
    return (w * enorm).astype(np.float32)


def hann_window(n=N_FFT):
    """The periodic Hann window as mtmd fills it: 0.5 (1 - cosf(2 pi i / n)), cosf in float32."""
    theta = (2 * np.pi * np.arange(n) / n).astype(np.float32)
    return (0.5 * (1.0 - np.cos(theta).astype(np.float64))).astype(np.float32)


def log_mel(samples, filters):
    """mtmd's whisper log-mel of float32 samples at 16 kHz: float32 (n_mel, n_frames)."""
    samples = np.asarray(samples, np.float32)
    half = N_FFT // 2
    if len(samples) < half + 1:                    # reflection needs one sample past half a window
        samples = np.concatenate([samples, np.zeros(half + 1 - len(samples), np.float32)])
    n = len(samples)
    padded = np.zeros(n + CHUNK_SAMPLES + 2 * half, np.float32)                     # (n + 480400,)
    padded[half:half + n] = samples
    padded[:half] = samples[1:half + 1][::-1]
    n_frames = (len(padded) - N_FFT) // HOP + 1
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP][:n_frames]
    window = hann_window()
    mel = np.empty((filters.shape[0], n_frames), np.float32)
    # frames wholly in the zeros after the samples have no energy: their log is the floor's,
    # as the FFT would give it (most of a short clip's frames: 3000 of 4740 for 17 s)
    n_live = min(n_frames, (half + n - 1) // HOP + 1)
    mel[:, n_live:] = np.log10(np.float64(MEL_FLOOR))
    filters64 = filters.astype(np.float64)
    step = 1024                                     # frames per block: bounded temporaries
    for f0 in range(0, n_live, step):
        windowed = frames[f0:min(f0 + step, n_live)] * window                       # (F, 400) f32
        spec = np.fft.rfft(windowed.astype(np.float64), axis=-1)                    # (F, 201)
        re, im = spec.real.astype(np.float32), spec.imag.astype(np.float32)
        power = re * re + im * im                                                   # f32, as mtmd
        energy = power.astype(np.float64) @ filters64.T                             # (F, n_mel)
        mel[:, f0:f0 + len(windowed)] = np.log10(np.maximum(energy, MEL_FLOOR)).T
    # mtmd compares in double over the whole mel, stores the floor as float, scales in double;
    # in float32 the same bits: both sides of the comparison are floats, and (x + 4) / 4 in
    # double rounds once to what float32's x + 4 rounds to, the division by 4 being exact
    floor = np.float32(np.float64(mel.max()) - 8.0)
    np.maximum(mel, floor, out=mel)
    mel += np.float32(4.0)
    mel /= np.float32(4.0)
    return mel


def mel_windows(samples, n_mel):
    """The tower's inputs for a clip: a list of float32 (n_mel, 3000) windows, as mtmd cuts them
    (every complete 3000-frame window; the last, always partly padding, dropped)."""
    mel = log_mel(samples, mel_filters(n_mel))
    n = mel.shape[1]
    return [np.ascontiguousarray(mel[:, off:off + N_FRAMES]) for off in range(0, n - N_FRAMES + 1, N_FRAMES)]

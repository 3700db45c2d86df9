"""Whisper's front end: audio samples at 16 kHz to the log-mel spectrogram its encoder reads,
computed as openai-whisper and whisper.cpp compute it."""
import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_LENGTH = 30
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE          # samples in one 30 s window
N_FRAMES = N_SAMPLES // HOP_LENGTH              # mel frames in one window: 3000


def mel_filters(n_mels, sample_rate=SAMPLE_RATE, n_fft=N_FFT):
    """librosa's Slaney mel filterbank (htk=False, norm="slaney"), the one whisper ships.

    Computed rather than shipped: a CT2 directory carries no filters.
    """
    f_sp, min_log_hz = 200.0 / 3, 1000.0
    min_log_mel, logstep = min_log_hz / f_sp, np.log(6.4) / 27.0

    def hz_to_mel(f):
        f = np.asarray(f, np.float64)
        return np.where(f >= min_log_hz, min_log_mel + np.log(np.maximum(f, 1e-10) / min_log_hz)
                        / logstep, f / f_sp)

    def mel_to_hz(m):
        return np.where(m >= min_log_mel, min_log_hz * np.exp(logstep * (m - min_log_mel)),
                        f_sp * m)

    fft_freqs = np.linspace(0, sample_rate / 2, 1 + n_fft // 2)
    mel_f = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = mel_f[:, None] - fft_freqs[None, :]
    lower = -ramps[:-2] / fdiff[:-1, None]
    upper = ramps[2:] / fdiff[1:, None]
    # rounded to f32 before and after the norm, as librosa's float32 buffer does
    weights = np.maximum(0, np.minimum(lower, upper)).astype(np.float32)
    enorm = 2.0 / (mel_f[2:n_mels + 2] - mel_f[:n_mels])
    return (weights * enorm[:, None]).astype(np.float32)     # (n_mels, 1 + n_fft/2)


def log_mel_spectrogram(samples, filters, pad=N_SAMPLES, chunk=N_FRAMES):
    """whisper's log-mel (n_mels, n_frames) of samples followed by `pad` zeros.

    STFT with a periodic Hann window of N_FFT, hop HOP_LENGTH, centred frames (reflect pad),
    the last frame dropped; power through the mel filters, log10 clamped at 1e-10, floored
    at (max - 8), then (x + 4) / 4. Frames are computed in chunks to bound the temporaries;
    frames wholly in the zero padding take log10(1e-10) directly, as whisper.cpp does.
    """
    samples = np.asarray(samples, np.float32)
    n = len(samples)
    half = N_FFT // 2
    padded = np.zeros(n + pad + 2 * half, np.float32)
    padded[half:half + n] = samples
    n_reflect = min(half, max(0, n - 1))
    padded[half - n_reflect:half] = samples[1:1 + n_reflect][::-1]
    n_frames = (len(padded) - N_FFT) // HOP_LENGTH
    n_live = min(n_frames, (n + half) // HOP_LENGTH + 1)    # frames touching any sample
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    mel = np.full((filters.shape[0], n_frames), -10.0, np.float32)
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    for f0 in range(0, n_live, chunk):
        f1 = min(n_live, f0 + chunk)
        spec = np.fft.rfft(frames[f0:f1] * window, axis=-1)                    # (F, 201)
        power = (spec.real ** 2 + spec.imag ** 2).astype(np.float32)
        mel[:, f0:f1] = np.log10(np.maximum(filters @ power.T, 1e-10))
    np.maximum(mel, mel.max() - 8.0, out=mel)
    mel += 4.0
    mel /= 4.0
    return mel

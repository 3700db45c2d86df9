"""Audio in: any file libsndfile decodes (wav, flac, ogg/opus, mp3), as mono float32 at one rate.

Channels are averaged; other sample rates go through soxr's band-limited resampler (the
"HQ" preset), not through interpolation, which would fold high frequencies into the band.
"""
import io
from pathlib import Path

import numpy as np
import soundfile
import soxr

SAMPLE_RATE = 16000


class AudioError(ValueError):
    """Audio that cannot be read; the message names the file and the cause."""


def load(source, sample_rate=SAMPLE_RATE, name=None):
    """(samples,) float32 mono at `sample_rate` from a path, bytes or a binary file object."""
    samples, _ = _decode(source, name, lambda f: _read_mono(f, sample_rate))
    return samples


def load_native(source, name=None):
    """((samples,) float32 mono, its sample rate) as stored, for a caller that resamples as
    another engine does (mtmd: miniaudio's linear resampler)."""
    return _decode(source, name, lambda f: _read_mono(f, f.samplerate))


def _decode(source, name, read):
    """(read(the open SoundFile), its sample rate), every failure an AudioError sentence."""
    name = name or (str(source) if isinstance(source, (str, Path)) else "<stdin>")
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            raise AudioError(f"{name} is a directory, not an audio file.")
        if not path.is_file():
            raise AudioError(f"{name}: no such file.")
        if path.stat().st_size == 0:
            raise AudioError(f"{name}: the file is empty.")
        stream = path
    else:
        data = source if isinstance(source, bytes) else source.read()
        if not data:
            raise AudioError(f"{name}: no audio data (empty input).")
        stream = io.BytesIO(data)
    try:
        with soundfile.SoundFile(stream) as f:
            samples, rate = read(f), f.samplerate
    except (soundfile.LibsndfileError, RuntimeError, TypeError) as e:
        raise AudioError(f"{name}: cannot decode this audio ({_reason(e)}); dasllama reads "
                         f"wav, flac, ogg and mp3.") from None
    except OSError as e:
        raise AudioError(f"{name}: cannot read this file ({e.strerror or e}).") from None
    if not np.isfinite(samples).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples (a float file written "
                         "wrong?), so it cannot be transcribed; re-export it.")
    return samples, rate


def _read_mono(f, sample_rate, block=1 << 16):
    """Decode, downmix and resample block by block: only the 16 kHz mono result is whole."""
    resampler = None
    if f.samplerate != sample_rate:
        resampler = soxr.ResampleStream(f.samplerate, sample_rate, 1, dtype="float32",
                                        quality="HQ")
    pieces = []
    while True:
        chunk = f.read(block, dtype="float32", always_2d=True)
        last = len(chunk) < block
        mono = chunk.mean(axis=1, dtype=np.float32)
        pieces.append(resampler.resample_chunk(mono, last=last) if resampler else mono)
        if last:
            break
    return np.ascontiguousarray(np.concatenate(pieces), dtype=np.float32)


def _reason(error):
    text = str(error).strip().rstrip(".")
    return text[0].lower() + text[1:] if text else type(error).__name__

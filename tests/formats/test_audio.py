"""Audio in: decoding through soundfile, downmix, band-limited resampling, clear errors."""
import io

import numpy as np
import pytest
import soundfile

from dasllama.formats.audio import SAMPLE_RATE, AudioError, load


def tone(freq, rate, seconds=1.0, amp=0.5):
    t = np.arange(int(rate * seconds)) / rate
    return (amp * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def peak_hz(x, rate):
    spectrum = np.abs(np.fft.rfft(x * np.hanning(len(x))))
    return np.argmax(spectrum) * rate / len(x)


@pytest.mark.parametrize("fmt,ext", [("WAV", "wav"), ("FLAC", "flac"), ("OGG", "ogg"), ("MP3", "mp3")])
def test_formats_decode_to_16k_mono(tmp_path, fmt, ext):
    path = tmp_path / f"a.{ext}"
    soundfile.write(path, tone(440, 16000), 16000, format=fmt)
    x = load(path)
    assert x.dtype == np.float32 and x.ndim == 1
    assert abs(len(x) - 16000) < 2000          # mp3 adds encoder delay and padding
    assert abs(peak_hz(x, SAMPLE_RATE) - 440) < 3


def test_stereo_is_averaged(tmp_path):
    left, right = tone(300, 16000), tone(300, 16000, amp=0.1)
    path = tmp_path / "stereo.wav"
    soundfile.write(path, np.stack([left, right], axis=1), 16000, subtype="FLOAT")
    np.testing.assert_allclose(load(path), (left + right) / 2, atol=1e-7)


def test_resampling_keeps_the_band_and_removes_what_is_above_it(tmp_path):
    rate = 44100
    path = tmp_path / "44k.wav"
    # 1 kHz stays; 11 kHz is above the 8 kHz Nyquist of 16 kHz: a band-limited resampler
    # removes it, naive decimation would fold it down to 5 kHz.
    soundfile.write(path, tone(1000, rate) + tone(11000, rate), rate, subtype="FLOAT")
    x = load(path)
    assert len(x) == 16000
    spectrum = np.abs(np.fft.rfft(x[1000:-1000]))
    freqs = np.fft.rfftfreq(len(x) - 2000, 1 / SAMPLE_RATE)
    at = lambda f: spectrum[np.argmin(np.abs(freqs - f))]
    assert abs(peak_hz(x, SAMPLE_RATE) - 1000) < 2
    assert at(5000) < 1e-3 * at(1000)


def test_bytes_and_file_objects(tmp_path):
    buf = io.BytesIO()
    soundfile.write(buf, tone(500, 8000), 8000, format="WAV")
    data = buf.getvalue()
    a, b = load(data), load(io.BytesIO(data))
    np.testing.assert_array_equal(a, b)
    assert len(a) == 16000


def test_zero_length_audio_is_empty_not_an_error(tmp_path):
    path = tmp_path / "zero.wav"
    soundfile.write(path, np.zeros(0, np.float32), 16000)
    assert load(path).shape == (0,)


@pytest.mark.parametrize("content,words", [
    (b"", "empty"),
    (b"RIFF\x00\x00\x00\x00WAVEjunk" + bytes(100), "cannot decode"),
    (b"just some text, not audio\n" * 10, "cannot decode"),
])
def test_bad_input_is_a_clear_error(tmp_path, content, words):
    path = tmp_path / "bad.wav"
    path.write_bytes(content)
    with pytest.raises(AudioError, match=words) as e:
        load(path)
    assert str(path) in str(e.value)
    with pytest.raises(AudioError, match="<stdin>"):
        load(io.BytesIO(content))


def test_missing_file(tmp_path):
    with pytest.raises(AudioError, match="no such file"):
        load(tmp_path / "nope.wav")

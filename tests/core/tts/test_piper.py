"""Piper VITS voices on our engine against piper-tts 1.8.0 (onnxruntime on the same .onnx) in
the same session: the same phoneme ids in, the noise scales at 0 so both are deterministic.
Durations are integers, so the waveform lengths must be equal; the samples agree to float32
rounding through ~60 layers (measured on joe-medium with the conv tiles of kernels/tts/conv.py:
max |diff| 3e-5 to 7.4e-5, SNR 87-92 dB; 1.6e-5 and 98 dB over BLAS alone). Then our
Whisper hears our speech back as the text."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

from dasllama.core.tools import verify_tts
from dasllama.core.tts import SynthesisError, VoiceError, load_voice, phonemize, sentence_phonemes, synthesize
from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import or_skip

SENTENCES = whisper_assets.TTS_SENTENCES[:2]
MAX_ABS_DIFF = 2e-4            # measured <= 1.6e-4 on joe-medium (the bench's 20 sentences, AMX)
MIN_SNR_DB = 70.0              # measured >= 87 dB


@pytest.fixture(scope="module")
def voice_path():
    return or_skip(whisper_assets.piper_voice)


@pytest.fixture(scope="module")
def voice(voice_path):
    return load_voice(voice_path)


@pytest.fixture(scope="module")
def reference(voice_path):
    piper = pytest.importorskip("piper")
    return piper.PiperVoice.load(voice_path)


def onnxruntime_audio(reference, ids):
    """The reference network's waveform for `ids`, called as piper calls it."""
    inputs = {"input": np.array([ids], np.int64), "input_lengths": np.array([len(ids)], np.int64),
              "scales": np.array([0.0, 1.0, 0.0], np.float32)}   # noise_scale, length_scale, noise_w
    return reference.session.run(None, inputs)[0].squeeze()


@pytest.mark.slow
@pytest.mark.parametrize("text", SENTENCES, ids=lambda t: "-".join(t.split()[:3]))
def test_phonemes_and_ids_are_piper_s(voice, reference, text):
    ours = phonemize(text, voice.config.espeak_voice)
    assert ours == reference.phonemize(text)
    assert [voice.phoneme_ids(s) for s in ours] == [reference.phonemes_to_ids(s) for s in ours]


@pytest.mark.slow
@pytest.mark.parametrize("text", SENTENCES, ids=lambda t: "-".join(t.split()[:3]))
def test_waveform_matches_onnxruntime_at_zero_noise(voice, reference, text):
    ids = reference.phonemes_to_ids(reference.phonemize(text)[0])
    ref = onnxruntime_audio(reference, ids)
    ours = voice.audio(ids, noise_scale=0.0, length_scale=1.0, noise_w=0.0)
    assert ours.shape == ref.shape
    diff = ours - ref
    snr = 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum(diff.astype(np.float64) ** 2))
    assert np.abs(diff).max() < MAX_ABS_DIFF and snr > MIN_SNR_DB, (np.abs(diff).max(), snr)


@pytest.mark.slow
def test_durations_follow_length_scale(voice, reference):
    ids = reference.phonemes_to_ids(reference.phonemize(SENTENCES[0])[0])
    _, frames = voice.net.durations(ids, length_scale=1.0, noise_w=0.0)
    _, slow = voice.net.durations(ids, length_scale=1.5, noise_w=0.0)
    assert slow.sum() > frames.sum()
    assert len(voice.audio(ids, 0.0, 1.0, 0.0)) == frames.sum() * voice.config.hop_length


@pytest.mark.slow
def test_threaded_chunks_and_tiles_join_into_the_whole_utterance(voice, reference, monkeypatch):
    from concurrent.futures import ThreadPoolExecutor
    from dasllama.core.tts import vits
    ids = reference.phonemes_to_ids(reference.phonemize(SENTENCES[1])[0])
    (m_p, _), frames = voice.net.durations(ids, noise_w=0.0)
    z_p = np.ascontiguousarray(np.repeat(m_p, frames, axis=1))
    monkeypatch.setattr(vits, "RESBLOCK_TILE", 1 << 30)
    whole = voice.net.latent_to_audio(z_p)
    monkeypatch.setattr(vits, "RESBLOCK_TILE", 1000)
    with ThreadPoolExecutor(3) as pool:
        pieces = voice.net.latent_to_audio(z_p, pool=pool, n_chunks=3)
    assert pieces.shape == whole.shape
    assert np.abs(pieces - whole).max() < 1e-5


def test_sentences_side_by_side_are_each_sentences_audio(voice_path):
    """audios() runs whole sentences on the pool's threads: each comes back in order, the
    audio of that sentence alone (the decoder's spans join within 1e-5 of one piece)."""
    voice = load_voice(voice_path, n_threads=2)
    texts = ("Hello there.", "How are you doing today, my friend?", "Fine.", "Good to hear it.")
    ids = [voice.phoneme_ids(sentence_phonemes(t, voice)[0]) for t in texts]
    alone = [voice.audio(i, noise_scale=0, noise_w=0) for i in ids]
    together = list(voice.audios(ids, noise_scale=0, noise_w=0))
    assert [a.shape for a in together] == [a.shape for a in alone]
    assert max(float(np.abs(a - b).max()) for a, b in zip(together, alone)) < 1e-5


@pytest.mark.slow
def test_synthesize_yields_a_normalised_chunk_per_sentence(voice):
    chunks = list(synthesize("Hello there. How are you?", voice, noise_scale=0, noise_w=0,
                             sentence_silence=0.25))
    assert len(chunks) == 2
    for rate, samples in chunks:
        assert rate == 22050 and samples.dtype == np.float32
        assert np.abs(samples).max() == pytest.approx(1.0)
    (_, first), (rate, second) = chunks
    assert first[:100].any() and not second[:int(0.25 * rate)].any()    # between the two, as piper


@pytest.mark.slow
def test_our_whisper_hears_our_speech(voice):
    from dasllama.core.asr.decode import transcribe
    from dasllama.core.asr.model import WhisperModel
    import soxr
    model = WhisperModel(or_skip(whisper_assets.tiny_en))
    texts = whisper_assets.TTS_SENTENCES
    for text in texts:
        rate, samples = next(synthesize(text, voice, noise_scale=0, noise_w=0))
        heard = transcribe(model, soxr.resample(samples, rate, 16000).astype(np.float32)).text
        words = lambda s: re.findall(r"[a-z0-9']+", s.lower())   # noqa: E731
        assert words(heard) == words(text)


def test_bad_voice_files_are_one_sentence(tmp_path, voice_path):
    with pytest.raises(VoiceError, match="no such voice file"):
        load_voice(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(64))
    with pytest.raises(VoiceError, match="GGUF file, not an ONNX model"):
        load_voice(junk)
    lone = tmp_path / "lone.onnx"
    lone.symlink_to(voice_path)
    with pytest.raises(VoiceError, match=re.escape(str(tmp_path / "lone.onnx.json"))):
        load_voice(lone)


@pytest.mark.slow
def test_unspeakable_text_is_one_sentence(voice):
    with pytest.raises(SynthesisError, match="no text"):
        list(synthesize("   ", voice))
    with pytest.raises(SynthesisError, match="nothing speakable"):
        list(synthesize("... — ()", voice))


def test_verify_cli_reports_parity_against_piper_tts(voice_path):
    """`dasllama verify -m VOICE.onnx` runs piper-tts on the same phoneme ids at noise 0 and
    judges the waveform by the bounds this file holds the engine to; --json says so."""
    pytest.importorskip("piper")
    result = CliRunner().invoke(cli, ["verify", "-m", str(voice_path), "-t", "2", "-p", SENTENCES[0], "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "parity" and report["reference"]["piper-tts"]
    assert report["bounds"] == verify_tts.BOUNDS
    (sentence,) = report["sentences"]
    assert sentence["durations_match"] and sentence["durations_off"] == 0
    assert sentence["max_abs_diff"] <= verify_tts.MAX_ABS_DIFF and sentence["snr_db"] >= verify_tts.MIN_SNR_DB

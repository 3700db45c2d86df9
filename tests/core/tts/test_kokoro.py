"""Kokoro-82M int8 (the real file) through speak's path: an unknown voice is one sentence
naming the voices, and our Whisper (tiny.en) hears our Kokoro speech back as the text."""
import re

import numpy as np
import pytest
from click.testing import CliRunner

from dasllama.core.tts import load_voice, synthesize
from dasllama_cli.speak import speak_cmd
from tests import whisper_assets
from tests.assets import kokoro, or_skip

SENTENCES = ("The train to the city leaves at seven in the morning.",
             "Please call me when you get home.")
MAX_WER = 0.05


@pytest.fixture(scope="module")
def model_path():
    return or_skip(kokoro)


def test_unknown_voice_is_one_sentence_listing_voices(model_path):
    result = CliRunner().invoke(speak_cmd, ["-m", str(model_path), "--voice", "af_nobody", "-o", "-", "Hi."])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "no voice 'af_nobody'" in result.output and "jf_alpha" in result.output


def test_espeak_phonemes_are_kokoro_onnxs(model_path):
    """--phonemizer espeak on a Kokoro voice gives kokoro-onnx's phonemes, sentence by sentence:
    piper's espeak route links "tea is" as "tˈiːʲ ɪz", which kokoro-onnx never feeds."""
    from dasllama.core.tts import sentence_phonemes
    tokenizer = pytest.importorskip("kokoro_onnx.tokenizer").Tokenizer()
    text = ("A cup of hot tea is the best thing on a cold and windy afternoon. "
            "He plays the piano every evening after dinner for an hour.")
    ours = sentence_phonemes(text, load_voice(model_path), "espeak")
    theirs = [tokenizer.phonemize(s, "en-us") for s in
              ("A cup of hot tea is the best thing on a cold and windy afternoon.",
               "He plays the piano every evening after dinner for an hour.")]
    assert ["".join(s) for s in ours] == theirs


@pytest.mark.parametrize("lead,tail,noise", [(0, 0, 1e-4), (3000, 40000, 2e-4), (24000, 777, 1e-4),
                                             (513, 1023, 2e-4), (9000, 9000, 5e-4)])
def test_trim_silence_cuts_where_kokoro_onnx_does(lead, tail, noise):
    """Our trim (librosa's rule) keeps the same samples as kokoro-onnx's own trim, on a tone
    between stretches of faint noise (-65 dB of the tone is cut, -57 dB kept)."""
    from dasllama.core.tts.synth import trim_silence
    reference = pytest.importorskip("kokoro_onnx.trim")
    rng = np.random.default_rng(lead + tail)
    tone = 0.5 * np.sin(np.arange(30000) * 0.07).astype(np.float32)
    audio = np.concatenate([rng.normal(0, noise, lead), tone, rng.normal(0, noise, tail)]).astype(np.float32)
    theirs, (start, end) = reference.trim(audio)
    ours = trim_silence(audio)
    assert ours.size == theirs.size and np.array_equal(ours, audio[start:end])


def _wer(ref, hyp):
    """Word error rate: word-level edit distance over the reference's length."""
    words = lambda s: re.findall(r"[a-z0-9']+", s.lower())   # noqa: E731
    r, h = words(ref), words(hyp)
    d = np.arange(len(h) + 1)
    for i, rw in enumerate(r, 1):
        prev, d[0] = d.copy(), i
        for j, hw in enumerate(h, 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (rw != hw))
    return d[len(h)] / max(len(r), 1)


@pytest.mark.slow
def test_sentences_side_by_side_are_each_sentences_audio(model_path):
    """audios() runs the first sentence on both threads and the rest one a thread: each comes
    back in order, bit for bit the audio of that sentence alone."""
    from dasllama.core.tts import sentence_phonemes
    voice = load_voice(model_path, n_threads=2)
    ids = [voice.phoneme_ids(p) for p in sentence_phonemes("Hi. " + " ".join(SENTENCES) + " Fine.", voice)]
    alone = [voice.audio(i) for i in ids]
    together = list(voice.audios(ids))
    assert len(together) == len(alone) == 4
    assert all(np.array_equal(a, b) for a, b in zip(together, alone))


@pytest.mark.slow
def test_our_whisper_hears_our_kokoro_speech(model_path):
    import soxr
    from dasllama.core.asr.decode import transcribe
    from dasllama.core.asr.model import WhisperModel
    whisper = WhisperModel(or_skip(whisper_assets.tiny_en))
    voice = load_voice(model_path)
    errors = []
    for text in SENTENCES:
        rate, samples = next(synthesize(text, voice, speaker="jf_alpha"))
        heard = transcribe(whisper, soxr.resample(samples, rate, 16000).astype(np.float32)).text
        errors.append((_wer(text, heard), heard))
    assert sum(e for e, _ in errors) / len(errors) < MAX_WER, errors

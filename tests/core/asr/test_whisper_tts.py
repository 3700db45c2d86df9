"""Whisper on speech made by the Piper voice of tests/whisper_assets: tiny.en and base give
whisper.cpp's transcript on the same weights, and it is the sentence that was spoken."""
import re

import pytest

from dasllama.formats import audio
from tests import whisper_assets
from tests.assets import or_skip
from tests.core.asr.test_whisper import assert_parity, base, tiny, tiny_dir  # noqa: F401

# Sentences whose every word comes back. Whisper writes larger numbers as digits ("twenty"
# -> "20") and picks a homophone's spelling ("pears" -> "pairs"), and tiny.en heard one
# "with you to the meeting" as "at the meeting": sentences with those were left out.
SENTENCES = whisper_assets.TTS_SENTENCES


def words(text):
    return re.findall(r"[a-z0-9']+", text.lower())


def opening(text):
    return "-".join(words(text)[:3])


@pytest.fixture(scope="module")
def spoken():
    """{sentence: (samples,) at 16 kHz}; the WAVs are 22050 Hz, resampled by audio.load."""
    return {text: audio.load(path) for text, path in or_skip(whisper_assets.tts_clips).items()}


@pytest.mark.slow
@pytest.mark.parametrize("text", SENTENCES, ids=opening)
def test_tiny_en_matches_whisper_cpp_and_hears_every_word(tiny, tiny_dir, spoken, text):
    ours, ref = assert_parity(tiny, or_skip(whisper_assets.ggml_bin, tiny_dir), spoken[text],
                              timestamps=True)
    assert ours == ref
    assert words(tiny.tokenizer.decode(ours)) == words(text)


@pytest.mark.slow
@pytest.mark.parametrize("text", SENTENCES, ids=opening)
def test_base_matches_whisper_cpp_up_to_ties_and_hears_every_word(base, spoken, text):
    bin_path = or_skip(whisper_assets.ggml_bin, or_skip(whisper_assets.base))
    ours, _ = assert_parity(base, bin_path, spoken[text], timestamps=True)
    assert words(base.tokenizer.decode(ours)) == words(text)

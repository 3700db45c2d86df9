"""Text to audio, sentence by sentence: phonemize, frame as ids, run the voice, yield.

The phonemizer is a seam: `PHONEMIZERS` maps a name to a function (text, lang) -> a list of
sentences, each a list of phonemes. "lexicon" (core/tts/g2p.py: misaki's Apache-2.0 lexicons
rewritten into espeak-ng's IPA) is the default and needs no GPL code; "espeak" gives the exact
phonemes the voice was trained on, where a package bundles espeak-ng (piper-tts for Piper
voices; kokoro-onnx's tokenizer for Kokoro's, which names it in its `phonemizers`).
"""
import unicodedata

import numpy as np
import soxr

from . import espeak, g2p

PHONEMIZERS = {"lexicon": g2p.phoneme_sentences, "espeak": espeak.phonemize}
DEFAULT_PHONEMIZER = "lexicon"


class SynthesisError(ValueError):
    """The text cannot be spoken (empty, nothing speakable, an unknown phonemizer)."""


def _is_sound(phoneme):
    """A phoneme that makes a sound: a letter (IPA's are), not punctuation or a space."""
    return unicodedata.category(phoneme[0]).startswith("L")


def sentence_phonemes(text, voice, phonemizer=None):
    """Text -> [[phoneme, ...] per sentence] the way the voice's config asks."""
    if not text or not text.strip():
        raise SynthesisError("no text to speak: pass some words.")
    if voice.config.phoneme_type == "text":
        sentences = [list(unicodedata.normalize("NFD", text))]
    elif voice.config.phoneme_type != "espeak":
        raise SynthesisError(f"{voice.path.name} wants {voice.config.phoneme_type!r} phonemes, "
                             "which this engine has no phonemizer for.")
    else:
        name = phonemizer or DEFAULT_PHONEMIZER
        if not callable(name) and name not in PHONEMIZERS:
            raise SynthesisError(f"unknown phonemizer {name!r}: choose one of "
                                 f"{', '.join(sorted(PHONEMIZERS))}.")
        try:
            own = getattr(voice, "phonemizers", {})      # a voice trained on its own route to a name
            sentences = (name if callable(name) else own.get(name, PHONEMIZERS[name]))(text, voice.config.espeak_voice)
        except g2p.LanguageNotSupported as e:
            raise SynthesisError(f"{voice.path.name}: {e}") from None
    known = voice.config.phoneme_id_map
    sentences = [s for s in sentences if any(p in known and _is_sound(p) for p in s)]
    if not sentences:
        raise SynthesisError("the text has nothing speakable in it (no letters the voice knows).")
    return sentences


def synthesize(text, voice, speed=1.0, noise_scale=None, noise_w=None, speaker=None,
               sentence_silence=None, length_scale=None, phonemizer=None, normalize=None, seed=None):
    """Yield (sample_rate, float32 samples in [-1, 1]) per sentence of `text`.

    speed: 2.0 speaks twice as fast (length_scale = the voice's / speed), unless length_scale
    is given; noise_scale, noise_w: piper's names, None for the voice's defaults; speaker: a
    name or id on multi-speaker voices; sentence_silence: seconds of silence between two
    sentences (as piper and kokoro-onnx place it: before every sentence but the first), None
    for the voice's runtime's (piper 0, kokoro-onnx 0.25 s); normalize: scale each sentence to
    full range, None for what the voice's runtime does (piper does, kokoro-onnx does not).
    A voice with `trims_silence` (Kokoro: its output opens with up to ~1 s of silence) has each
    sentence trimmed by trim_silence, as kokoro-onnx trims each batch it speaks."""
    if speed <= 0:
        raise SynthesisError(f"speed must be positive, not {speed}.")
    if length_scale is None:
        length_scale = voice.config.length_scale / speed
    if sentence_silence is None:
        sentence_silence = getattr(voice, "sentence_silence", 0.0)
    if normalize is None:
        normalize = getattr(voice, "normalizes", True)
    rate = voice.sample_rate
    silence = np.zeros(int(rate * sentence_silence), np.float32)
    # a generator: a sentence is phonemised when its turn comes, so the first audio waits for
    # its own sentence's front end only, not the whole text's
    ids = (voice.phoneme_ids(phonemes) for phonemes in sentence_phonemes(text, voice, phonemizer))
    scales = (noise_scale, length_scale, noise_w, speaker, seed)
    many = getattr(voice, "audios", None)      # a voice that runs whole sentences side by side
    audios = many(ids, *scales) if many else (voice.audio(i, *scales) for i in ids)
    for i, audio in enumerate(audios):
        if getattr(voice, "trims_silence", False):
            audio = trim_silence(audio)
        if normalize:
            peak = float(np.abs(audio).max())
            audio = audio / peak if peak > 1e-8 else np.zeros_like(audio)
        audio = np.clip(audio, -1.0, 1.0).astype(np.float32)
        yield rate, np.concatenate([silence, audio]) if i and silence.size else audio


def trim_silence(samples, top_db=60.0, frame=2048, hop=512):
    """The samples from the first to the last frame whose RMS is within top_db of the loudest
    frame's: librosa.effects.trim's rule (frames centred on multiples of hop, zero-padded),
    which kokoro-onnx applies to every batch it speaks."""
    x = np.pad(np.asarray(samples, np.float64), frame // 2)
    if x.size < frame:
        return samples
    power = np.square(np.lib.stride_tricks.sliding_window_view(x, frame)[::hop]).mean(axis=1)
    db = 10 * np.log10(np.maximum(power, 1e-10)) - 10 * np.log10(max(power.max(), 1e-10))
    loud = np.flatnonzero(db > -top_db)
    return samples[hop * loud[0]:min(len(samples), hop * (loud[-1] + 1))]


def resampled(chunks, rate):
    """(sample rate, samples) chunks -> the same audio at `rate`, through one soxr stream so
    the filter's state carries across sentences (no clicks at the joins); the stream's delay
    shifts a few samples from each chunk to the next and the last chunk flushes the rest."""
    stream = None
    for rate_in, samples in chunks:
        if rate_in == rate:
            yield rate, samples
            continue
        stream = stream or soxr.ResampleStream(rate_in, rate, 1, dtype="float32", quality="HQ")
        out = stream.resample_chunk(samples)
        if out.size:
            yield rate, out
    if stream is not None:
        tail = stream.resample_chunk(np.zeros(0, np.float32), last=True)
        if tail.size:
            yield rate, tail


def to_int16(samples):
    """float32 in [-1, 1] -> int16 PCM, scaled and clipped as piper does (x 32767)."""
    return np.clip(samples * 32767.0, -32767.0, 32767.0).astype(np.int16)

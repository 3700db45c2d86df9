"""Our Piper VITS against piper-tts (onnxruntime on the same .onnx), in this process, on the
same phoneme ids with the noise scales at 0 (both networks are then deterministic).

Per sentence: the phonemes (ours through espeak-ng against piper's), the integer durations
(samples per phoneme id: ours from the duration predictor, theirs from the graph's Ceil
tensor, which piper-tts exposes by patching the model in memory) identical, and the waveform
within MAX_ABS_DIFF and MIN_SNR_DB of onnxruntime's.
"""
from dataclasses import asdict, dataclass

import numpy as np

from ..tts import phonemize

MAX_ABS_DIFF = 2e-4        # measured <= 7.4e-5 on joe-medium (float32 through ~60 layers)
MIN_SNR_DB = 70.0          # measured >= 87 dB
VERDICTS = ("parity", "waveform-differs", "durations-differ", "phonemes-differ")
WORST_FIRST = VERDICTS[:0:-1]
FAILING = ("waveform-differs", "durations-differ", "phonemes-differ")
BOUNDS = {"max_abs_diff": MAX_ABS_DIFF, "min_snr_db": MIN_SNR_DB}
REFERENCE = "piper-tts"


class ReferenceUnavailable(RuntimeError):
    """piper-tts (the reference runtime) is not installed."""


@dataclass
class SentenceResult:
    text: str
    verdict: str
    n_ids: int
    phonemes_match: bool
    durations_match: bool
    n_samples: int
    ref_samples: int
    max_abs_diff: float
    snr_db: float
    durations_off: int = 0         # phoneme ids whose duration differs
    max_duration_off: int = 0      # by up to this many frames
    mel_db: float = None           # mean |log-mel difference| (dB), where the mel is compared

    def to_dict(self):
        return asdict(self)


def load_reference(voice):
    """piper-tts's voice on voice's .onnx with its duration tensor exposed (include_alignments)."""
    try:
        import onnx  # noqa: F401  (piper-tts patches the model in memory with it)
        from piper import PiperVoice
    except ImportError as e:
        raise ReferenceUnavailable(f"verify needs the reference runtime ({e.name} is missing): "
                                   "pip install piper-tts==1.8.0 onnx.") from None
    return PiperVoice.load(voice.path, include_alignments=True)


def reference_version():
    from importlib.metadata import version
    return {"piper-tts": version("piper-tts"), "onnxruntime": version("onnxruntime")}


def snr_db(ref, ours):
    noise = np.sum((ours.astype(np.float64) - ref) ** 2)
    return float("inf") if noise == 0 else float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / noise))


def duration_gap(frames, ref_frames):
    """(ids whose frame count differs, the largest difference); all ids when the counts of ids
    differ."""
    frames, ref_frames = np.asarray(frames).reshape(-1), np.asarray(ref_frames).reshape(-1)
    if frames.shape != ref_frames.shape:
        return max(len(frames), len(ref_frames)), 0
    off = np.abs(frames.astype(np.int64) - ref_frames)
    return int(np.count_nonzero(off)), int(off.max(initial=0))


def judge(phonemes_match, durations_match, waveform_within):
    """The verdict of one sentence: the first of phonemes, durations, waveform that differs."""
    if not phonemes_match:
        return "phonemes-differ"
    if not durations_match:
        return "durations-differ"
    return "parity" if waveform_within else "waveform-differs"


def compare_waveforms(ours, ref_audio):
    """(max |diff|, SNR dB) of two waveforms; (inf, -inf) when their lengths differ."""
    if ours.shape != ref_audio.shape:
        return float("inf"), float("-inf")
    return float(np.abs(ours - ref_audio).max()), snr_db(ref_audio, ours)


def verify_sentence(voice, ref, text, phonemes, ref_phonemes, speaker=None):
    """One sentence's comparison; `phonemes` ours, `ref_phonemes` piper-tts's for it."""
    from piper import SynthesisConfig
    ids = ref.phonemes_to_ids(ref_phonemes)
    sid = voice.speaker_id(speaker)
    quiet = SynthesisConfig(speaker_id=sid if voice.config.num_speakers > 1 else None,
                            noise_scale=0.0, length_scale=1.0, noise_w_scale=0.0)
    got = ref.phoneme_ids_to_audio(ids, quiet, include_alignments=True)
    ref_audio, ref_id_samples = got if isinstance(got, tuple) else (got, None)
    ref_audio = np.asarray(ref_audio, np.float32).squeeze()
    _, frames = voice.net.durations(ids, 1.0, 0.0, sid)
    ours = voice.audio(ids, 0.0, 1.0, 0.0, speaker)
    hop = voice.config.hop_length
    off, max_off = (duration_gap(frames, np.asarray(ref_id_samples) // hop)
                    if ref_id_samples is not None else (len(ids), 0))
    durations_match = ref_id_samples is not None and np.array_equal(
        frames * hop, np.asarray(ref_id_samples).reshape(-1))
    diff, snr = compare_waveforms(ours, ref_audio)
    verdict = judge(phonemes == ref_phonemes, durations_match and ours.shape == ref_audio.shape,
                    diff <= MAX_ABS_DIFF and snr >= MIN_SNR_DB)
    return SentenceResult(text, verdict, len(ids), phonemes == ref_phonemes, bool(durations_match),
                          len(ours), len(ref_audio), diff, snr, off, max_off)


def verify_texts(voice, ref, texts, speaker=None):
    """[SentenceResult] for every sentence of every text (espeak-ng splits them, both sides)."""
    results = []
    for text in texts:
        ours, theirs = phonemize(text, voice.config.espeak_voice), ref.phonemize(text)
        for i, ref_phonemes in enumerate(theirs):
            mine = ours[i] if i < len(ours) else []
            label = text if len(theirs) == 1 else f"{text} [{i + 1}/{len(theirs)}]"
            results.append(verify_sentence(voice, ref, label, mine, ref_phonemes, speaker))
    return results

"""Our Kokoro (the graph interpreter on kokoro-onnx's int8 .onnx) against kokoro-onnx
(onnxruntime on the same file and voice pack), in this process, on the same phoneme ids and
style row.

Per sentence, as verify_tts does for Piper: the phonemes (our espeak route's ids, which for
Kokoro is kokoro-onnx's tokenizer run per sentence, against its tokenizer on the whole text), the integer durations (frames per phoneme id: ours traced from the
graph's Round > Clip > Cast chain, theirs the same tensor, exposed as the "duration" output
kokoro-onnx reads by patching the model in memory) identical, and then the output's log-mel
within MAX_MEL_DB of onnxruntime's. The graph draws no random numbers, but the waveform is
not the thing to bound: both runs requantise every activation to int8, so a float bit apart
upstream moves values across quantisation steps, and the harmonic source integrates F0 into a
phase (a CumSum over every sample), where a small F0 difference grows into a phase offset.
Measured with identical durations: SNR 0.3-7 dB, log-mels 3.0-3.6 dB apart; so max |diff|
and SNR are reported, not judged.
"""
import numpy as np

from ..tts import sentence_phonemes
from .verify_tts import (ReferenceUnavailable, SentenceResult, compare_waveforms, duration_gap,
                         judge)

MAX_MEL_DB = 5.0           # mean |log-mel difference| (dB): ours 3.0-3.6 where the durations agree,
                           # another voice of the pack 8.7-12.9
BOUNDS = {"max_mel_db": MAX_MEL_DB}
REFERENCE = "kokoro-onnx"
DURATION_OUTPUT = "duration"   # the output name kokoro-onnx 0.6.1 reads its timings from


def load_reference(voice):
    """kokoro-onnx on voice's .onnx and voice pack, the duration tensor added as an output,
    onnxruntime held to voice's threads."""
    try:
        import onnx
        import onnxruntime
        from kokoro_onnx import Kokoro
    except ImportError as e:
        raise ReferenceUnavailable(f"verify needs the reference runtime ({e.name} is missing): "
                                   "pip install kokoro-onnx==0.6.1 onnx.") from None
    proto = onnx.load(str(voice.path))
    proto.graph.node.append(onnx.helper.make_node("Identity", [voice.duration_value], [DURATION_OUTPUT]))
    proto.graph.output.append(onnx.ValueInfoProto(name=DURATION_OUTPUT))
    options = onnxruntime.SessionOptions()
    if voice.n_threads:
        options.intra_op_num_threads = voice.n_threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    session._model_path = str(voice.path)    # a session made from bytes has none; kokoro-onnx checks it
    return Kokoro.from_session(session, str(voice.voices_path))


def reference_version():
    from importlib.metadata import version
    return {"kokoro-onnx": version("kokoro-onnx"), "onnxruntime": version("onnxruntime")}


def verify_sentence(voice, ref, text, speaker):
    """One sentence's comparison, both engines on kokoro-onnx's phoneme ids for `text`."""
    speaker = speaker or voice.voice_names()[0]
    tokens = ref.tokenizer.tokenize(ref.tokenizer.phonemize(text, voice.config.espeak_voice))
    ours = [p for sentence in sentence_phonemes(text, voice, "espeak") for p in sentence]
    phonemes_match = voice.phoneme_ids(ours) == [0, *tokens, 0]
    style = ref._style_for(ref.get_voice_style(speaker), len(tokens))
    ref_audio, ref_frames = ref._infer(tokens, style, 1.0)   # kokoro-onnx's own feeds, framing the ids
    frames, audio = voice.durations_and_audio([0, *tokens, 0], 1.0, speaker)
    ref_audio = np.asarray(ref_audio, np.float32)
    off, max_off = duration_gap(frames, ref_frames)
    diff, snr = compare_waveforms(audio, ref_audio)
    mel = mel_distance_db(audio, ref_audio, voice.sample_rate)
    verdict = judge(phonemes_match, off == 0 and audio.shape == ref_audio.shape, mel <= MAX_MEL_DB)
    return SentenceResult(text, verdict, len(tokens) + 2, phonemes_match, off == 0, len(audio),
                          len(ref_audio), diff, snr, off, max_off, mel)


def verify_texts(voice, ref, texts, speaker=None):
    """[SentenceResult], one per text (kokoro-onnx speaks a text as one utterance)."""
    return [verify_sentence(voice, ref, text, speaker) for text in texts]


N_FFT, HOP, N_MELS = 1024, 256, 80


def log_mel_db(samples, sample_rate):
    """(n_mels, n_frames) log-mel power in dB of a waveform, floored 80 dB under its peak."""
    from ..asr.mel import mel_filters
    samples = np.asarray(samples, np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(samples, N_FFT)[::HOP]    # (n_frames, N_FFT)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)
    power = np.abs(np.fft.rfft(frames * window, axis=-1)) ** 2
    mel = 10 * np.log10(np.maximum(power @ mel_filters(N_MELS, sample_rate, N_FFT).T.astype(np.float64), 1e-10))
    return np.maximum(mel, mel.max() - 80.0).T


def mel_distance_db(ours, ref, sample_rate):
    """Mean |difference| in dB between two waveforms' log-mels (the shorter's frames)."""
    a, b = log_mel_db(ours, sample_rate), log_mel_db(ref, sample_rate)
    n = min(a.shape[1], b.shape[1])
    return float(np.abs(a[:, :n] - b[:, :n]).mean())

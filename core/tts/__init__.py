"""Speech out: Piper VITS voices run on the engine's own ops.

    from dasllama.core.tts import load_voice, synthesize
    voice = load_voice("en_US-joe-medium.onnx")
    for rate, samples in synthesize("Hello there.", voice):
        ...
"""
from .espeak import PhonemizerUnavailable, phonemize
from .piper import PiperVoice, VoiceConfig, VoiceError, load_voice
from .synth import PHONEMIZERS, SynthesisError, resampled, sentence_phonemes, synthesize, to_int16
from .vits import VitsError

__all__ = ["load_voice", "synthesize", "resampled", "sentence_phonemes", "to_int16", "phonemize",
           "PHONEMIZERS", "PiperVoice", "VoiceConfig", "VoiceError", "VitsError", "SynthesisError", "PhonemizerUnavailable"]

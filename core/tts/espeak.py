"""espeak-ng phonemes, as Piper voices were trained on them: through the `espeakbridge`
extension and data that the piper-tts package bundles (espeak-ng is GPL-3, so it is found at
run time, never shipped). The clause handling follows piper's phonemize_espeak.py: language
switch marks dropped, the clause's punctuation kept as a phoneme, sentences split where
espeak ends one, every phoneme decomposed to NFD code points.

Kokoro voices were trained on another route to espeak-ng: kokoro-onnx's tokenizer
(phonemizer-fork's espeak backend on espeakng-loader's library, its own text normalisation).
It differs from piper's where a word's last vowel meets the next word's first (piper's bridge
keeps espeak's linking "ʲ", as in "tˈiːʲ ɪz") and at sentence joins, on 7 of the bench's 20
sentences; phonemize_kokoro runs that tokenizer itself, sentence by sentence."""
import importlib.machinery
import importlib.util
import re
import threading
import unicodedata
from pathlib import Path


class PhonemizerUnavailable(RuntimeError):
    """No espeak-ng bridge could be loaded."""


_LANG_SWITCH = re.compile(r"\([^)]+\)")
_lock = threading.Lock()
_bridge = []


def _load_bridge():
    """piper's espeakbridge module, loaded from its file so piper itself (and onnxruntime,
    which its __init__ imports) is not."""
    if _bridge:
        return _bridge[0]
    spec = importlib.util.find_spec("piper")
    where = Path(spec.submodule_search_locations[0]) if spec and spec.submodule_search_locations else None
    found = sorted(where.glob("espeakbridge*.so")) + sorted(where.glob("espeakbridge*.pyd")) if where else []
    if not found or not (where / "espeak-ng-data").is_dir():
        raise PhonemizerUnavailable(
            "no espeak-ng phonemizer: pip install piper-tts (it bundles espeak-ng and its data).")
    loader = importlib.machinery.ExtensionFileLoader("espeakbridge", str(found[0]))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("espeakbridge", loader))
    loader.exec_module(module)
    module.initialize(str(where / "espeak-ng-data"))
    _bridge.append(module)
    return module


def phonemize(text, lang):
    """Text -> one list of phonemes (single code points, punctuation and spaces included) per
    sentence, in espeak voice `lang` ("en-us")."""
    with _lock:
        bridge = _load_bridge()
        bridge.set_voice(lang)
        clauses = bridge.get_phonemes(text)
    sentences, current = [], []
    for phonemes, terminator, end_of_sentence in clauses:
        phonemes = _LANG_SWITCH.sub("", phonemes) + terminator
        if terminator in (",", ":", ";"):
            phonemes += " "
        current.extend(unicodedata.normalize("NFD", phonemes))
        if end_of_sentence:
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return [s for s in sentences if s]


_kokoro = []


def _kokoro_tokenizer():
    if not _kokoro:
        try:
            from kokoro_onnx.tokenizer import Tokenizer
        except ImportError:
            raise PhonemizerUnavailable(
                "no espeak-ng phonemizer for Kokoro voices: pip install kokoro-onnx (its tokenizer, "
                "phonemizer-fork and espeakng-loader give the phonemes Kokoro was trained on).") from None
        _kokoro.append(Tokenizer())
    return _kokoro[0]


def phonemize_kokoro(text, lang):
    """Text -> one list of phonemes per sentence (core.tts.text.sentences), each sentence
    phonemized as kokoro-onnx phonemizes a text it is given."""
    from .text import sentences
    tokenizer = _kokoro_tokenizer()
    with _lock:
        found = [tokenizer.phonemize(s, lang) for s in sentences(text)]
    return [list(p) for p in found if p]

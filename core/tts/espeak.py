"""espeak-ng phonemes, as Piper voices were trained on them: through the `espeakbridge`
extension and data that the piper-tts package bundles (espeak-ng is GPL-3, so it is found at
run time, never shipped). The clause handling follows piper's phonemize_espeak.py: language
switch marks dropped, the clause's punctuation kept as a phoneme, sentences split where
espeak ends one, every phoneme decomposed to NFD code points."""
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

"""English grapheme-to-phoneme conversion with no GPL dependency: misaki's US lexicons
(Apache-2.0, a pip dependency) rewritten into the espeak-ng `en-us` IPA that Piper voices were
trained on, so `phonemize()` output maps through a voice's phoneme_id_map as espeak's does.

Words the lexicon lacks are built from a lexicon stem and a suffix rule ("-s", "-ed", "-ing",
"-ly", ...), then from two lexicon words ("sunroof"), and are spelled out letter by letter
only when neither works."""
import functools
import json
import re
from importlib import resources

from .text import normalize, sentences

# misaki writes diphthongs and affricates as one letter; espeak writes them as two.
_SYMBOLS = {"A": "eɪ", "I": "aɪ", "O": "oʊ", "W": "aʊ", "Y": "ɔɪ", "Q": "əʊ", "ʤ": "dʒ",
            "ʧ": "tʃ", "ᵊ": "ə"}
_STRESS = "ˈˌ"
_VOWELS = set("aeiouæɑɐɒɔəɚɛɜɪʊʌᵻAIOQWY")
_LETTERS = {  # letter names, for spelling out what cannot be read
    "a": "ˈeɪ", "b": "bˈiː", "c": "sˈiː", "d": "dˈiː", "e": "ˈiː", "f": "ˈɛf", "g": "dʒˈiː",
    "h": "ˈeɪtʃ", "i": "ˈaɪ", "j": "dʒˈeɪ", "k": "kˈeɪ", "l": "ˈɛl", "m": "ˈɛm", "n": "ˈɛn",
    "o": "ˈoʊ", "p": "pˈiː", "q": "kjˈuː", "r": "ˈɑːɹ", "s": "ˈɛs", "t": "tˈiː", "u": "jˈuː",
    "v": "vˈiː", "w": "dˈʌbəljuː", "x": "ˈɛks", "y": "wˈaɪ", "z": "zˈiː",
}
# Punctuation a voice pauses at, kept as piper's espeak phonemizer keeps it: a clause mark is
# followed by a space, a sentence mark is not.
_CLAUSE_MARKS = ",:;"
_SENTENCE_MARKS = ".!?"
_TOKEN = re.compile(r"[A-Za-z\u00C0-\u024F]+(?:'[A-Za-z]+)*|[.!?]+|[,:;]")


@functools.cache
def lexicon():
    """word -> misaki phonemes, gold entries over silver ones; a heteronym keeps its default
    reading. Loaded once (~0.5 s, 180k words)."""
    data = resources.files("misaki") / "data"
    words = {}
    for name in ("us_silver.json", "us_gold.json"):
        for word, entry in json.loads((data / name).read_text(encoding="utf-8")).items():
            if isinstance(entry, dict):
                entry = entry.get("DEFAULT") or next((v for v in entry.values() if v), None)
            if entry:
                words[word] = entry
    return words


def to_espeak(phonemes):
    """misaki US phonemes -> espeak-ng en-us IPA, symbol by symbol with the context rules
    espeak's inventory needs (long vowels, r-coloured vowels, reduced vowels)."""
    ps = phonemes
    ps = re.sub(r"ɜɹ(?![" + "".join(_VOWELS) + "])", "ɜː", ps)
    ps = re.sub(r"ɜɹ", "ɜːɹ", ps)
    ps = re.sub(r"(?<![ˈˌ])əɹ(?![" + "".join(_VOWELS) + "])", "ɚ", ps)
    ps = ps.replace("ɑɹ", "ɑːɹ").replace("ɔɹ", "ɔːɹ")
    ps = re.sub(r"ɑ(?!ː)", "ɑː", ps)
    ps = re.sub(r"ɔ(?![ːɹɪ])", "ɔː", ps)
    ps = re.sub(r"(?<=[ˈˌ])i", "iː", ps)
    ps = re.sub(r"(?<=[ˈˌ])u|u(?=$)", "uː", ps)
    ps = re.sub(r"(?<![ˈˌ])u(?!ː)", "uː", ps)
    ps = re.sub(r"ɜ(?!ː)", "ɜː", ps)
    return "".join(_SYMBOLS.get(ch, ch) for ch in ps)


def _stem_and_suffix(word, words):
    """misaki phonemes of an unlisted inflection or derivation, from a listed stem."""
    rules = (("'s", ("",), "z"), ("s", ("", "e"), "z"), ("es", ("", "e"), "ᵻz"),
             ("ies", ("y",), "iz"), ("ed", ("", "e"), "d"), ("ied", ("y",), "id"),
             ("ing", ("", "e"), "ɪŋ"), ("ly", ("", "le"), "li"), ("er", ("", "e"), "əɹ"),
             ("est", ("", "e"), "ᵻst"), ("ness", ("",), "nəs"), ("ment", ("",), "mənt"),
             ("able", ("", "e"), "əbəl"), ("less", ("",), "ləs"), ("ful", ("",), "fəl"))
    for suffix, endings, ps in rules:
        if not word.endswith(suffix) or len(word) - len(suffix) < 2:
            continue
        root = word[: -len(suffix)]
        candidates = [root + e for e in endings]
        if len(root) > 2 and root[-1] == root[-2]:  # "stopped", "running"
            candidates.append(root[:-1])
        for stem in candidates:
            if stem in words:
                base = words[stem]
                if suffix in ("s", "'s"):
                    ps = "s" if base[-1] in "ptkfθ" else "ᵻz" if base[-1] in "szʃʒʧʤ" else "z"
                elif suffix == "ed":
                    ps = "t" if base[-1] in "pkfθsʃʧ" else "ᵻd" if base[-1] in "td" else "d"
                return base + ps
    return None


def _compound(word, words):
    """misaki phonemes of a word made of two listed words, the first keeping the stress."""
    for cut in range(len(word) - 3, 2, -1):
        head, tail = word[:cut], word[cut:]
        if head in words and tail in words:
            return words[head] + words[tail].replace("ˈ", "ˌ")
    return None


def _spell(word):
    return " ".join(_LETTERS[ch] for ch in word.lower() if ch in _LETTERS)


def word_phonemes(word):
    """espeak-style IPA of one word (letters and apostrophes)."""
    words = lexicon()
    for form in (word, word.lower(), word.capitalize()):
        if form in words:
            return to_espeak(words[form])
    lower = word.lower()
    found = _stem_and_suffix(lower, words) or _compound(lower, words)
    if found:
        return to_espeak(found)
    return _spell(word)


def phonemize_sentence(sentence):
    """IPA of one normalised sentence: words separated by spaces, punctuation kept."""
    out = ""
    for token in _TOKEN.findall(sentence):
        if token[0] in _CLAUSE_MARKS:
            out = out.rstrip(" ") + token + " "
        elif token[0] in _SENTENCE_MARKS:
            out = out.rstrip(" ") + token
        else:
            out += word_phonemes(token) + " "
    return out.rstrip(" ")


def phonemize(text, lang="en-us"):
    """espeak-ng style IPA of `text` (sentences split and normalised here), as piper's espeak
    phonemizer joins it: sentence marks end a sentence with no space after them."""
    if not lang.lower().startswith("en"):
        raise ValueError(f"the lexicon G2P speaks English only, not {lang!r}; "
                         "use the espeak phonemizer for other languages")
    return "".join(phonemize_sentence(normalize(s, lang)) for s in sentences(text))

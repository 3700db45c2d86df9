"""English grapheme-to-phoneme conversion with no GPL dependency: misaki's US lexicons
(Apache-2.0, a pip dependency) rewritten into the espeak-ng `en-us` IPA that Piper voices were
trained on, so `phonemize()` output maps through a voice's phoneme_id_map as espeak's does.

Words the lexicon lacks are built from a lexicon stem and a suffix rule ("-s", "-ed", "-ing",
"-ly", ...), then from two lexicon words ("sunroof"), then read by letter-to-sound rules;
acronyms ("NBA") and words with no vowel letter are spelled out."""
import functools
import json
import re
import unicodedata
from importlib import resources

from .text import normalize, sentences

# misaki writes diphthongs and affricates as one letter; espeak writes them as two.
_SYMBOLS = {"A": "eɪ", "I": "aɪ", "O": "oʊ", "W": "aʊ", "Y": "ɔɪ", "ʤ": "dʒ",
            "ʧ": "tʃ", "ᵊ": "ə"}
_STRESS = "ˈˌ"
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
_TOKEN = re.compile(r"[A-Za-z\u00C0-\u024F]+(?:['-][A-Za-z\u00C0-\u024F]+)*|[.!?]+|[,:;]")


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


_MISAKI_VOWELS = "AIOQWYaiuæɑɒɔəɛɜɪʊʌᵻᵊ"
_NUCLEUS = re.compile(f"[{_MISAKI_VOWELS}]")
_SPELLED_VOWELS = re.compile(r"[aeiou]+|(?<=[^aeiou])y")


def _respell_reduced_vowels(word, ps):
    """espeak reduces a vowel spelled 'i' or 'e' to ɪ (ᵻ in a be-/de-/re- prefix) where
    misaki writes ə for every reduced vowel ("family", "market", "before"). The n-th vowel of
    the spelling is taken to be the n-th nucleus of the phonemes, so only words whose counts
    agree are respelled."""
    spelling = re.sub(r"(?<=[^aeiou])e(s|d)?$", "", word.lower()) if len(word) > 3 else word
    groups = _SPELLED_VOWELS.findall(spelling)
    nuclei = list(_NUCLEUS.finditer(ps))
    if len(groups) != len(nuclei):
        return ps
    out = list(ps)
    for i, (group, m) in enumerate(zip(groups, nuclei)):
        if ps[m.start()] not in "əᵊi" or (m.start() and ps[m.start() - 1] in _STRESS):
            continue
        after = ps[m.end():m.end() + 1]
        if i == 0 and len(nuclei) > 1 and re.match(r"(be|de|re)", word.lower()) and group == "e":
            out[m.start()] = "ɪ" if after in ("k", "z", "v") else "ᵻ"
        elif ps[m.start()] == "i":
            continue
        elif i == 0 and group == "e" and m.start() == 0:
            out[m.start()] = "ɛ" if word.lower().startswith("en") else "ᵻ"  # "estate"
        elif group == "a" and ps[m.end():].find("ˈ") >= 0 and \
                not _NUCLEUS.search(ps[m.end():m.end() + ps[m.end():].find("ˈ")]):
            out[m.start()] = "ɐ"  # "about", "traditional": 'a' just before the stress
        elif group == "i" and after == "ɾ":
            out[m.start()] = "ᵻ"
        elif (group == "i" and not (after == "l" and i == len(groups) - 1)) or \
                (group == "e" and after not in "nmlɹ"):
            out[m.start()] = "ɪ"
    return "".join(out)


def _drop_adjacent_secondary(ps):
    """espeak keeps a secondary stress only two or more syllables from the primary one
    ("ˈɛnɪθˌɪŋ" but "sˈʌmθɪŋ", "ʌntˈɪl")."""
    nuclei = [m.start() for m in _NUCLEUS.finditer(ps)]
    primary = [i for i, pos in enumerate(nuclei) if pos and ps[pos - 1] == "ˈ"]
    if not primary:
        return ps
    drop = {nuclei[i] - 1 for i, pos in enumerate(nuclei)
            if pos and ps[pos - 1] == "ˌ" and any(abs(i - j) == 1 for j in primary)}
    return "".join(ch for k, ch in enumerate(ps) if k not in drop)


_V = f"[{_MISAKI_VOWELS}]"
_C = f"[^ˈˌ{_MISAKI_VOWELS}]"
# misaki -> espeak rewrites, in order; each is a regularity of espeak's en-us output.
_RULES = tuple((re.compile(pattern), repl) for pattern, repl in (
    (r"ᵻst$", "ɪst"),                            # "latest"
    (rf"(?<={_V})tᵻd$", "ɾᵻd"),                  # "treated": flapped before -ed
    (r"(?<=ə)ɾɪv$", "tˌɪv"),                     # "negative"
    (rf"(?<![ˈˌ])i(?={_C}+ˈ)", "ɪ"),             # "prevent"
    (rf"ɜɹ(?=[ˈˌ]?{_V})", "ɜːɹ"),                # "hurry"
    (r"ɜɹ", "ɜː"),                               # "bird": espeak's NURSE has no r
    (rf"(?<=[vf])əɹ(?={_V})", "ɹ"),              # "every", "different"
    (rf"(?<![ˈˌ])əɹ(?=[ˈˌ]?{_V})", "ɚɹ"),        # "general", "around"
    (r"(?<![ˈˌ])əɹ", "ɚ"),                       # "butter"
    (rf"ʊɹ(?={_V})", "ʊɹɹ"),                     # "during"
    (r"ɑɹ", "ɑːɹ"), (r"ɔɹ", "ɔːɹ"), (r"wˈɑn", "wˈɔn"),  # "car", "north", "want"
    (r"ɑ(?!ː)", "ɑː"),                           # "lot"
    (r"ɔ(?![ːɹɪŋnfsθ])", "ɔː"),                  # "thought", but "long", "off", "lost"
    (r"n(?=[kɡ])", "ŋ"),                         # "include"
    (rf"(?<![ˈˌ])i(?={_C}+ˌ)", "ɪ"),             # "anything"
))
_VOWEL_RULES = tuple((re.compile(pattern), repl) for pattern, repl in (
    (r"(?<=[ˈˌ])i(?![əː])", "iː"),              # "see", but "really" keeps iə
    (rf"iː(?={_V})", "iːʲ"),                     # "being": espeak's glide
    (rf"(?<![ˈˌ])i(?=[ˈˌ]?{_V})", "ɪʲ"),         # "video", "reality"
    (r"(?<=[ʃʒʤʧ])əwə", "uə"),                   # "actually", "usually"
    (r"ʔn$", "ʔn̩"),                             # "certain", "button": syllabic n
    (r"u(?!ː)", "uː"),
    (r"ɜ(?!ː)", "ɜː"),
))


def to_espeak(phonemes, word=""):
    """misaki US phonemes -> espeak-ng en-us IPA: the rules above, then symbol by symbol.
    `word`, the spelling, lets reduced vowels follow it."""
    ps = _drop_adjacent_secondary(phonemes)
    if word:
        ps = _respell_reduced_vowels(word, ps)
        if word.lower().startswith("ex"):
            ps = re.sub(r"^([ˈˌ]?)ɪ(?=[kɡ])", r"\1ɛ", ps)
        if re.search(r"arr|ar[iay]", word.lower()):
            ps = re.sub(rf"ˈɛɹ(?={_V})", "ˈæɹ", ps, count=1)  # "carry"
    for pattern, repl in _RULES:
        ps = pattern.sub(repl, ps)
    if len(_NUCLEUS.findall(ps)) == 1:
        ps = re.sub(r"i(?!ː)", "iː", ps)  # "be", "these": a lone syllable's i is long
    for pattern, repl in _VOWEL_RULES:
        ps = pattern.sub(repl, ps)
    return "".join(_SYMBOLS.get(ch, ch) for ch in ps)


def _stem_and_suffix(word, words):
    """misaki phonemes of an unlisted inflection or derivation, from a listed stem."""
    rules = (("ies", ("y",), "z"), ("ied", ("y",), "d"), ("'s", ("",), "z"),
             ("s", ("", "e"), "z"), ("es", ("", "e"), "ᵻz"), ("ed", ("", "e"), "d"),
             ("ing", ("", "e"), "ɪŋ"), ("ly", ("", "le"), "li"), ("er", ("", "e"), "əɹ"),
             ("est", ("", "e"), "ᵻst"), ("ness", ("",), "nəs"), ("ment", ("",), "mənt"),
             ("able", ("", "e"), "əbəl"), ("less", ("",), "ləs"), ("ful", ("",), "fəl"))
    for suffix, endings, ps in rules:
        if not word.endswith(suffix) or len(word) - len(suffix) < 3 or word.endswith("ss"):
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
    """Letter names run together, as espeak spells: the last letter has the stress."""
    names = [_LETTERS[ch] for ch in word.lower() if ch in _LETTERS]
    return "".join(n.replace("ˈ", "ˌ") for n in names[:-1]) + (names[-1] if names else "")


# Letter-to-sound rules for words the lexicon cannot build (names, coinages), in misaki's
# symbols so `to_espeak` finishes them. Longest spelling first; a vowel is long before a
# consonant and a final silent e ("luke"), short otherwise; the first vowel takes the stress
# and later short vowels reduce to ə.
_GRAPHEMES = {
    "tch": "ʧ", "sch": "sk", "igh": "I", "ough": "O", "augh": "ɔ", "ch": "ʧ", "sh": "ʃ",
    "th": "θ", "ph": "f", "wh": "w", "ck": "k", "ng": "ŋ", "qu": "kw", "gh": "", "dg": "ʤ",
    "x": "ks", "j": "ʤ", "r": "ɹ", "y": "j", "ee": "i", "ea": "i", "oo": "u", "ou": "W",
    "ow": "W", "oi": "Y", "oy": "Y", "ai": "A", "ay": "A", "au": "ɔ", "aw": "ɔ", "ei": "A",
    "ey": "A", "oa": "O", "ew": "u", "ue": "u", "ie": "i", "ar": "ɑɹ", "or": "ɔɹ", "er": "ɜɹ",
    "ir": "ɜɹ", "ur": "ɜɹ",
}
_SHORT = {"a": "æ", "e": "ɛ", "i": "ɪ", "o": "ɑ", "u": "ʌ", "y": "ɪ"}
_LONG = {"a": "A", "e": "i", "i": "I", "o": "O", "u": "u", "y": "I"}
_REDUCED = {"æ": "ə", "ɛ": "ə", "ɑ": "ə", "ʌ": "ə", "ɜ": "ə"}


def _letters_to_sounds(word):
    """misaki phonemes for a word by spelling rules alone, stress on the first vowel."""
    w = word.lower()
    w = w[:-1] if len(w) > 3 and w.endswith("e") and re.search("[aeiouy]", w[:-1]) else w
    ps, i, n_vowels = [], 0, 0
    while i < len(w):
        ch = w[i]
        if i + 1 < len(w) and w[i + 1] == ch and ch not in "aeiou":
            i += 1  # a doubled consonant sounds once
            continue
        for size in (4, 3, 2):
            chunk = w[i:i + size]
            r_before_vowel = chunk[-1:] == "r" and w[i + size:i + size + 1] in tuple("aeiouyr")
            if len(chunk) == size and chunk in _GRAPHEMES and not (chunk == "ey" and i) \
                    and not (size == 2 and r_before_vowel):
                sound, i = _GRAPHEMES[chunk], i + size
                break
        else:
            nxt = w[i + 1:i + 2]
            if ch in "aeiou" or (ch == "y" and i):
                long = (i + 2 == len(w) and len(w) < len(word)) or \
                    (i + 2 < len(w) and w[i + 1] not in "aeiouy" and w[i + 2] in "aeiouy") or \
                    (i + 1 == len(w) and ch not in "ay")
                sound = (_LONG if long else _SHORT)[ch]
                if ch == "y" and i + 1 == len(w):
                    sound = "i" if n_vowels else "I"
            elif ch == "c":
                sound = "s" if nxt in ("e", "i", "y") else "k"
            elif ch == "g":
                sound = "ʤ" if nxt in ("e", "i", "y") else "ɡ"
            else:
                sound = _GRAPHEMES.get(ch, ch if ch in "bdfhklmnpstvwz" else "")
            i += 1
        if sound and sound[0] in _MISAKI_VOWELS:
            n_vowels += 1
            if n_vowels == 1:
                sound = "ˈ" + sound
            else:
                sound = _REDUCED.get(sound[0], sound[0]) + sound[1:]
        ps.append(sound)
    return "".join(ps)


# Readings where misaki and espeak part and a number word is too common to leave to the rules.
_OVERRIDES = {"thirteen": "θˈɜːtiːn", "fourteen": "fˈɔːɹtiːn", "fifteen": "fˈɪftiːn",
              "sixteen": "sˈɪkstiːn", "seventeen": "sˈɛvəntˌiːn", "eighteen": "ˈeɪtiːn",
              "nineteen": "nˈaɪntiːn", "ninety": "nˈaɪnti", "hundred": "hˈʌndɹɪd",
              "million": "mˈɪliən", "billion": "bˈɪliən", "trillion": "tɹˈɪliən",
              "zero": "zˈiəɹoʊ", "than": "ðɐn"}


def word_phonemes(word):
    """espeak-style IPA of one word (letters and apostrophes)."""
    if word.lower() in _OVERRIDES:
        return _OVERRIDES[word.lower()]
    words = lexicon()
    for form in (word, word.lower(), word.capitalize()):
        if form in words:
            return to_espeak(words[form], word)
    lower = word.lower()
    found = _stem_and_suffix(lower, words) or _compound(lower, words)
    if found:
        return to_espeak(found, word)
    if (word.isupper() and len(word) <= 5) or not re.search("[aeiouy]", lower):
        return _spell(word)  # an acronym, or nothing to read
    return to_espeak(_letters_to_sounds(word))


# Words espeak leaves unstressed even alone; any other word alone in a clause gets a stress.
_UNSTRESSED = frozenset("the to of at for and an he we she you is was it as or from with if are "
                        "were her they your than their its am per".split())
_SECONDARY_ALONE = frozenset("but one what when had been some them our him any us though into "
                             "gonna".split())
# Reduced forms espeak gives these inside a sentence.
_IN_SENTENCE = {"to": "tə", "i": "aɪ"}
# Word pairs espeak runs together, with the first word's reduced form ("in the" -> ɪnðə).
_RUN_TOGETHER = {("in", "the"): "ɪn", ("of", "the"): "ʌv", ("for", "the"): "fɚ",
                 ("with", "the"): "wɪð", ("from", "the"): "fɹʌm", ("on", "the"): "ɔn",
                 ("of", "a"): "əv", ("at", "a"): "æɾ", ("for", "a"): "fɚɹ"}
_INITIAL_VOWEL = re.compile("^[ˈˌ]?[aeiouæɑɐɒɔəɚɛɜɪʊʌᵻ]")


def _clause_words(words):
    """IPA of the words of one clause (no punctuation), spaced and run together as espeak
    does: "the" and "a" by the next sound, hyphenated words as one."""
    ipa = ["".join(word_phonemes(part) for part in w.split("-")) for w in words]
    lower = [w.lower() for w in words]
    for i, w in enumerate(lower):
        before_vowel = i + 1 < len(ipa) and bool(_INITIAL_VOWEL.match(ipa[i + 1]))
        if w == "the":
            ipa[i] = "ðɪʲ" if before_vowel else "ðə"
        elif w == "a":
            ipa[i] = "ɐ" if len(words) > 1 else "ˈeɪ"
        elif w in _IN_SENTENCE and len(words) > 1 and not (w == "to" and before_vowel):
            ipa[i] = _IN_SENTENCE[w]
        elif before_vowel and re.search("iː?$", ipa[i]):
            ipa[i] += "ʲ"  # espeak's glide from i into a vowel: "coffee on"
        elif before_vowel and ipa[i].endswith("ɚ"):
            ipa[i] += "ɹ"  # linking r: "after a"
    if len(words) == 1 and lower[0] in _SECONDARY_ALONE:
        ipa[0] = _stress(ipa[0].replace("ˈ", "ˌ"), secondary=True)
    elif len(words) == 1 and lower[0] not in _UNSTRESSED and "ˈ" not in ipa[0]:
        ipa[0] = _stress(ipa[0])
    if len(words) > 1 and not any("ˈ" in p for p in ipa):  # a clause has a primary stress
        first = next((i for i, p in enumerate(ipa) if "ˌ" in p), None)
        if first is not None:
            ipa[first] = ipa[first].replace("ˌ", "ˈ", 1)
    out = ""
    for i, w in enumerate(lower):
        nxt = lower[i + 1] if i + 1 < len(lower) else None
        if (w, nxt) in _RUN_TOGETHER:
            out += _RUN_TOGETHER[(w, nxt)]
            if nxt == "a":
                out += "ə"
                ipa[i + 1] = ""
        else:
            out += ipa[i] + " "
    return re.sub(r" +", " ", out).strip()


def _stress(ipa, secondary=False):
    """A word given the stress espeak gives a word standing alone."""
    mark = "ˌ" if secondary else "ˈ"
    if "ˌ" in ipa:
        return ipa.replace("ˌ", mark, 1)
    m = re.search("[aeiouæɑɐɒɔəɚɛɜɪʊʌᵻ]", ipa)
    return ipa[:m.start()] + mark + ipa[m.start():] if m else ipa


def phonemize_sentence(sentence):
    """IPA of one normalised sentence: words separated by spaces, punctuation kept."""
    out, clause = "", []
    for token in _TOKEN.findall(sentence):
        if token[0] in _CLAUSE_MARKS or token[0] in _SENTENCE_MARKS:
            out += _clause_words(clause) + token
            out += " " if token[0] in _CLAUSE_MARKS else ""
            clause = []
        else:
            clause.append(token)
    if clause:
        out += _clause_words(clause)
    return out.rstrip(" ")


def phonemize(text, lang="en-us"):
    """espeak-ng style IPA of `text` (sentences split and normalised here), as piper's espeak
    phonemizer joins it: sentence marks end a sentence with no space after them."""
    if not lang.lower().startswith("en"):
        raise ValueError(f"the lexicon G2P speaks English only, not {lang!r}; "
                         "use the espeak phonemizer for other languages")
    out = ""
    for sentence in sentences(text):
        ipa = phonemize_sentence(normalize(sentence, lang))
        # A sentence with no mark of its own (a heading, a line) is not run into the next.
        out += (" " if out and out[-1] not in _SENTENCE_MARKS and ipa else "") + ipa
    return out


class LanguageNotSupported(ValueError):
    """The lexicon has no words of this language."""


def phoneme_sentences(text, lang="en-us"):
    """Text -> one list of phonemes (NFD code points, punctuation and spaces included) per
    sentence: the form a Piper voice's phoneme_id_map is read with (core.tts.synth)."""
    if not lang.lower().startswith("en"):
        raise LanguageNotSupported(f"the lexicon phonemizer speaks English only, not {lang!r}: "
                                   "use --phonemizer espeak for this voice.")
    found = (phonemize_sentence(normalize(s, lang)) for s in sentences(text))
    return [list(unicodedata.normalize("NFD", ipa)) for ipa in found if ipa]

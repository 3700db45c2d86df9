"""Whisper's vocabulary: byte-level BPE tokens (GPT-2 style ranks), then special tokens.

The BPE part comes as bytes (whisper.cpp bins) or as GPT-2 unicode strings (a CTranslate2
model's vocabulary.txt); the special ids follow whisper's fixed layout after the BPE tokens.
"""
from dataclasses import dataclass, field

LANGUAGES = {
    "en": "english", "zh": "chinese", "de": "german", "es": "spanish", "ru": "russian",
    "ko": "korean", "fr": "french", "ja": "japanese", "pt": "portuguese", "tr": "turkish",
    "pl": "polish", "ca": "catalan", "nl": "dutch", "ar": "arabic", "sv": "swedish",
    "it": "italian", "id": "indonesian", "hi": "hindi", "fi": "finnish", "vi": "vietnamese",
    "he": "hebrew", "uk": "ukrainian", "el": "greek", "ms": "malay", "cs": "czech",
    "ro": "romanian", "da": "danish", "hu": "hungarian", "ta": "tamil", "no": "norwegian",
    "th": "thai", "ur": "urdu", "hr": "croatian", "bg": "bulgarian", "lt": "lithuanian",
    "la": "latin", "mi": "maori", "ml": "malayalam", "cy": "welsh", "sk": "slovak",
    "te": "telugu", "fa": "persian", "lv": "latvian", "bn": "bengali", "sr": "serbian",
    "az": "azerbaijani", "sl": "slovenian", "kn": "kannada", "et": "estonian",
    "mk": "macedonian", "br": "breton", "eu": "basque", "is": "icelandic", "hy": "armenian",
    "ne": "nepali", "mn": "mongolian", "bs": "bosnian", "kk": "kazakh", "sq": "albanian",
    "sw": "swahili", "gl": "galician", "mr": "marathi", "pa": "punjabi", "si": "sinhala",
    "km": "khmer", "sn": "shona", "yo": "yoruba", "so": "somali", "af": "afrikaans",
    "oc": "occitan", "ka": "georgian", "be": "belarusian", "tg": "tajik", "sd": "sindhi",
    "gu": "gujarati", "am": "amharic", "yi": "yiddish", "lo": "lao", "uz": "uzbek",
    "fo": "faroese", "ht": "haitian creole", "ps": "pashto", "tk": "turkmen", "nn": "nynorsk",
    "mt": "maltese", "sa": "sanskrit", "lb": "luxembourgish", "my": "myanmar", "bo": "tibetan",
    "tl": "tagalog", "mg": "malagasy", "as": "assamese", "tt": "tatar", "haw": "hawaiian",
    "ln": "lingala", "ha": "hausa", "ba": "bashkir", "jw": "javanese", "su": "sundanese",
    "yue": "cantonese",
}

# openai-whisper's non-speech symbols (tokenizer.non_speech_tokens): suppressed by default so
# the model does not write speaker tags, music notes or bracketed annotations.
_NON_SPEECH = list('"#()*+/:;<=>@[\\]^_`{|}~「」『』') + (
    "<< >> <<< >>> -- --- -( -[ (' (\" (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪".split())
_MISC = "♩♪♫♬♭♮♯"  # may be several tokens; their first token is safe to suppress


def gpt2_byte_decoder():
    """GPT-2's printable stand-in character for each byte, inverted: char -> byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def tokens_from_gpt2_strings(lines):
    """BPE token bytes from GPT-2 unicode strings, stopping at the first special token."""
    decoder = gpt2_byte_decoder()
    out = []
    for line in lines:
        if line.startswith("<|") and line.endswith("|>"):
            break
        out.append(bytes(decoder[c] for c in line))
    return out


@dataclass
class WhisperTokenizer:
    tokens: list                  # bytes of each BPE token; the id is the index (and its rank)
    n_vocab: int                  # with the special tokens
    ranks: dict = field(init=False, repr=False)

    def __post_init__(self):
        # whisper's layout: 50256 BPE tokens (+1 empty one in multilingual vocabularies),
        # <|endoftext|>, <|startoftranscript|>, one token per language, the task and marker
        # tokens, then 1501 timestamps <|0.00|>..<|30.00|>.
        self.multilingual = self.n_vocab >= 51865
        self.n_languages = self.n_vocab - 51765 - int(self.multilingual)
        self.eot = 50256 + int(self.multilingual)
        self.tokens = list(self.tokens[:self.eot]) + [b""] * (self.eot - len(self.tokens))
        self.ranks = {t: i for i, t in enumerate(self.tokens) if t}
        self.sot = self.eot + 1
        first = self.sot + 1 + self.n_languages
        (self.translate, self.transcribe, self.sot_lm, self.sot_prev, self.no_speech,
         self.no_timestamps, self.timestamp_begin) = range(first, first + 7)
        self.language_codes = list(LANGUAGES)[:self.n_languages]

    def language_token(self, code):
        return self.sot + 1 + self.language_codes.index(code)

    def sot_sequence(self, language=None, task="transcribe"):
        if not self.multilingual:
            return [self.sot]
        task_token = self.translate if task == "translate" else self.transcribe
        return [self.sot, self.language_token(language or "en"), task_token]

    def decode_bytes(self, ids):
        return b"".join(self.tokens[i] for i in ids if i < self.eot)

    def decode(self, ids):
        return self.decode_bytes(ids).decode("utf-8", "replace")

    def token_text(self, tid):
        """Readable text of one token, specials as whisper.cpp names them."""
        if tid < self.eot:
            return self.tokens[tid].decode("utf-8", "replace")
        if tid >= self.timestamp_begin:
            return f"[_TT_{tid - self.timestamp_begin}]"
        if self.sot < tid <= self.sot + self.n_languages:
            return f"[_LANG_{self.language_codes[tid - self.sot - 1]}]"
        names = {self.eot: "EOT", self.sot: "SOT", self.translate: "TRANSLATE",
                 self.transcribe: "TRANSCRIBE", self.sot_lm: "SOLM", self.sot_prev: "PREV",
                 self.no_speech: "NOSP", self.no_timestamps: "NOT"}
        return f"[_{names.get(tid, 'extra_token_' + str(tid))}_]"

    def bpe(self, data: bytes):
        """Token ids of one pre-token (a word): merge the lowest-ranked adjacent pair first."""
        parts = [bytes([b]) for b in data]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                rank = self.ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return [self.ranks[p] for p in parts]

    def blank_ids(self):
        """What `SuppressBlank` forbids as the first sampled token: a bare space, and EOT."""
        return self.bpe(b" ") + [self.eot]

    def suppress_ids(self):
        """openai-whisper's default suppress_tokens ("-1"): non-speech symbols and task tokens.

        Every symbol here is one pre-token on its own (no letters, digits or spaces inside),
        so byte-level BPE of the symbol is exactly what the GPT-2 regex + BPE would give.
        """
        result = {self.bpe(b" -")[0], self.bpe(b" '")[0]}
        for symbol in _NON_SPEECH + list(_MISC):
            for ids in (self.bpe(symbol.encode()), self.bpe((" " + symbol).encode())):
                if len(ids) == 1 or symbol in _MISC:
                    result.add(ids[0])
        result |= {self.transcribe, self.translate, self.sot, self.sot_prev, self.sot_lm,
                   self.no_speech}
        return sorted(result)

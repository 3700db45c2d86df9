"""Byte-pair encoding as llama.cpp does it: pre-tokenizer regexes split the text into words,
then each word merges pairs of symbols by rank (the line number in tokenizer.ggml.merges).

llama.cpp does not run the regexes on the text itself. It first "collapses" every non-ASCII
codepoint to one byte naming its Unicode class (letter, number, ...) and rewrites `\\p{L}` and
friends to match those bytes; regexes without `\\p{..}` see the codepoints with non-ASCII
whitespace replaced by U+000B. We do the same with the standard `re` module, taking the
classes from `unicodedata` patched to llama.cpp's Unicode 15.1 table (a Python whose
unicodedata is newer than 15.1 would also classify codepoints llama.cpp leaves unassigned).
"""
import bisect
import heapq
import re
import unicodedata
from dataclasses import dataclass

# Class bytes of llama.cpp's collapsed text (unicode.cpp, k_ucat_cpt); 0x0B stands for any
# non-ASCII whitespace, 0xD0 for every other class (C, Z, unassigned).
_CLASS_BYTE = {"N": 0xD1, "L": 0xD2, "P": 0xD3, "M": 0xD4, "S": 0xD5}
_OTHER_BYTE = 0xD0
_SPACE_BYTE = 0x0B

# llama.cpp's whitespace set: the Unicode White_Space property.
_WHITESPACE = frozenset([*range(0x09, 0x0E), 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
                         0x2028, 0x2029, 0x202F, 0x205F, 0x3000])

# Codepoints llama.cpp's table (Unicode 15.1) assigns and Python 3.11's unicodedata (14.0)
# does not: (first, last, major category). Newer Pythons know them already.
_UNICODE_15_1 = (
    (0x0CF3, 0x0CF3, "M"), (0x0ECE, 0x0ECE, "M"), (0x2FFC, 0x2FFF, "S"), (0x31EF, 0x31EF, "S"),
    (0x10EFD, 0x10EFF, "M"), (0x1123F, 0x11240, "L"), (0x11241, 0x11241, "M"),
    (0x11B00, 0x11B09, "P"), (0x11F00, 0x11F01, "M"), (0x11F02, 0x11F02, "L"),
    (0x11F03, 0x11F03, "M"), (0x11F04, 0x11F10, "L"), (0x11F12, 0x11F33, "L"),
    (0x11F34, 0x11F3A, "M"), (0x11F3E, 0x11F42, "M"), (0x11F43, 0x11F4F, "P"),
    (0x11F50, 0x11F59, "N"), (0x1342F, 0x1342F, "L"), (0x13439, 0x1343F, "C"),
    (0x13440, 0x13440, "M"), (0x13441, 0x13446, "L"), (0x13447, 0x13455, "M"),
    (0x1B132, 0x1B132, "L"), (0x1B155, 0x1B155, "L"), (0x1D2C0, 0x1D2D3, "N"),
    (0x1DF25, 0x1DF2A, "L"), (0x1E030, 0x1E06D, "L"), (0x1E08F, 0x1E08F, "M"),
    (0x1E4D0, 0x1E4EB, "L"), (0x1E4EC, 0x1E4EF, "M"), (0x1E4F0, 0x1E4F9, "N"),
    (0x1F6DC, 0x1F6DC, "S"), (0x1F774, 0x1F776, "S"), (0x1F77B, 0x1F77F, "S"),
    (0x1F7D9, 0x1F7D9, "S"), (0x1FA75, 0x1FA77, "S"), (0x1FA87, 0x1FA88, "S"),
    (0x1FAAD, 0x1FAAF, "S"), (0x1FABB, 0x1FABD, "S"), (0x1FABF, 0x1FABF, "S"),
    (0x1FACE, 0x1FACF, "S"), (0x1FADA, 0x1FADB, "S"), (0x1FAE8, 0x1FAE8, "S"),
    (0x1FAF7, 0x1FAF8, "S"), (0x2B739, 0x2B739, "L"), (0x2EBF0, 0x2EE5D, "L"),
    (0x31350, 0x323AF, "L"),
)
_UNICODE_15_1_FIRST = [first for first, _, _ in _UNICODE_15_1]


def _major_category(cp):
    category = unicodedata.category(chr(cp))
    if category == "Cn":
        i = bisect.bisect_right(_UNICODE_15_1_FIRST, cp) - 1
        if i >= 0 and cp <= _UNICODE_15_1[i][1]:
            return _UNICODE_15_1[i][2]
    return category[0]


class _Collapse(dict):
    """str.translate table to llama.cpp's collapsed text, filled as codepoints are met."""

    def __missing__(self, cp):
        if cp < 0x80:
            byte = cp
        elif cp in _WHITESPACE:
            byte = _SPACE_BYTE
        else:
            byte = _CLASS_BYTE.get(_major_category(cp), _OTHER_BYTE)
        self[cp] = byte
        return byte


class _Widen(dict):
    """str.translate table for the regexes without classes: only non-ASCII whitespace changes."""

    def __missing__(self, cp):
        self[cp] = _SPACE_BYTE if cp >= 0x80 and cp in _WHITESPACE else cp
        return self[cp]


_COLLAPSE = _Collapse()
_WIDEN = _Widen()

# What `\p{X}` stands for in a collapsed regex: the class byte plus the ASCII members.
_PROPERTY_SET = {
    name: "\\x%02x" % byte + "".join(re.escape(chr(c)) for c in range(0x80)
                                     if unicodedata.category(chr(c))[0] == name)
    for name, byte in _CLASS_BYTE.items()
}


def _translate(expr):
    """A llama.cpp regex over collapsed text, in Python syntax (ECMAScript `$` is `\\Z`)."""
    out, inside, i = [], False, 0
    while i < len(expr):
        ch = expr[i]
        if ch == "\\":
            prop = re.match(r"\\p\{(\w)\}", expr[i:])
            if prop:
                members = _PROPERTY_SET[prop.group(1)]
                out.append(members if inside else f"[{members}]")
                i += prop.end()
                continue
            out.append(expr[i:i + 2])
            i += 2
            continue
        if ch == "[" and not inside:
            inside = True
        elif ch == "]" and inside:
            inside = False
        elif ch == "$" and not inside:
            ch = r"\Z"
        out.append(ch)
        i += 1
    return "".join(out)


class Splitter:
    """Applies llama.cpp's regexes one after another; matches and the gaps between them
    both become words, each regex refining the words of the previous one."""

    def __init__(self, exprs):
        self.steps = [(re.compile(_translate(e), re.ASCII), "\\p{" in e) for e in exprs]

    def split(self, text):
        collapsed = text.translate(_COLLAPSE) if any(c for _, c in self.steps) else None
        widened = text.translate(_WIDEN) if not all(c for _, c in self.steps) else None
        spans = [(0, len(text))]
        for pattern, uses_classes in self.steps:
            subject = collapsed if uses_classes else widened
            refined = []
            for start, end in spans:
                pos = start
                for m in pattern.finditer(subject, start, end):
                    if m.end() == m.start():
                        continue
                    if m.start() > pos:
                        refined.append((pos, m.start()))
                    refined.append(m.span())
                    pos = m.end()
                if pos < end:
                    refined.append((pos, end))
            spans = refined
        return [text[a:b] for a, b in spans]


# The pre-tokenizer regexes of llama.cpp (llm_tokenizer_bpe), by family.
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
           r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+"
          r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
           r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_PUNCT_RUN = r"[\p{P}\$\+<=>\^~\|]+"
# The deepseek regexes name their scripts by codepoint ranges (escaped here: an editor's
# Unicode normalisation must not change them).
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_LATIN = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
    "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
    "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
    "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
    "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
    "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
    "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107"
    "\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139"
    "\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee"
    "\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e"
    "\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f"
    "\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2"
    "\U000118a0-\U000118df\U0001e900-\U0001e943]+"
)
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"


@dataclass(frozen=True)
class PreTokenizer:
    """How one `tokenizer.ggml.pre` value splits text, and the flags llama.cpp ties to it."""
    exprs: tuple
    ignore_merges: bool = False       # a word that is a token stays whole
    clean_spaces: bool = True         # detokenize drops the space in " ," " 's" ...
    add_bos: bool = False             # default of tokenizer.ggml.add_bos_token
    byte_encode: bool = True          # GPT-2 bytes-to-unicode; False: raw UTF-8, <0xXX> fallback
    escape_whitespaces: bool = False  # spaces become U+2581 first, as in SPM
    whole_newline_runs: bool = False  # a run of newlines that is a token stays whole (gemma 4)


def _family(names, *exprs, **flags):
    spec = PreTokenizer(tuple(exprs), **flags)
    return {name: spec for name in names}


PRE_TOKENIZERS = {
    **_family(["default"], _PUNCT_RUN, _GPT2, r"\p{N}+", "[0-9][0-9][0-9]"),
    **_family(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
               "lfm2", "jina-v5-nano"], _LLAMA3, ignore_merges=True, add_bos=True),
    **_family(["dbrx", "smaug-bpe"], _LLAMA3),
    **_family(["deepseek-llm"], "[\r\n]", _DEEPSEEK_LATIN, _DEEPSEEK_PUNCT, r"\s+$", _CJK,
              r"\p{N}+", clean_spaces=False),
    **_family(["deepseek-coder"], "[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}",
              clean_spaces=False),
    **_family(["falcon"], _PUNCT_RUN, _GPT2, "[0-9][0-9][0-9]"),
    **_family(["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
               "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4"], _GPT2),
    **_family(["trillion", "granite-docling"], _GPT2, clean_spaces=False),
    **_family(["starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"],
              r"\p{N}", _GPT2),
    **_family(["smollm", "command-r"], r"\p{N}", _GPT2, clean_spaces=False),
    **_family(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"],
              _QWEN2, clean_spaces=False),
    **_family(["stablelm2", "megrez"], _QWEN2),
    **_family(["qwen35"], _QWEN35, clean_spaces=False),
    **_family(["gemma4", "granite-embed-multi-311m"], "[^\n]+|[\n]+", byte_encode=False,
              escape_whitespaces=True, whole_newline_runs=True),
}

# GPT-2's reversible map from bytes to printable codepoints: printable Latin-1 bytes stand
# for themselves, the others take U+0100 onwards in byte order.
_PRINTABLE = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
_BYTE_CHAR = {b: chr(b) for b in _PRINTABLE}
_BYTE_CHAR.update({b: chr(0x100 + i)
                   for i, b in enumerate(b for b in range(256) if b not in _BYTE_CHAR)})
BYTE_OF_CHAR = {ch: b for b, ch in _BYTE_CHAR.items()}


def byte_encode(word):
    """The GPT-2 bytes-to-unicode spelling of a word's UTF-8 bytes."""
    return word.encode("utf-8").decode("latin-1").translate(_BYTE_CHAR)


def merge(word, ranks):
    """Symbols (one per codepoint) merged pair by pair, lowest rank first, ties leftmost."""
    symbols = list(word)
    n = len(symbols)
    if n < 2:
        return symbols
    nxt = [*range(1, n), -1]
    prv = list(range(-1, n - 1))
    queue = []

    def push(left, right):
        rank = ranks.get(symbols[left] + " " + symbols[right])
        if rank is not None:
            heapq.heappush(queue, (rank, left, right, symbols[left] + symbols[right]))

    for i in range(n - 1):
        push(i, i + 1)
    while queue:
        _, left, right, joined = heapq.heappop(queue)
        if not symbols[left] or not symbols[right] or symbols[left] + symbols[right] != joined:
            continue  # one side changed since this pair was queued
        symbols[left], symbols[right] = joined, ""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
            push(left, after)
        if prv[left] >= 0:
            push(prv[left], left)
    return [s for s in symbols if s]


class BpeSession:
    """Tokenizes raw text fragments (no special tokens left in them) with one BPE vocab."""

    def __init__(self, pre, token_to_id, ranks):
        self.pre = pre
        self.splitter = Splitter(pre.exprs)
        self.token_to_id = token_to_id
        self.ranks = ranks
        self.word_ids = {}  # word -> token ids; a word always tokenizes the same way

    def encode(self, text, out):
        if self.pre.escape_whitespaces:
            text = text.replace(" ", "\u2581")
        cache = self.word_ids
        if len(cache) > 100_000:
            cache.clear()
        for word in self.splitter.split(text):
            ids = cache.get(word)
            if ids is None:
                ids = cache[word] = self._encode_word(word)
            out.extend(ids)

    def _encode_word(self, word):
        if self.pre.byte_encode:
            word = byte_encode(word)
        whole = self.token_to_id.get(word)
        if whole is not None and (self.pre.ignore_merges
                                  or (self.pre.whole_newline_runs and not word.strip("\n"))):
            return [whole]
        ids = []
        for symbol in merge(word, self.ranks):
            tid = self.token_to_id.get(symbol)
            if tid is not None:
                ids.append(tid)
            else:
                ids.extend(self._byte_fallback(symbol))
        return ids

    def _byte_fallback(self, symbol):
        """llama.cpp looks each UTF-8 byte up on its own; bytes with no token are dropped."""
        for byte in symbol.encode("utf-8"):
            if self.pre.byte_encode:
                tid = self.token_to_id.get(chr(byte)) if byte < 0x80 else None
            else:
                tid = self.token_to_id.get(f"<0x{byte:02X}>")
            if tid is not None:
                yield tid

"""Text to token ids and back, exactly as llama.cpp's llama-vocab.cpp does it.

One Tokenizer covers the vocab types of GGUF files: "llama" (SPM, core/llm/tokenizer_spm.py) and
"gpt2"/"gemma4" (BPE, core/llm/tokenizer_bpe.py). This file holds what both share: reading the
vocab from GGUF metadata with llama.cpp's defaults, the special tokens and their attributes,
cutting special tokens out of the text, and turning ids back into bytes.
"""
from enum import IntFlag
from typing import Any, Mapping

import numpy as np
from gguf.constants import Keys

from . import tokenizer_bpe, tokenizer_spm


class TokenizerError(ValueError):
    """A vocab in the GGUF metadata that cannot be used; the message is one sentence."""


class Attr(IntFlag):
    """llama_token_attr bits."""
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8


# tokenizer.ggml.token_type (gguf.TokenType 0..6) -> attribute; other values are UNDEFINED.
_ATTR_OF_TYPE = np.array([Attr.UNDEFINED, Attr.NORMAL, Attr.UNKNOWN, Attr.CONTROL,
                          Attr.USER_DEFINED, Attr.UNUSED, Attr.BYTE], dtype=np.int32)

SUPPORTED_MODELS = ("llama", "gpt2", "gemma4")

# llama.cpp recognises these special tokens by their text when the GGUF does not name them.
_EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
              "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
              "<end_of_utterance>")
_EOM_TEXTS = ("<|eom_id|>",)
_FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
              "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
              "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
              "<turn|>", "<|tool_response>", "<｜end▁of▁sentence｜>", "[e~[")
_ALWAYS_RENDERED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")  # gpt-oss

# GGUF keys of the special ids, in llama.cpp's order (the deprecated FIM keys come last and win).
_SPECIAL_ID_KEYS = (
    ("bos", Keys.Tokenizer.BOS_ID), ("eos", Keys.Tokenizer.EOS_ID), ("eot", Keys.Tokenizer.EOT_ID),
    ("eom", Keys.Tokenizer.EOM_ID), ("unk", Keys.Tokenizer.UNK_ID), ("sep", Keys.Tokenizer.SEP_ID),
    ("pad", Keys.Tokenizer.PAD_ID), ("mask", Keys.Tokenizer.MASK_ID),
    ("fim_pre", Keys.Tokenizer.FIM_PRE_ID), ("fim_suf", Keys.Tokenizer.FIM_SUF_ID),
    ("fim_mid", Keys.Tokenizer.FIM_MID_ID), ("fim_pad", Keys.Tokenizer.FIM_PAD_ID),
    ("fim_rep", Keys.Tokenizer.FIM_REP_ID), ("fim_sep", Keys.Tokenizer.FIM_SEP_ID),
    ("fim_pre", Keys.Tokenizer.PREFIX_ID), ("fim_suf", Keys.Tokenizer.SUFFIX_ID),
    ("fim_mid", Keys.Tokenizer.MIDDLE_ID),
)
_DEFAULT_SPECIAL_IDS = {
    "llama": {"bos": 1, "eos": 2, "unk": 0},
    "gpt2": {"bos": 11, "eos": 11},
    "gemma4": {},
}

_C_SPACE = " \t\n\v\f\r"  # what C's isspace() strips around special tokens


def _text(value):
    return value if isinstance(value, str) else ""


def _is_strings(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _read_attrs(meta, n_vocab):
    """(n_vocab,) int32 Attr bits from tokenizer.ggml.token_type; no types: all NORMAL."""
    if Keys.Tokenizer.TOKEN_TYPE not in meta:
        return np.full(n_vocab, int(Attr.NORMAL), np.int32)
    types = np.asarray(meta[Keys.Tokenizer.TOKEN_TYPE], np.int64)[:n_vocab]
    attrs = np.zeros(n_vocab, np.int32)
    known = (types >= 0) & (types < len(_ATTR_OF_TYPE))
    attrs[known] = _ATTR_OF_TYPE[types[known]]
    return attrs


def _read_special_ids(meta, model, n_vocab):
    """bos/eos/... ids: llama.cpp's default per model (dropped when outside the vocab),
    replaced by the GGUF's value when that is inside it."""
    ids = dict.fromkeys(["bos", "eos", "eot", "eom", "unk", "sep", "pad", "mask",
                         "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep", "fim_sep"])
    ids.update({name: tid for name, tid in _DEFAULT_SPECIAL_IDS[model].items() if tid < n_vocab})
    for name, key in _SPECIAL_ID_KEYS:
        value = meta.get(key)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool) \
                and 0 <= int(value) < n_vocab:
            ids[name] = int(value)
    return ids


class Tokenizer:
    """A GGUF vocab: encode == llama_tokenize, token_to_piece == llama_token_to_piece,
    decode == llama_detokenize (common_detokenize: specials kept, unparsed if `special`)."""

    def __init__(self, model, tokens, attrs, special_ids, *, scores=None, merges=None,
                 pre=None, pre_name="", add_bos, add_eos, add_space_prefix, general_name="",
                 general_arch=""):
        self.tokens = tokens                  # token texts, empty ones renamed as llama.cpp does
        self.n_vocab = len(tokens)
        self.is_spm = model == "llama"
        self.pre = pre
        self.add_bos, self.add_eos = add_bos, add_eos
        self.add_space_prefix = add_space_prefix
        self._attrs = attrs                   # (n_vocab,) int32 Attr bits
        self._token_to_id = dict(zip(tokens, range(len(tokens))))  # duplicates: the last id wins
        self._ids = dict(special_ids)
        self._find_special_tokens()
        self.eog_ids = self._end_of_generation_ids()
        self._set_strip_attrs(pre_name, general_name.lower(), general_arch)
        self.bos_id, self.eos_id, self.eot_id = self._ids["bos"], self._ids["eos"], self._ids["eot"]
        self._index_special_tokens()
        self._pieces = {}
        if self.is_spm:
            self._scores = scores
            self._byte_ids = [self._spm_byte_id(b) for b in range(256)]
            self._clean_spaces = False
        else:
            # llama.cpp keeps the first rank of a pair listed twice
            ranks = dict(zip(reversed(merges), range(len(merges) - 1, -1, -1)))
            self._bpe = tokenizer_bpe.BpeSession(pre, self._token_to_id, ranks)
            self._clean_spaces = pre.clean_spaces

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any]) -> "Tokenizer":
        """Builds the vocab from GGUF key/values, with llama.cpp's defaults per model type."""
        key = Keys.Tokenizer
        model = meta.get(key.MODEL)
        if not isinstance(model, str) or model not in SUPPORTED_MODELS:
            raise TokenizerError(f"tokenizer model {model!r} is not supported; dasllama reads "
                                 f"{', '.join(map(repr, SUPPORTED_MODELS))} (SPM and BPE) vocabs.")
        pre_name = "gemma4" if model == "gemma4" else (meta.get(key.PRE) or "default")
        if not isinstance(pre_name, str):
            raise TokenizerError(f"{key.PRE} is not a string; the file is corrupt.")
        pre = None
        if model != "llama":
            pre = tokenizer_bpe.PRE_TOKENIZERS.get(pre_name)
            if pre is None:
                raise TokenizerError(f"BPE pre-tokenizer {pre_name!r} is not supported; known ones "
                                     f"are {', '.join(sorted(tokenizer_bpe.PRE_TOKENIZERS))}.")
            if not _is_strings(meta.get(key.MERGES)):
                raise TokenizerError(f"this BPE vocab has no {key.MERGES} (a list of strings); "
                                     "re-convert the model with llama.cpp's convert_hf_to_gguf.py.")
        if not _is_strings(meta.get(key.LIST)) or not meta[key.LIST]:
            raise TokenizerError(f"the model has no vocabulary: {key.LIST} is missing or not a "
                                 "list of strings; re-convert it with llama.cpp's "
                                 "convert_hf_to_gguf.py.")
        for numeric in (key.SCORES, key.TOKEN_TYPE):
            value = meta.get(numeric)
            if value is not None and not (isinstance(value, np.ndarray) and value.ndim == 1
                                          and value.dtype.kind in "iuf"):
                raise TokenizerError(f"{numeric} is not an array of numbers; the file is corrupt.")
        tokens = [text or f"[EMPTY_{i}]" for i, text in enumerate(meta[key.LIST])]
        scores = None
        if model == "llama":
            raw = meta.get(key.SCORES)  # float32, or int32 in some old files
            if raw is not None and len(raw) != len(tokens):
                raise TokenizerError(f"{key.SCORES} has {len(raw)} entries for {len(tokens)} "
                                     "tokens; the file is corrupt.")
            scores = (np.zeros(len(tokens)) if raw is None else np.asarray(raw, np.float32)).tolist()
        add_bos = bool(meta.get(key.ADD_BOS, model == "llama" or pre.add_bos))
        if pre is tokenizer_bpe.PRE_TOKENIZERS["gemma4"]:
            add_bos = True  # llama.cpp overrides Gemma 4's flag
        return cls(model, tokens, _read_attrs(meta, len(tokens)),
                   _read_special_ids(meta, model, len(tokens)), scores=scores,
                   merges=list(meta.get(key.MERGES, ())), pre=pre, pre_name=pre_name,
                   add_bos=add_bos, add_eos=bool(meta.get(key.ADD_EOS, False)),
                   add_space_prefix=bool(meta.get(key.ADD_PREFIX, model == "llama")),
                   general_name=_text(meta.get(Keys.General.NAME)),
                   general_arch=_text(meta.get(Keys.General.ARCHITECTURE)))

    def _spm_byte_id(self, byte):
        """<0xXX>, or else the byte itself as a token (llama_vocab::byte_to_token)."""
        tid = self._token_to_id.get(f"<0x{byte:02X}>")
        return tid if tid is not None or byte >= 0x80 else self._token_to_id.get(chr(byte))

    # --- special tokens, as llama_vocab::impl::load settles them ---

    def _mark(self, tid, attr):
        self._attrs[tid] |= attr

    def _find_special_tokens(self):
        """Fills EOT/EOM/FIM ids the GGUF left out from their usual texts; they become CONTROL.

        llama.cpp takes the first candidate in its hash map's order; we take the first in
        its list's order. That differs only for vocabs holding two candidates: SmolLM2's EOT
        is <|endoftext|> in llama.cpp, <|im_end|> here (both are in eog_ids either way)."""
        lookups = [("eot", _EOT_TEXTS), ("eom", _EOM_TEXTS), *_FIM_TEXTS.items()]
        for name, texts in lookups:
            if self._ids[name] is not None:
                continue
            for text in texts:
                tid = self._token_to_id.get(text)
                if tid is not None:
                    self._ids[name] = tid
                    self._mark(tid, Attr.CONTROL)
                    break

    def _end_of_generation_ids(self):
        eog = {self._ids[name] for name in ("fim_pad", "fim_rep", "fim_sep")} - {None}
        for text in _EOG_TEXTS:
            tid = self._token_to_id.get(text)
            if tid is not None:
                eog.add(tid)
                self._mark(tid, Attr.CONTROL)
        for text in _ALWAYS_RENDERED:
            if text in self._token_to_id:
                self._attrs[self._token_to_id[text]] = Attr.USER_DEFINED
        eog |= {self._ids[name] for name in ("eos", "eot", "eom")} - {None}

        texts = {self.tokens[tid]: tid for tid in eog}
        # o200k_harmony and solar-open: "<|end|>" ends a message, not the generation
        if "<|end|>" in texts and ({"<|return|>", "<|call|>"} <= texts.keys()
                                   or {"<|calls|>", "<|flush|>"} <= texts.keys()):
            eog.discard(texts["<|end|>"])
            self._attrs[texts["<|end|>"]] = Attr.USER_DEFINED
        # gemma 4 and plamo have a normal "</s>"
        if "</s>" in texts and ("<|tool_response>" in texts or "<|plamo:eos|>" in texts):
            eog.discard(texts["</s>"])
            self._attrs[texts["</s>"]] = Attr.NORMAL
        return eog

    def _set_strip_attrs(self, pre_name, general_name, general_arch):
        """llama.cpp's per-model whitespace stripping around some special tokens."""
        def set_attr(text, attr, on):
            tid = self._token_to_id.get(text)
            if tid is not None:
                self._attrs[tid] = (self._attrs[tid] | attr) if on else (self._attrs[tid] & ~attr)

        if (any(name in pre_name for name in ("jina-v2-de", "jina-v2-es", "jina-v2-code"))
                or any(name in general_arch for name in ("nomic-bert-moe", "jina-bert-v3"))):
            set_attr("<mask>", Attr.LSTRIP, True)
        elif "phi-3" in general_name or "phi3" in general_name:
            special = np.flatnonzero(self._attrs & (Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN))
            self._attrs[special] |= Attr.RSTRIP
            set_attr("</s>", Attr.RSTRIP, True)
            for text in ("<unk>", "<s>", "<|endoftext|>"):
                set_attr(text, Attr.RSTRIP, False)
        elif "modern-bert" in general_name:
            set_attr("[MASK]", Attr.LSTRIP, True)

    def _index_special_tokens(self):
        """Special tokens in the order llama.cpp cuts them out (longest first; its std::sort
        leaves equal lengths unordered, we keep ids ascending), bucketed by their first two
        characters so that encode only tries those that can occur."""
        special = np.flatnonzero(self._attrs & (Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN))
        ordered = sorted(special.tolist(), key=lambda tid: -len(self.tokens[tid]))
        self._special_rank = {tid: rank for rank, tid in enumerate(ordered)}
        self._special_by_prefix = {}
        for tid in ordered:
            self._special_by_prefix.setdefault(self.tokens[tid][:2], []).append(tid)

    # --- encode ---

    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize(text, add_special, parse_special)."""
        fragments = self._partition(text, parse_special) if text else []
        out = []
        if add_special and self.add_bos:
            out.append(self._required("bos"))
        if self.is_spm:
            prev_special = True  # a space goes before the first text and after each special
            for fragment in fragments:
                if isinstance(fragment, int):
                    out.append(fragment)
                    prev_special = True
                    continue
                if self.add_space_prefix and prev_special:
                    fragment = " " + fragment
                try:
                    tokenizer_spm.encode(fragment.replace(" ", "\u2581"), self._token_to_id,
                                         self._scores, self._byte_ids, out)
                except ValueError as e:    # a byte the vocab cannot spell
                    raise TokenizerError(f"{e}: the text holds a character this model's "
                                         "vocabulary cannot encode.") from None
                prev_special = False
        else:
            for fragment in fragments:
                if isinstance(fragment, int):
                    out.append(fragment)
                else:
                    self._bpe.encode(fragment, out)
        if add_special and self.add_eos:
            out.append(self._required("eos"))
        return out

    def _required(self, name):
        if self._ids[name] is None:
            raise TokenizerError(f"the vocab asks for a {name.upper()} token but names none; "
                                 "the model's tokenizer metadata is incomplete.")
        return self._ids[name]

    def _partition(self, text, parse_special):
        """Text cut into raw strings and special token ids (tokenizer_st_partition).

        User-defined tokens are always cut out; control and unknown ones only when
        `parse_special`. Longer tokens are cut first, each over every remaining string."""
        skip = 0 if parse_special else Attr.CONTROL | Attr.UNKNOWN
        candidates = []
        prefixes = {text[i:i + 2] for i in range(len(text))} | set(text)
        for prefix in prefixes & self._special_by_prefix.keys():
            candidates += [tid for tid in self._special_by_prefix[prefix]
                           if not self._attrs[tid] & skip and self.tokens[tid] in text]
        fragments = [text]
        for tid in sorted(candidates, key=self._special_rank.__getitem__):
            fragments = self._cut(fragments, tid)
        return fragments

    def _cut(self, fragments, tid):
        needle = self.tokens[tid]
        attr = self._attrs[tid]
        cut = []
        for fragment in fragments:
            if isinstance(fragment, int) or needle not in fragment:
                cut.append(fragment)
                continue
            start = 0
            while (match := fragment.find(needle, start)) >= 0:
                left = fragment[start:match]
                if attr & Attr.LSTRIP:
                    left = left.rstrip(_C_SPACE)
                if left:
                    cut.append(left)
                cut.append(tid)
                start = match + len(needle)
                if attr & Attr.RSTRIP:
                    while start < len(fragment) and fragment[start] in _C_SPACE:
                        start += 1
            if start < len(fragment):
                cut.append(fragment[start:])
        return cut

    # --- decode ---

    def token_to_piece(self, token_id: int, special: bool = False) -> bytes:
        """llama_token_to_piece: the bytes of one token; control and unknown tokens are empty
        unless `special`. A multibyte character may be split across tokens."""
        if not 0 <= token_id < self.n_vocab:
            raise IndexError(f"token id {token_id} is outside the vocab of {self.n_vocab}")
        if not special and self._attrs[token_id] & (Attr.UNKNOWN | Attr.CONTROL):
            return b""
        piece = self._pieces.get(token_id)
        if piece is None:
            piece = self._pieces[token_id] = self._piece(token_id)
        return piece

    def _piece(self, tid):
        text, attr = self.tokens[tid], self._attrs[tid]
        if attr & (Attr.UNKNOWN | Attr.CONTROL | Attr.USER_DEFINED):
            return text.encode("utf-8")
        if attr & Attr.NORMAL:
            if self.is_spm or self.pre.escape_whitespaces:
                return text.replace("\u2581", " ").encode("utf-8")
            return _gpt2_bytes(text)
        if attr & Attr.BYTE:
            return bytes([int(text[3:5], 16)])  # <0xXX>
        return b""

    def vocab_pieces(self) -> tuple[list[bytes], list[int]]:
        """Every token's bytes (specials spelled out, as token_to_piece(special=True)) and the
        ids of the control and unknown tokens: what a grammar engine needs to know of the vocab.
        One pass with str methods; token_to_piece per id takes seconds on a 262144-token vocab."""
        attrs = self._attrs.tolist()
        to_byte = {ord(ch): b for ch, b in tokenizer_bpe.BYTE_OF_CHAR.items()}
        unmapped = dict.fromkeys(to_byte)   # translate() deletes the mapped chars, leaving the rest
        spaces = self.is_spm or self.pre.escape_whitespaces
        pieces, special = [], []
        for tid, (text, attr) in enumerate(zip(self.tokens, attrs)):
            if attr & (Attr.UNKNOWN | Attr.CONTROL):
                special.append(tid)
            if attr & (Attr.UNKNOWN | Attr.CONTROL | Attr.USER_DEFINED):
                pieces.append(text.encode("utf-8"))
            elif attr & Attr.NORMAL:
                if spaces:
                    pieces.append(text.replace("\u2581", " ").encode("utf-8"))
                else:
                    pieces.append(_gpt2_bytes(text) if text.translate(unmapped)
                                  else text.translate(to_byte).encode("latin-1"))
            elif attr & Attr.BYTE:
                pieces.append(bytes([int(text[3:5], 16)]))
            else:
                pieces.append(b"")
        return pieces, special

    def decode(self, ids, special: bool = False) -> str:
        """common_detokenize: pieces joined (the first loses one space when the vocab adds a
        space prefix), spaces cleaned up as the vocab asks, UTF-8 with errors replaced."""
        pieces = []
        for i, tid in enumerate(ids):
            piece = self.token_to_piece(int(tid), special)
            if i == 0 and self.add_space_prefix and piece.startswith(b" "):
                piece = piece[1:]
            pieces.append(piece)
        data = b"".join(pieces)
        if self._clean_spaces:
            data = _clean_up_spaces(data)
        return data.decode("utf-8", errors="replace")


def _gpt2_bytes(text):
    """llama_decode_text: a byte-level BPE token back to bytes; unmapped codepoints are
    spelled "[UNK_BYTE_0x..<token>]" as llama.cpp does."""
    out = bytearray()
    for ch in text:
        byte = tokenizer_bpe.BYTE_OF_CHAR.get(ch)
        if byte is None:
            out += b"[UNK_BYTE_0x" + ch.encode("utf-8").hex().encode() + text.encode("utf-8") + b"]"
        else:
            out.append(byte)
    return bytes(out)


def _clean_up_spaces(data):
    """llama.cpp's clean_spaces, three in-place passes over the bytes, kept literal."""
    text = bytearray(data)
    total = len(text)

    # " ?" " !" " ." " ,": drop the space
    n, total = total, 1 if total else 0
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x in b"?!.,":
            total -= 1
        text[total] = x
        total += 1

    # " ' ": drop both spaces
    n, total = total, 1 if total else 0
    i = 1
    while i < n:
        x = text[i]
        if x == 0x27 and i + 1 < n and text[i - 1] == 0x20 and text[i + 1] == 0x20:
            total -= 1
            i += 1
            text[i] = 0
        text[total] = x
        total += 1
        i += 1

    # " 's" " 'm" " 're" " 've": drop the space
    n, total = total, 1 if total else 0
    for i in range(1, n):
        x = text[i]
        if text[i - 1] == 0x20 and x == 0x27 and i + 1 < n:
            x1 = text[i + 1]
            if x1 in b"sm":
                total -= 1
            elif x1 not in b"td" and i + 2 < n and (x1, text[i + 2]) in ((0x72, 0x65), (0x76, 0x65)):
                total -= 1
        text[total] = x
        total += 1
    return bytes(text[:total])

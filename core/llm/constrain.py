"""Constrained decoding: a grammar masks the logits so that only tokens it allows are sampled.

The grammar engine is llguidance (the one llama.cpp itself can build with): JSON schemas, Lark
and llama.cpp's GBNF (converted by llguidance's own gbnf_to_lark), regexes. We hand it the vocab
as each token's bytes, so one bridge serves SPM (gemma3) and byte-level BPE (qwen2, smollm)
alike. docs/BENCHMARKS.md has the comparison with xgrammar that chose it.

    c = Constraint.json_schema(model.tokenizer, {"type": "object"})
    c.mask(logits)       # disallowed logits -> -inf, in place
    c.accept(token_id)   # advance; c.done once only end-of-generation may follow

StopStrings watches the streamed text for stop strings, holding back what may begin one.
"""
import json
import re
import threading
import weakref

import llguidance
import numpy as np
from llguidance.gbnf_to_lark import any_to_lark

_NEG_INF = np.float32(-np.inf)


class ConstraintError(ValueError):
    """A grammar or schema that cannot be used; the message is one sentence."""


class _VocabBridge:
    """What llguidance asks of a tokenizer (its TokenizerWrapper protocol): every token's bytes,
    which are special, and a way to tokenize text (for the strings it forces)."""

    is_tokenizer_wrapper = True

    def __init__(self, tokenizer):
        self.tokens, self.special_token_ids = tokenizer.vocab_pieces()
        self.eos_token_id = tokenizer.eos_id
        self.bos_token_id = tokenizer.bos_id
        self._tokenizer = tokenizer

    def __call__(self, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text, add_special=False, parse_special=False)


_ll_tokenizers = weakref.WeakKeyDictionary()
_ll_lock = threading.Lock()


def ll_tokenizer(tokenizer):
    """The llguidance tokenizer for one of ours, built once (about a second for 262144 tokens);
    every end-of-generation id counts as its EOS."""
    with _ll_lock:
        found = _ll_tokenizers.get(tokenizer)
        if found is None:
            eos = sorted(tokenizer.eog_ids) or [tokenizer.eos_id]
            found = llguidance.LLTokenizer(_VocabBridge(tokenizer), n_vocab=tokenizer.n_vocab,
                                           eos_token=eos)
            _ll_tokenizers[tokenizer] = found
        return found


_UNICODE_ESCAPE = re.compile(r"\\(\\|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8})")


def _plain_unicode_escapes(gbnf_text):
    """GBNF with its \\uXXXX and \\UXXXXXXXX escapes spelled as \\xXX (ASCII) or as the
    character itself. llguidance 1.9's gbnf_to_lark strips their leading zeros ("\\U10FFFF"),
    which its regex parser then rejects, so llama.cpp's own grammars/json.gbnf would not load."""
    def spell(match):
        escape = match.group(1)
        if escape == "\\":
            return match.group(0)
        cp = int(escape[1:], 16)
        return f"\\x{cp:02X}" if cp < 0x80 else chr(cp)
    return _UNICODE_ESCAPE.sub(spell, gbnf_text)


def _first_line(message):
    line = str(message).strip().splitlines()[0] if str(message).strip() else "unknown error"
    return line.rstrip(".")


class Constraint:
    """One grammar's state over one generation: mask the logits, accept the sampled token."""

    def __init__(self, tokenizer, grammar, what):
        """`grammar` is llguidance's grammar text (from one of the constructors below);
        `what` names the source in errors ("the JSON schema", "the grammar")."""
        self.n_vocab = tokenizer.n_vocab
        self.what = what
        self._matcher = llguidance.LLMatcher(ll_tokenizer(tokenizer), grammar, log_level=0)
        if self._matcher.is_error():
            raise ConstraintError(f"{what} is not usable: {_first_line(self._matcher.get_error())}.")
        self._bits = np.zeros((self.n_vocab + 31) // 32, np.int32)   # (n_words,) one bit a token

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def json_schema(cls, tokenizer, schema):
        """Output that is one JSON value valid against `schema` (a dict, or its JSON text)."""
        if isinstance(schema, (str, bytes)):
            try:
                schema = json.loads(schema)
            except ValueError as e:
                raise ConstraintError(f"the JSON schema is not valid JSON ({e}).") from None
        if not isinstance(schema, (dict, bool)):
            raise ConstraintError("the JSON schema must be a JSON object, like "
                                  '{"type": "object"}.')
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema)
        except ValueError as e:
            raise ConstraintError(f"the JSON schema is not usable: {_first_line(e)}.") from None
        return cls(tokenizer, grammar, "the JSON schema")

    @classmethod
    def json_object(cls, tokenizer):
        """Output that is one JSON object, of any shape (OpenAI's response_format json_object)."""
        return cls.json_schema(tokenizer, {"type": "object"})

    @classmethod
    def grammar(cls, tokenizer, gbnf_text):
        """Output that the grammar's `root` rule matches: llama.cpp's GBNF (a text that already
        is llguidance Lark, with a `start:` rule or a %llguidance line, is taken as it is)."""
        try:
            lark = any_to_lark(_plain_unicode_escapes(gbnf_text))
        except Exception as e:  # gbnf_to_lark raises its own error type and plain ones
            raise ConstraintError(f"the grammar is not valid GBNF: {_first_line(e)}.") from None
        return cls(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), "the grammar")

    @classmethod
    def regex(cls, tokenizer, pattern):
        """Output that the regex (Rust regex syntax) matches as a whole."""
        return cls(tokenizer, llguidance.LLMatcher.grammar_from_regex(pattern), "the regex")

    # -- per token ---------------------------------------------------------------------------

    def mask(self, logits):
        """Set the logits of the tokens the grammar does not allow next to -inf, in place.
        `logits` is (n,) float32 with n >= the tokenizer's vocab (extra rows are never allowed)."""
        self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
        allowed = np.unpackbits(self._bits.view(np.uint8), count=self.n_vocab, bitorder="little")
        np.putmask(logits[:self.n_vocab], allowed == 0, _NEG_INF)
        logits[self.n_vocab:] = _NEG_INF
        return logits

    def accept(self, token_id):
        """Advance the grammar past a sampled token; a token mask() did not allow raises."""
        if not self._matcher.consume_token(int(token_id)):
            raise ConstraintError(f"token {token_id} does not fit {self.what}: "
                                  f"{_first_line(self._matcher.get_error())}.")

    @property
    def done(self):
        """True once the grammar is complete and only end of generation may follow."""
        return self._matcher.is_stopped()

    @property
    def accepting(self):
        """True when the output so far is complete (more may still follow)."""
        return self._matcher.is_accepting()

    def reset(self):
        """Back to the start, for the next generation (the compiled grammar is kept)."""
        self._matcher.reset()

    def copy(self):
        """An independent copy in the same state: compile once, copy per request."""
        twin = object.__new__(Constraint)
        twin.n_vocab, twin.what = self.n_vocab, self.what
        twin._matcher = self._matcher.deep_copy()
        twin._bits = np.zeros_like(self._bits)
        return twin


class StopStrings:
    """Watches generated text for stop strings, as llama.cpp's server does for `stop`.

    push(text) returns (text safe to show now, the stop string hit or None). Text that could be
    the start of a stop string is held back until it is not; after a hit, the text up to the
    stop string is returned and the rest dropped. flush() gives back what is held at the end.
    """

    def __init__(self, stops):
        self.stops = [s for s in stops if s]
        self._held = ""
        self.hit = None

    def push(self, text):
        if self.hit is not None:
            return "", self.hit
        text = self._held + text
        first = None
        for stop in self.stops:
            at = text.find(stop)
            if at >= 0 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self._held, self.hit = "", first[1]
            return text[:first[0]], first[1]
        keep = self._partial_len(text)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep], None

    def _partial_len(self, text):
        """Length of the longest end of `text` that is a proper start of some stop string."""
        best = 0
        for stop in self.stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def flush(self):
        held, self._held = self._held, ""
        return held

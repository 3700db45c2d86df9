"""Text generation: prompt -> tokens -> streamed pieces, with sampling and stop rules."""
import codecs
import time
from dataclasses import dataclass

from .chat import render_chat
from .constrain import StopStrings
from .sampling import Sampler, SamplerParams

STOP_REASONS = ("eos", "length", "stop")


@dataclass(frozen=True)
class Token:
    id: int
    text: str          # the decoded text this token completes (may be "" mid-character)
    stop_reason: str | None = None   # on the last Token only: one of STOP_REASONS


def prompt_ids(model, prompt, chat=False, system=None, template=None):
    """Token ids for a prompt; with chat, rendered through the chat template first (the
    GGUF's, or `template`, a Jinja text that overrides it)."""
    if chat:
        messages = ([{"role": "system", "content": system}] if system else [])
        messages.append({"role": "user", "content": prompt})
        return chat_ids(model, messages, template=template)
    return model.tokenizer.encode(prompt, add_special=True, parse_special=False)


def chat_ids(model, messages, tools=None, template=None):
    """Token ids of chat messages rendered through the chat template (the GGUF's, or
    `template`), ready for the assistant's reply."""
    tok = model.tokenizer
    bos = tok.token_to_piece(tok.bos_id, special=True).decode("utf-8", "replace") if tok.bos_id is not None else ""
    eos = tok.token_to_piece(tok.eos_id, special=True).decode("utf-8", "replace") if tok.eos_id is not None else ""
    text = render_chat(template or model.gguf.get("tokenizer.chat_template"), messages, bos, eos, tools=tools)
    # as llama.cpp's common_chat_templates_apply: the tokenizer adds BOS/EOS itself, so a
    # template that writes them would double them
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]
    if tok.add_eos and eos and text.endswith(eos):
        text = text[:-len(eos)]
    return tok.encode(text, add_special=True, parse_special=True)


def generate(model, ids, n_predict=-1, params=SamplerParams(), ignore_eos=False,
             constraint=None, stop=(), reuse_cache=False):
    """Yield Tokens after the prompt ids, until an end-of-generation token, n_predict or a
    stop string; the last Token (id -1, with any text still held) carries the stop reason.

    n_predict < 0 runs until end of generation; a full context always stops ("length").
    `constraint` (core/llm/constrain.py) masks the logits before each draw and ends the
    generation ("eos") once its grammar is complete. `stop` strings end it ("stop"); text that
    may begin one is held back, and the stop string itself is never yielded. With reuse_cache
    the tokens already in the KV cache that start `ids` are kept and only the rest evaluated
    (a conversation's next turn); otherwise the model is reset first. Timings accumulate in
    model.timings (prompt_tokens: the tokens evaluated).
    """
    tok = model.tokenizer
    sampler = Sampler(params)
    start_at(model, ids, reuse_cache)
    t0 = time.perf_counter()
    fresh = ids[model.n_past:]
    logits = model.eval(fresh, copy=False)     # read (and masked) before the next step
    model.timings.prompt_tokens, model.timings.prompt_s = len(fresh), time.perf_counter() - t0
    model.timings.gen_tokens, model.timings.gen_s = 0, 0.0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    stops = StopStrings(stop) if stop else None
    history = list(ids)
    n = 0
    reason = "length"
    t1 = time.perf_counter()
    while n_predict < 0 or n < n_predict:
        if constraint is not None:
            constraint.mask(logits)
        token = sampler.sample(logits, history)
        n += 1
        if token in tok.eog_ids and not ignore_eos:
            reason = "eos"
            break
        history.append(token)
        if constraint is not None:
            constraint.accept(token)
        text = decoder.decode(tok.token_to_piece(token))
        if stops is not None:
            text, hit = stops.push(text)
            if hit is not None:
                yield Token(token, text)
                reason = "stop"
                break
        yield Token(token, text)
        if constraint is not None and constraint.done:
            reason = "eos"
            break
        if n == n_predict or model.n_past >= model.n_ctx:
            break
        logits = model.eval([token], copy=False)
        model.timings.gen_tokens, model.timings.gen_s = n, time.perf_counter() - t1
    model.timings.gen_tokens, model.timings.gen_s = n, time.perf_counter() - t1
    tail = "" if reason == "stop" else decoder.decode(b"", final=True)
    if stops is not None and reason != "stop":
        tail, hit = stops.push(tail)
        if hit is not None:
            reason = "stop"
        else:
            tail += stops.flush()
    yield Token(-1, tail, reason)


def start_at(model, ids, reuse_cache):
    """Rewind the KV cache to the longest start of `ids` it holds (none without reuse_cache),
    keeping at least one token of `ids` to evaluate so that there are logits to sample."""
    if not ids:
        raise ValueError("nothing to evaluate: the token list is empty.")
    keep = 0
    if reuse_cache:
        held = model.history
        limit = min(len(held), len(ids) - 1)
        while keep < limit and held[keep] == ids[keep]:
            keep += 1
    model.rewind(keep)
    model.check_fits(len(ids) - keep)

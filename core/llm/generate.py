"""Text generation: prompt -> tokens -> streamed pieces, with sampling and stop rules."""
import codecs
import time
from dataclasses import dataclass

from .chat import render_chat
from .sampling import Sampler, SamplerParams


@dataclass(frozen=True)
class Token:
    id: int
    text: str          # the decoded text this token completes (may be "" mid-character)


def prompt_ids(model, prompt, chat=False, system=None):
    """Token ids for a prompt; with chat, rendered through the GGUF's chat template first."""
    if chat:
        messages = ([{"role": "system", "content": system}] if system else [])
        messages.append({"role": "user", "content": prompt})
        return chat_ids(model, messages)
    return model.tokenizer.encode(prompt, add_special=True, parse_special=False)


def chat_ids(model, messages, tools=None):
    """Token ids of chat messages rendered through the GGUF's chat template, ready for the
    assistant's reply."""
    tok = model.tokenizer
    bos = tok.token_to_piece(tok.bos_id, special=True).decode("utf-8", "replace") if tok.bos_id is not None else ""
    eos = tok.token_to_piece(tok.eos_id, special=True).decode("utf-8", "replace") if tok.eos_id is not None else ""
    text = render_chat(model.gguf.get("tokenizer.chat_template"), messages, bos, eos, tools=tools)
    # as llama.cpp's common_chat_templates_apply: the tokenizer adds BOS/EOS itself, so a
    # template that writes them would double them
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]
    if tok.add_eos and eos and text.endswith(eos):
        text = text[:-len(eos)]
    return tok.encode(text, add_special=True, parse_special=True)


def generate(model, ids, n_predict=-1, params=SamplerParams(), ignore_eos=False):
    """Yield Tokens after the prompt ids, until an end-of-generation token or n_predict.

    n_predict < 0 runs until end of generation; a full context always stops. The model is
    reset first;
    timings accumulate in model.timings.
    """
    tok = model.tokenizer
    sampler = Sampler(params)
    model.reset()
    model.check_fits(len(ids))
    t0 = time.perf_counter()
    logits = model.eval(ids)
    model.timings.prompt_tokens, model.timings.prompt_s = len(ids), time.perf_counter() - t0
    model.timings.gen_tokens, model.timings.gen_s = 0, 0.0
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    history = list(ids)
    n = 0
    t1 = time.perf_counter()
    while n_predict < 0 or n < n_predict:
        token = sampler.sample(logits, history)
        n += 1
        if token in tok.eog_ids and not ignore_eos:
            break
        history.append(token)
        yield Token(token, decoder.decode(tok.token_to_piece(token)))
        if n == n_predict or model.n_past >= model.n_ctx:
            break
        logits = model.eval([token])
        model.timings.gen_tokens, model.timings.gen_s = n, time.perf_counter() - t1
    model.timings.gen_tokens, model.timings.gen_s = n, time.perf_counter() - t1
    tail = decoder.decode(b"", final=True)
    if tail:
        yield Token(-1, tail)

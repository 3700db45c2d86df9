"""`dasllama generate`: text from a GGUF LLM, streamed to stdout."""
import codecs
import json
import sys

import click

from dasllama.core import SamplerParams, generate, load, prompt_ids

from .errors import user_errors
from .options import THREADS, FiniteFloat


def read_prompt(prompt_arg, prompt_opt, file, encoding):
    """The prompt from the argument, -p, -f FILE (or -f - for stdin), or piped stdin."""
    given = [p for p in (prompt_arg, prompt_opt) if p is not None]
    for text, where in ((prompt_arg, "the prompt argument"), (prompt_opt, "-p")):
        if text is not None:
            check_encodable(text, where)
    if file is not None:
        given.append(decode(file.read(), encoding, f"-f {file.name}"))
    if len(given) > 1:
        raise click.UsageError("give the prompt once: as an argument, with -p, or with -f.")
    if given:
        return given[0]
    stdin = click.get_binary_stream("stdin")
    if not stdin.isatty():
        return decode(stdin.read(), encoding, "stdin")
    raise click.UsageError("no prompt: pass it as an argument, with -p TEXT, -f FILE, or on stdin.")


def decode(data, encoding, where):
    """Bytes of a prompt as text; a byte the encoding cannot read is named with its offset."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise click.ClickException(
            f"{where} is not valid {encoding} text (byte 0x{data[e.start]:02x} at offset "
            f"{e.start}): pass --encoding with its encoding (e.g. --encoding latin-1).") from None


def check_encodable(text, where):
    """Command-line text that was not UTF-8 reaches Python as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise click.ClickException(f"{where} is not valid UTF-8 text (at character {e.start}): "
                                   "put it in a file and pass -f FILE --encoding ENC.") from None


def check_encoding(ctx, param, value):
    try:
        codecs.lookup(value)
    except LookupError:
        raise click.BadParameter(f"{value!r} is not a text encoding Python knows "
                                 "(e.g. utf-8, latin-1, cp1252, utf-16).") from None
    return value


def warn_long_context(model):
    """As llama.cpp warns when -c asks for more than the training context: the output
    degrades past it (the default -c is not the user's choice, so it is not warned about)."""
    n_train = model.hparams.n_ctx_train
    if model.n_ctx > n_train:
        click.echo(f"dasllama: warning: -c {model.n_ctx} is larger than the {n_train} tokens "
                   f"the model was trained on, so expect text to degrade past {n_train} tokens; "
                   f"the KV cache takes {size_text(model.kv_cache_bytes())}.", err=True)


def size_text(n_bytes):
    return f"{n_bytes / 2**30:.1f} GiB" if n_bytes >= 2**30 else f"{n_bytes / 2**20:.0f} MiB"


@click.command()
@click.argument("prompt_arg", metavar="[PROMPT]", required=False)
@click.option("-m", "--model", "model_path", type=click.Path(dir_okay=False),
              help="GGUF model file (default: the installed default model, Gemma 3 270M).")
@click.option("-p", "--prompt", "prompt_opt", help="Prompt text.")
@click.option("-f", "--file", type=click.File("rb"), help="Read the prompt from a file ('-' for stdin).")
@click.option("--encoding", default="utf-8", show_default=True, callback=check_encoding,
              help="Text encoding of -f FILE or stdin.")
@click.option("-n", "--n-predict", default=128, show_default=True, type=click.IntRange(-1),
              help="Tokens to generate (-1: until end of text or full context).")
@click.option("-c", "--ctx-size", default=4096, show_default=True, type=click.IntRange(0),
              help="Context size in tokens (0: the model's training context).")
@click.option("-t", "--threads", type=THREADS, default=None, help="Threads (default: all cores).")
@click.option("-b", "--batch-size", default=512, show_default=True, type=click.IntRange(1),
              help="Prompt tokens per forward pass.")
@click.option("--temp", default=0.8, show_default=True, type=FiniteFloat(0),
              help="Temperature; 0 is greedy.")
@click.option("--top-k", default=40, show_default=True, type=click.IntRange(0),
              help="Keep the k most likely tokens (0: all).")
@click.option("--top-p", default=0.95, show_default=True, type=FiniteFloat(0, 1),
              help="Keep the most likely tokens up to this probability mass (1: all).")
@click.option("--min-p", default=0.05, show_default=True, type=FiniteFloat(0, 1),
              help="Drop tokens less likely than this fraction of the best (0: none).")
@click.option("--repeat-penalty", default=1.0, show_default=True,
              type=FiniteFloat(0, min_open=True), help="Penalty on repeated tokens (1: none).")
@click.option("--repeat-last-n", default=64, show_default=True, type=click.IntRange(-1),
              help="Tokens the penalty looks back over (0: none, -1: the whole context).")
@click.option("-s", "--seed", type=click.IntRange(-1, 2**32 - 1), default=-1, show_default=True,
              help="RNG seed (-1: random).")
@click.option("--chat", is_flag=True, help="Render the prompt through the model's chat template.")
@click.option("-sys", "--system-prompt", help="System message for --chat.")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past end-of-text tokens.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record (text, token ids, timings) instead of streaming.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr: no timing line, no first-run compile notice.")
def generate_cmd(prompt_arg, model_path, prompt_opt, file, encoding, n_predict, ctx_size, threads, batch_size,
                 temp, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, chat,
                 system_prompt, ignore_eos, as_json, quiet):
    """Generate text from PROMPT with a GGUF model, streaming it to stdout."""
    prompt = read_prompt(prompt_arg, prompt_opt, file, encoding)
    if system_prompt and not chat:
        raise click.UsageError("-sys/--system-prompt needs --chat.")
    params = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p,
                           repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                           seed=None if seed < 0 else seed)
    with user_errors():
        model = load(model_path, n_ctx=ctx_size or None, n_threads=threads, n_batch=batch_size,
                     quiet=quiet)
        ctx_source = click.get_current_context().get_parameter_source("ctx_size")
        if not quiet and ctx_source == click.core.ParameterSource.COMMANDLINE:
            warn_long_context(model)
        ids = prompt_ids(model, prompt, chat=chat, system=system_prompt)
        out = click.get_text_stream("stdout")
        pieces, token_ids = [], []
        for token in generate(model, ids, n_predict, params, ignore_eos=ignore_eos):
            if token.id >= 0:
                token_ids.append(token.id)
            pieces.append(token.text)
            if not as_json and token.text:
                out.write(token.text)
                out.flush()
    t = model.timings
    if as_json:
        record = {"model": model.path, "prompt_tokens": list(map(int, ids)), "tokens": token_ids,
                  "text": "".join(pieces),
                  "timings": {"load_s": t.load_s, "prompt_n": t.prompt_tokens, "prompt_s": t.prompt_s,
                              "prompt_tps": t.prompt_tps, "gen_n": t.gen_tokens, "gen_s": t.gen_s,
                              "gen_tps": t.gen_tps}}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write("\n")
    if not quiet:
        click.echo(f"load {t.load_s:.2f} s | prompt {t.prompt_tokens} tok, {t.prompt_tps:.1f} tok/s"
                   f" | gen {t.gen_tokens} tok, {t.gen_tps:.1f} tok/s | {model.n_threads} threads",
                   err=True)
    sys.stdout.flush()

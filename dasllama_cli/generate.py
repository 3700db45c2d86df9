"""`dasllama generate`: text from a GGUF LLM, streamed to stdout."""
import json
import os
import sys

import click

from dasllama.core import Constraint, SamplerParams, generate, load, prompt_ids
from dasllama.core.llm.conversation import Conversation

from .errors import user_errors
from .options import THREADS, FiniteFloat, check_encoding, complete_model_names, decode, model_name, std_stream


def read_prompt(prompt_arg, prompt_opt, file, encoding, chat=False):
    """The prompt from the argument, -p, -f FILE (or -f - for stdin), or piped stdin; a prompt
    given on the command line and piped stdin are joined, the prompt first, then a blank line
    (as simonw/llm does). None with --chat on a terminal: the interactive session."""
    given = [p for p in (prompt_arg, prompt_opt) if p is not None]
    for text, where in ((prompt_arg, "the prompt argument"), (prompt_opt, "-p")):
        if text is not None:
            check_encodable(text, where)
    if file is not None:
        given.append(decode(file.read(), encoding, f"-f {file.name}"))
    if len(given) > 1:
        raise click.UsageError("give the prompt once: as an argument, with -p, or with -f.")
    stdin = std_stream("rb")
    if file is not None or stdin.isatty():
        if given:
            return given[0]
        if chat:
            return None
        raise click.UsageError("no prompt: pass it as an argument, with -p TEXT, -f FILE, or on stdin.")
    piped = decode(stdin.read(), encoding, "stdin")
    if not given:
        return piped
    return f"{given[0]}\n\n{piped}" if piped else given[0]


def read_text_file(path, what):
    """The text of a file named by a flag, or one sentence on why it cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise click.ClickException(f"cannot read {what} {path}: {e.strerror or e}; check the path.") from None
    return decode(data, "utf-8", f"{what} {path}")


def read_schema(value):
    """--json-schema: the schema's JSON text inline, or a file holding it."""
    if value.lstrip().startswith(("{", "true", "false")):
        return value
    if not os.path.isfile(value):
        raise click.ClickException(f"--json-schema {value!r} is neither a JSON schema (it must "
                                   "start with '{') nor a readable file.")
    return read_text_file(value, "the JSON schema file")


def check_encodable(text, where):
    """Command-line text that was not UTF-8 reaches Python as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise click.ClickException(f"{where} is not valid UTF-8 text (at character {e.start}): "
                                   "put it in a file and pass -f FILE --encoding ENC.") from None


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
@click.option("-m", "--model", "model_path", type=click.Path(dir_okay=False), envvar="DASLLAMA_MODEL",
              callback=model_name("gguf"), shell_complete=complete_model_names("gguf"),
              help="GGUF model file, or a name `dasllama models` lists (default: $DASLLAMA_MODEL, else the "
                   "installed default model, Gemma 3 270M).")
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
@click.option("--chat", is_flag=True, help="Render the prompt through the model's chat template; "
              "with no prompt on a terminal, a multi-turn session (/exit, /clear).")
@click.option("--chat-template", "chat_template_file", type=click.Path(dir_okay=False),
              help="Jinja chat template FILE to use instead of the model's.")
@click.option("--grammar", "grammar_file", type=click.Path(dir_okay=False),
              help="Constrain the output to a llama.cpp GBNF grammar FILE.")
@click.option("--json-schema", help="Constrain the output to JSON valid against this schema "
              "(its JSON text, or a FILE holding it).")
@click.option("--stop", multiple=True, help="Stop when the text contains STRING, without it "
              "(repeatable).")
@click.option("-sys", "--system-prompt", help="System message for --chat.")
@click.option("--ignore-eos", is_flag=True, help="Keep generating past end-of-text tokens.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON record (text, token ids, timings) instead of streaming.")
@click.option("-q", "--quiet", is_flag=True, help="Nothing on stderr: no timing line, no first-run compile notice.")
def generate_cmd(prompt_arg, model_path, prompt_opt, file, encoding, n_predict, ctx_size, threads, batch_size,
                 temp, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed, chat,
                 chat_template_file, grammar_file, json_schema, stop, system_prompt, ignore_eos,
                 as_json, quiet):
    """Generate text from PROMPT with a GGUF model, streaming it to stdout."""
    prompt = read_prompt(prompt_arg, prompt_opt, file, encoding, chat)
    if system_prompt and not chat:
        raise click.UsageError("-sys/--system-prompt needs --chat.")
    if chat_template_file and not chat:
        raise click.UsageError("--chat-template needs --chat.")
    if grammar_file and json_schema:
        raise click.UsageError("give --grammar or --json-schema, not both.")
    template = read_text_file(chat_template_file, "the chat template") if chat_template_file else None
    grammar = read_text_file(grammar_file, "the grammar file") if grammar_file else None
    schema = read_schema(json_schema) if json_schema else None
    params = SamplerParams(temp=temp, top_k=top_k, top_p=top_p, min_p=min_p,
                           repeat_penalty=repeat_penalty, repeat_last_n=repeat_last_n,
                           seed=None if seed < 0 else seed).with_seed()
    if schema is not None:   # a schema that is not JSON fails before the model loads
        try:
            json.loads(schema)
        except ValueError as e:
            raise click.ClickException(f"the JSON schema is not valid JSON ({e}); check its "
                                       "quotes and brackets.") from None
    with user_errors():
        model = load(model_path, n_ctx=ctx_size or None, n_threads=threads, n_batch=batch_size,
                     quiet=quiet)
        ctx_source = click.get_current_context().get_parameter_source("ctx_size")
        if not quiet and ctx_source == click.core.ParameterSource.COMMANDLINE:
            warn_long_context(model)
        constraint = (Constraint.grammar(model.tokenizer, grammar) if grammar is not None else
                      Constraint.json_schema(model.tokenizer, schema) if schema is not None else None)
        options = dict(constraint=constraint, stop=stop, ignore_eos=ignore_eos)
        if prompt is None:
            chat_session(model, Conversation(model, system_prompt, template), n_predict, params,
                         options, as_json, quiet)
            return
        ids = prompt_ids(model, prompt, chat=chat, system=system_prompt, template=template)
        stream(generate(model, ids, n_predict, params, **options), model, lambda: ids, params,
               as_json, quiet)


def stream(tokens, model, prompt_of, params, as_json, quiet):
    """Write one generation to stdout as it comes (or as one --json record at its end), and
    the timing line to stderr; prompt_of() gives the prompt's ids once the tokens are out."""
    out = std_stream("w")
    pieces, token_ids, stop_reason = [], [], None
    for token in tokens:
        if token.id >= 0:
            token_ids.append(token.id)
        stop_reason = token.stop_reason or stop_reason
        pieces.append(token.text)
        if not as_json and token.text:
            out.write(token.text)
            out.flush()
    t = model.timings
    if as_json:
        record = {"model": model.path, "prompt_tokens": list(map(int, prompt_of())), "tokens": token_ids,
                  "text": "".join(pieces), "stop_reason": stop_reason, "seed": params.seed,
                  "timings": {"load_s": t.load_s, "prompt_n": t.prompt_tokens, "prompt_s": t.prompt_s,
                              "prompt_tps": t.prompt_tps, "gen_n": t.gen_tokens, "gen_s": t.gen_s,
                              "gen_tps": t.gen_tps}}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write("\n")
    out.flush()
    if not quiet:
        click.echo(f"load {t.load_s:.2f} s | prompt {t.prompt_tokens} tok, {t.prompt_tps:.1f} tok/s"
                   f" | gen {t.gen_tokens} tok, {t.gen_tps:.1f} tok/s | {model.n_threads} threads",
                   err=True)
    sys.stdout.flush()


def chat_session(model, conversation, n_predict, params, options, as_json, quiet):
    """Turns read from the terminal until /exit or end of input; /clear starts over. The KV
    cache is kept between turns, so each turn evaluates only its new tokens."""
    if not quiet:
        click.echo("dasllama chat: type a message; /clear starts over, /exit (or Ctrl-D) ends.",
                   err=True)
    stdin = std_stream("r")
    while True:
        click.echo("> ", nl=False, err=True)
        line = stdin.readline()
        if not line or line.strip() == "/exit":
            return
        text = line.strip()
        if text == "/clear":
            conversation.clear()
            if not quiet:
                click.echo("(conversation cleared)", err=True)
            continue
        if not text:
            continue
        constraint = options["constraint"]
        if constraint is not None:
            constraint.reset()
        turn = conversation.say(text, n_predict, params, **options)
        stream(turn, model, lambda: conversation.ids, params, as_json, quiet)

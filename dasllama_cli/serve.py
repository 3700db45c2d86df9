"""`dasllama serve`: one resident model behind an OpenAI-compatible HTTP API (llama-server's flags)."""
import errno
import os
import signal
import socket
from pathlib import Path

import click

from .errors import user_errors
from .options import THREADS, complete_model_names, model_name


def check_port(host, port):
    """Fail before loading anything when the address cannot be bound."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        why = "is in use" if e.errno == errno.EADDRINUSE else f"cannot be bound ({e.strerror})"
        raise click.ClickException(f"{host}:{port} {why}: pick another --port or --host.") from None


@click.command()
@click.option("-m", "--model", "model_path", type=click.Path(dir_okay=False), envvar="DASLLAMA_MODEL",
              callback=model_name("gguf"), shell_complete=complete_model_names("gguf"),
              help="GGUF model file, or a name `dasllama models` lists (default: $DASLLAMA_MODEL, else the "
                   "installed default model).")
@click.option("-a", "--model-alias", help="The model's name in the API (default: the file's name).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="Port.")
@click.option("-t", "--threads", type=THREADS, default=None, help="Threads (default: all cores).")
@click.option("-c", "--ctx-size", default=4096, show_default=True, type=click.IntRange(0),
              help="Context size in tokens, shared by the parallel sequences as llama-server "
                   "shares it (each gets c/np; 0: the model's training context).")
@click.option("-np", "--parallel", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Sequences decoded together, each with its own KV cache.")
@click.option("-b", "--batch-size", default=512, show_default=True, type=click.IntRange(1),
              help="Prompt tokens per forward pass.")
@click.option("--queue", "max_queue", default=64, show_default=True, type=click.IntRange(0),
              help="Requests that may wait for a free sequence; beyond them, 503 Retry-After.")
@click.option("--api-key", envvar="DASLLAMA_API_KEY", help="Require 'Authorization: Bearer KEY' "
              "(also $DASLLAMA_API_KEY).")
@click.option("--cors", "cors", multiple=True, metavar="ORIGIN",
              help="Allow browser requests from ORIGIN ('*' for any); off by default. Repeatable.")
@click.option("--embeddings/--no-embeddings", default=True, show_default=True,
              help="Serve /v1/embeddings (mean-pooled, normalised, as llama.cpp's --embeddings).")
@click.option("--whisper-model", type=click.Path(exists=True),
              help="A Whisper model (faster-whisper dir or whisper.cpp .bin) for /v1/audio/transcriptions.")
@click.option("--voice-model", type=click.Path(exists=True, dir_okay=False),
              help="A Piper voice (.onnx, .onnx.json beside it) for /v1/audio/speech.")
@click.option("--max-body", default=25 << 20, show_default=True, type=click.IntRange(1),
              help="Largest request body in bytes (413 beyond).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
def serve_cmd(model_path, model_alias, host, port, threads, ctx_size, parallel, batch_size, max_queue,
              api_key, cors, embeddings, whisper_model, voice_model, max_body, quiet):
    """Serve a model over the OpenAI API: /v1/chat/completions, /v1/completions,
    /v1/embeddings, /v1/audio/transcriptions, /v1/audio/speech, /v1/models, /health."""
    import uvicorn

    from dasllama.core import load
    from dasllama.core.serve.app import Server, create_app
    from dasllama.core.serve.engine import Engine

    check_port(host, port)
    n_ctx = ctx_size // parallel if ctx_size else None
    if n_ctx is not None and n_ctx < 16:
        raise click.BadParameter(f"-c {ctx_size} over -np {parallel} leaves {n_ctx} tokens a sequence; "
                                 "raise -c.", param_hint="-c")
    with user_errors():
        model = load(model_path, n_ctx=n_ctx, n_threads=threads, n_batch=batch_size, quiet=quiet)
        transcriber = speaker = None
        if whisper_model:
            from dasllama.core.serve.audio import Transcriber
            transcriber = Transcriber(whisper_model, n_threads=threads)
        if voice_model:
            from dasllama.core.serve.audio import Speaker
            speaker = Speaker(voice_model, n_threads=threads)
    alias = model_alias or Path(model.path).stem
    server = Server(engine=Engine(model, parallel, max_queue), alias=alias, transcriber=transcriber,
                    transcriber_alias=Path(whisper_model).name if whisper_model else "whisper-1",
                    speaker=speaker, speaker_alias=Path(voice_model).stem if voice_model else "tts-1",
                    api_key=api_key or None, cors=tuple(cors), max_body=max_body, embeddings=embeddings)
    if not quiet:
        click.echo(f"dasllama: serving {os.path.basename(model.path)} as '{alias}' on "
                   f"http://{host}:{port}/v1 ({parallel} sequence{'s' * (parallel > 1)} of "
                   f"{model.n_ctx} tokens, {model.n_threads} threads)", err=True)
    http = uvicorn.Server(uvicorn.Config(create_app(server), host=host, port=port,
                                         log_level="error" if quiet else "warning",
                                         timeout_graceful_shutdown=3))
    try:
        http.run()
    finally:
        server.engine.stop()
    if signal.SIGINT in getattr(http, "_captured_signals", ()):
        raise KeyboardInterrupt     # Ctrl-C: the shell's 130, as every other command

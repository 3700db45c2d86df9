"""`dasllama warmup`: compile a model's kernels into the numba cache now (a Docker build step,
an install script), so its first `generate` starts in seconds."""
import time

import click

from dasllama.core import load

from .errors import user_errors
from .options import complete_model_names, model_name


@click.command()
@click.option("-m", "--model", "model_path", type=click.Path(dir_okay=False), envvar="DASLLAMA_MODEL",
              callback=model_name("gguf"), shell_complete=complete_model_names("gguf"),
              help="GGUF model file, or a name `dasllama models` lists (default: $DASLLAMA_MODEL, else the "
                   "installed default model, Gemma 3 270M).")
def warmup_cmd(model_path):
    """Compile what a model runs (prompt and decode steps) into the numba cache, once per engine
    build and CPU: run it at image build time so the first `generate` does not compile."""
    start = time.perf_counter()
    with user_errors():
        model = load(model_path, n_ctx=64, n_threads=None)
        model.eval([0, 0])   # two tokens: the compiled step holds the prompt and decode kernels
    import numba
    click.echo(f"dasllama: warm in {time.perf_counter() - start:.0f} s; cached in {numba.config.CACHE_DIR}",
               err=True)

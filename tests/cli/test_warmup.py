"""`dasllama warmup`: it compiles the model's step in this process (so a later run loads it
from the cache), prints nothing on stdout, and a bad model path is one sentence."""
from pathlib import Path

import numba
from click.testing import CliRunner

from dasllama.core import Model
from dasllama_cli.main import cli


def test_warmup_compiles_the_step_and_keeps_stdout_empty(tiny_model):
    path = tiny_model("llama", "Q8_0")
    result = CliRunner().invoke(cli, ["warmup", "-m", str(path)])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "dasllama: warm in" in result.stderr
    step = Model(path, n_ctx=64, quiet=True).step     # the model's step (one per set of formats)
    assert step.forward.signatures      # compiled, in this process
    # and saved for the next: numba names the cache index after the step's qualified name
    name = step.forward.py_func.__qualname__
    assert any(Path(numba.config.CACHE_DIR).rglob(f"forward.{name}-*.nbi")), name


def test_warmup_of_a_missing_file_is_one_sentence(tmp_path):
    result = CliRunner().invoke(cli, ["warmup", "-m", str(tmp_path / "none.gguf")])
    assert result.exit_code != 0
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

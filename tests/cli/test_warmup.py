"""`dasllama warmup`: it compiles the model's step in this process (so a later run loads it
from the cache), prints nothing on stdout, and a bad model path is one sentence."""
from click.testing import CliRunner

from dasllama.core.llm import forward as fw
from dasllama_cli.main import cli


def test_warmup_compiles_the_step_and_keeps_stdout_empty(tiny_model):
    result = CliRunner().invoke(cli, ["warmup", "-m", str(tiny_model("llama", "Q8_0"))])
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    assert "dasllama: warm in" in result.stderr
    assert fw.forward.signatures        # the compiled step is there for the next call


def test_warmup_of_a_missing_file_is_one_sentence(tmp_path):
    result = CliRunner().invoke(cli, ["warmup", "-m", str(tmp_path / "none.gguf")])
    assert result.exit_code != 0
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

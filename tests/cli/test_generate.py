"""`dasllama generate` through click's CliRunner: stdout is the answer, stderr the rest, and every
user mistake a one-sentence error with a non-zero exit, never a traceback."""
import json
import struct

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from tests.gguf_factory import write_model
    return str(write_model(tmp_path_factory.mktemp("cli"), "llama", "Q8_0"))


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


def test_streams_answer_to_stdout_and_timing_to_stderr(model):
    r = run("generate", "-m", model, "-n", "8", "--temp", "0", "Hello world")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip(), "no text on stdout"
    assert "tok/s" not in r.stdout
    assert "tok/s" in r.stderr and "prompt" in r.stderr


def test_quiet_and_json(model):
    r = run("generate", "-m", model, "-n", "6", "--temp", "0", "--json", "-q", "Hello world")
    assert r.exit_code == 0, r.stderr
    assert r.stderr == ""
    rec = json.loads(r.stdout)
    assert len(rec["tokens"]) == 6 and rec["prompt_tokens"][0] == 1   # llama-spm BOS
    assert rec["timings"]["gen_n"] == 6 and rec["text"]


def test_greedy_is_deterministic_and_prompt_sources_agree(model, tmp_path):
    a = run("generate", "-m", model, "-n", "8", "--temp", "0", "-q", "Hello world")
    b = run("generate", "-m", model, "-n", "8", "--temp", "0", "-q", "-p", "Hello world")
    f = tmp_path / "p.txt"
    f.write_text("Hello world")
    c = run("generate", "-m", model, "-n", "8", "--temp", "0", "-q", "-f", str(f))
    d = run("generate", "-m", model, "-n", "8", "--temp", "0", "-q", input="Hello world")
    assert a.exit_code == b.exit_code == c.exit_code == d.exit_code == 0
    assert a.stdout == b.stdout == c.stdout == d.stdout


def test_seeded_sampling_reproduces(model):
    a = run("generate", "-m", model, "-n", "8", "-s", "7", "--temp", "1.5", "-q", "Hello")
    b = run("generate", "-m", model, "-n", "8", "-s", "7", "--temp", "1.5", "-q", "Hello")
    assert a.exit_code == 0 and a.stdout == b.stdout


def _error(r, *words):
    assert r.exit_code != 0
    assert "Traceback" not in r.output and r.exception is None or isinstance(r.exception, SystemExit)
    for w in words:
        assert w in r.stderr, r.stderr
    assert r.stdout == ""


def test_bad_files(tmp_path):
    lfs = tmp_path / "lfs.gguf"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    _error(run("generate", "-m", str(lfs), "hi"), "git-lfs pointer")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    _error(run("generate", "-m", str(empty), "hi"), "empty")
    ggjt = tmp_path / "old.bin"
    ggjt.write_bytes(struct.pack("<I", 0x67676A74) + b"\0" * 64)
    _error(run("generate", "-m", str(ggjt), "hi"), "pre-GGUF")
    _error(run("generate", "-m", str(tmp_path / "missing.gguf"), "hi"), "does not exist")


def test_truncated_model(model, tmp_path):
    data = open(model, "rb").read()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) // 2])
    _error(run("generate", "-m", str(cut), "hi"), "truncated")


def test_unknown_architecture(tmp_path):
    import gguf
    import numpy as np
    p = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(p), "mamba")
    w.add_tensor("x", np.zeros(32, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    _error(run("generate", "-m", str(p), "hi"), "'mamba' is not supported", "llama", "gemma3")


def test_prompt_longer_than_context(model):
    _error(run("generate", "-m", model, "-c", "16", " ".join(["word"] * 64)), "do not fit the context of 16")


def test_usage_errors(model):
    r = run("generate", "-m", model, "a", "-p", "b")
    assert r.exit_code == 2 and "once" in r.stderr
    r = run("generate", "-m", model, "-sys", "be brief", "hi")
    assert r.exit_code == 2 and "--chat" in r.stderr


def test_chat_on_a_base_model_explains(tmp_path_factory):
    from tests.gguf_factory import write_model
    path = write_model(tmp_path_factory.mktemp("cli2"), "gemma3", "F32")
    _error(run("generate", "-m", str(path), "--chat", "hi"), "chat template")

"""`dasllama serve`'s mistakes before it listens: one sentence, a non-zero exit, no traceback."""
import socket

from click.testing import CliRunner

from dasllama_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["serve", *map(str, args)])


def test_a_port_in_use_is_named_before_the_model_loads(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run("-m", tmp_path / "absent.gguf", "--port", port)
    assert r.exit_code == 1 and f"127.0.0.1:{port} is in use" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_missing_model_is_one_sentence(tmp_path):
    r = run("-m", tmp_path / "absent.gguf", "--port", 0)
    assert r.exit_code == 1 and "absent.gguf" in r.stderr and "Traceback" not in r.stderr


def test_a_context_too_small_for_the_sequences(tmp_path):
    r = run("-m", tmp_path / "absent.gguf", "--port", 0, "-c", 32, "-np", 4)
    assert r.exit_code == 2 and "-np 4 leaves 8 tokens" in r.stderr

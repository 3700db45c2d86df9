"""`dasllama verify --asr` against the real whisper.cpp (pywhispercpp): parity on tiny.en and the
clips, a divergence named by segment and token on a copy with one tensor changed, and bad
inputs as one-sentence errors with exit 2."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from dasllama.core.tools.ref_whisper import ggml_bin
from dasllama.formats import whisper_ggml
from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import or_skip

pytest.importorskip("pywhispercpp", reason="pip install pywhispercpp==1.5.1")


def run(*args):
    return CliRunner().invoke(cli, ["verify", *map(str, args)])


@pytest.fixture(scope="module")
def tiny(tiny_en_dir):
    return tiny_en_dir


@pytest.fixture(scope="module")
def clips():
    return [or_skip(whisper_assets.clip, n) for n in ("clone-test.wav", "beckett.wav")]


def scaled_copy(src, dst, tensor, factor):
    """A ggml .bin with every weight of one tensor multiplied by `factor`."""
    g = whisper_ggml.read(src)
    tensors = ((name, t.data * np.asarray(factor, t.data.dtype) if name == tensor else t.data)
               for name, t in g.tensors.items())
    return whisper_ggml.write(dst, g.hparams, g.mel_filters, g.tokens, tensors)


def _setup_error(r, *words):
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and r.stdout == ""
    for w in words:
        assert w in r.stderr, r.stderr


@pytest.mark.slow
def test_parity_on_tiny_en(tiny, clips):
    r = run("--asr", "-m", tiny, "-t", 2, *clips, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["verdict"] == "parity" and report["reference"]["pywhispercpp"] == "1.5.1"
    for clip in report["clips"]:
        assert clip["verdict"] == "parity" and clip["ids"] == clip["ref_ids"]
        assert clip["text"] == clip["ref_text"] and clip["divergence"] is None
    beckett = report["clips"][1]
    assert beckett["text"] == " Ever tried, ever failed. No matter, try again. Fail again. Fail better."
    assert len({seg for seg, *_ in beckett["ids"]}) == 4        # segments, with their start times
    assert [v for _, i, kind, v in beckett["ids"] if kind == "t0"] == [0, 300, 600, 800]

    text = run("-m", tiny, "-t", 2, "-nt", clips[0])           # a Whisper -m implies --asr
    assert text.exit_code == 0, text.stderr
    assert "parity over 12 tokens" in text.stdout and "1 parity of 1 clips (exit 0)" in text.stdout


@pytest.mark.slow
def test_perturbed_tensor_diverges_with_position_and_tokens(tiny, clips, tmp_path):
    original = ggml_bin(tiny)
    perturbed = scaled_copy(original, tmp_path / "tiny-perturbed.bin", "decoder.blocks.2.mlp.2.weight", 4.0)
    common = ["--asr", "-m", perturbed, "--ref-model", original, "-t", 2, clips[1]]
    r = run(*common, "--json")
    assert r.exit_code == 1, r.stdout + r.stderr
    (clip,) = json.loads(r.stdout)["clips"]
    div = clip["divergence"]
    assert clip["verdict"] == "divergence" and not div["near_tie"]
    n = clip["n_matched"]
    assert clip["ids"][:n] == clip["ref_ids"][:n] and clip["ids"][n:n + 1] != clip["ref_ids"][n:n + 1]
    where = (clip["ids"] + clip["ref_ids"])[n] if n < len(clip["ids"]) else clip["ref_ids"][n]
    assert [div["segment"], div["index"]] == where[:2]
    assert div["ours_id"] != div["ref_id"] and div["ours_gap"] is not None

    text = run(*common)
    assert text.exit_code == 1
    position = (f"segment {div['segment']} token {div['index']}" if div["index"] >= 0
                else f"start time of segment {div['segment']}")
    assert f"divergence at {position}" in text.stdout
    assert json.dumps(div["ours_text"]) in text.stdout and json.dumps(div["ref_text"]) in text.stdout
    assert "1 divergence of 1 clips (exit 1)" in text.stdout


def test_bad_inputs_exit_2_with_a_sentence(tiny, clips, tmp_path):
    _setup_error(run("--asr", "-m", tiny, tmp_path / "missing.wav"), "missing.wav", "no such file")
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"RIFF not really audio" * 50)
    _setup_error(run("--asr", "-m", tiny, junk), "cannot decode")
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF" + bytes(100))
    _setup_error(run("--asr", "-m", gguf, clips[0]), "GGUF file, not a whisper.cpp")
    _setup_error(run("--asr", "-m", tmp_path, clips[0]), "without model.bin")
    _setup_error(run("--asr", "-m", tiny, "-l", "de", clips[0]), "English-only")
    usage = run("--asr", "-m", tiny)
    assert usage.exit_code == 2 and "no audio" in usage.stderr


def test_missing_pywhispercpp_names_the_mend(tiny, clips, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pywhispercpp", None)
    _setup_error(run("--asr", "-m", tiny, clips[0]), "pip install pywhispercpp==1.5.1")

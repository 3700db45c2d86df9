"""`dasllama speak` through click's CliRunner: audio alone on stdout (WAV, or raw PCM with the
rate on stderr), text from the argument, a file or stdin, and bad input one sentence."""
import io
import wave

import numpy as np
import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import whisper_assets
from tests.assets import AssetUnavailable


@pytest.fixture(scope="module")
def voice():
    try:
        return str(whisper_assets.piper_voice())
    except AssetUnavailable as e:
        pytest.skip(str(e))


def run(*args, input=None):
    return CliRunner().invoke(cli, ["speak", *args], input=input)


def _error(r, words):
    assert r.exit_code != 0
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output and r.stdout_bytes == b""
    assert words in r.stderr


def _wav(data):
    with wave.open(io.BytesIO(data)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 22050)
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


@pytest.mark.slow
def test_wav_to_stdout_and_timings_to_stderr(voice):
    r = run("-m", voice, "-t", "2", "--noise-scale", "0", "--noise-w", "0", "Hello there.")
    assert r.exit_code == 0, r.stderr
    samples = _wav(r.stdout_bytes)
    assert len(samples) > 22050 // 4 and np.abs(samples).max() > 30000
    assert "real-time factor" in r.stderr


@pytest.mark.slow
def test_stdin_lines_to_raw_pcm_with_silence_and_a_wav_file(voice, tmp_path):
    quiet = ("--noise-scale", "0", "--noise-w", "0", "-q")
    r = run("-m", voice, "--output-raw", *quiet, "--sentence-silence", "0.5", input="One. Two.\n\nThree.\n")
    assert r.exit_code == 0, r.stderr
    assert "22050" in r.stderr
    raw = np.frombuffer(r.stdout_bytes, np.int16)
    plain = np.frombuffer(run("-m", voice, "--output-raw", *quiet, input="One. Two.\n\nThree.\n").stdout_bytes, np.int16)
    # piper's placement: between the sentences of a line, none after the last or across lines
    assert len(raw) - len(plain) == 11025 and raw.any()
    silent = np.flatnonzero(np.diff(np.flatnonzero(raw)) > 11025)
    assert silent.size == 1
    out = tmp_path / "out.wav"
    r = run("-m", voice, *quiet, "-o", str(out), "--speed", "2", "One.")
    assert r.exit_code == 0 and r.stdout_bytes == b""
    fast = _wav(out.read_bytes())
    slow = run("-m", voice, *quiet, "--length-scale", "1.0", "One.")
    assert len(fast) < len(_wav(slow.stdout_bytes))


def test_bad_input_is_one_sentence(voice, tmp_path):
    _error(run("-m", voice, "   "), "no text to speak")
    _error(run("-m", voice, input=""), "no text to speak")
    wrong = tmp_path / "voice.onnx"
    wrong.write_bytes(b"RIFF" + bytes(60))
    _error(run("-m", str(wrong), "hi"), "is an audio file, not an ONNX model")
    lone = tmp_path / "lone.onnx"
    lone.symlink_to(voice)
    _error(run("-m", str(lone), "hi"), "lone.onnx.json")
    _error(run("-m", voice, "-s", "3", "hi"), "single speaker")
    _error(run("-m", str(tmp_path), "hi"), "holds 2 voices (lone.onnx, voice.onnx)")
    wrong.unlink()
    _error(run("-m", str(tmp_path), "hi"), "lone.onnx.json")        # a folder's one voice is read
    empty = tmp_path / "empty"
    empty.mkdir()
    _error(run("-m", str(empty), "hi"), "no .onnx voice in it")


def test_unreadable_text_is_one_sentence_and_its_encoding_a_flag(voice, tmp_path):
    latin = tmp_path / "latin.txt"
    latin.write_bytes("Caf\u00e9.\n".encode("latin-1"))
    _error(run("-m", voice, "-f", str(latin)), "not valid utf-8 text (byte 0xe9 at offset 3)")
    _error(run("-m", voice, input="Caf\u00e9.\n".encode("latin-1")), "stdin is not valid utf-8")
    _error(run("-m", voice, "-f", str(tmp_path / "missing.txt")), "No such file")
    _error(run("-m", voice, "-f", str(tmp_path)), "Is a directory")
    _error(run("-m", voice, "--encoding", "klingon", "hi"), "not a text encoding")
    quiet = ("-q", "--output-raw", "--noise-scale", "0", "--noise-w", "0")
    r = run("-m", voice, *quiet, "-f", str(latin), "--encoding", "latin-1")
    assert r.exit_code == 0 and r.stdout_bytes, r.stderr
    assert r.stdout_bytes == run("-m", voice, *quiet, "Caf\u00e9.").stdout_bytes    # the same text


@pytest.mark.slow
def test_json_input_lines_and_rate(voice, tmp_path):
    own = tmp_path / "own.wav"
    lines = '{"text": "One."}\n{"text": "Two.", "output_file": "%s"}\n{"text": "Three."}\n' % own
    quiet = ("--noise-scale", "0", "--noise-w", "0", "-q")
    r = run("-m", voice, "--json-input", *quiet, input=lines)
    assert r.exit_code == 0, r.stderr
    both = _wav(r.stdout_bytes)                     # lines 1 and 3 on stdout, line 2 in its file
    alone = _wav(run("-m", voice, *quiet, "One.").stdout_bytes)
    assert len(_wav(own.read_bytes())) > 0 and len(both) > len(alone)
    r = run("-m", voice, *quiet, "--rate", "16000", "One.")
    with wave.open(io.BytesIO(r.stdout_bytes)) as w:
        assert w.getframerate() == 16000
        assert abs(w.getnframes() - len(alone) * 16000 / 22050) <= 2
    _error(run("-m", voice, "--json-input", input='{"txt": "hi"}\n'), 'line 1 has no "text"')
    _error(run("-m", voice, "--json-input", input="hi\n"), "line 1 is not JSON")

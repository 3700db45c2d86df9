"""Every bad input a hostile user can give gets one sentence and a non-zero exit, never a
traceback, and nothing is lost (issue 21): Ctrl-C and a closed pipe end as a shell expects,
corrupt or foreign model files are named, out-of-range flags are refused, text that is not
UTF-8 is located, audio that decodes to nothing useful is told apart, tuning sidecars that
are refused say so once. Tiny models from tests/gguf_factory.py; the few subprocess cases are
the ones that need a real process (signals, pipes, import-time warnings)."""
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
import soundfile
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import gguf_factory, whisper_assets
from tests.assets import AssetUnavailable

DASLLAMA = [sys.executable, "-m", "dasllama_cli.main"]


# --- fixtures and helpers ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("bad-input")


@pytest.fixture(scope="module")
def model(root):
    """A tiny llama with a 265-token vocab: the file is small, so corrupting copies is cheap."""
    vocab = gguf_factory.write_tiny_vocab(root / "ggml-vocab-tiny.gguf")
    return gguf_factory.write_model(root / "models", "llama", "Q8_0", n_embd=64, n_ff=128,
                                    n_head=2, n_head_kv=1, vocab_from=vocab)


@pytest.fixture(scope="module")
def whisper_model(tiny_en_dir):
    return tiny_en_dir


@pytest.fixture(scope="module")
def whisper_bin(whisper_model):
    try:
        return whisper_assets.ggml_bin(whisper_model)
    except AssetUnavailable as e:
        pytest.skip(str(e))


def run(*args, input=None, env=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, env=env)


def refused(r, *words, code=None):
    """The command failed with its sentence on stderr, no traceback, nothing on stdout."""
    assert r.exit_code != 0 if code is None else r.exit_code == code, (r.exit_code, r.output)
    assert isinstance(r.exception, (SystemExit, type(None))), r.exception
    assert "Traceback" not in r.output, r.output
    for w in words:
        assert w in r.stderr, r.stderr
    assert r.stdout == ""


def write_gguf(path, build):
    w = gguf.GGUFWriter(str(path), "llama")
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def gguf_header(n_tensors, n_kv):
    return b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv)


def gguf_string(text):
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


# --- 1. Ctrl-C, a closed pipe, and a bug of ours ----------------------------------------------

def test_ctrl_c_exits_130_and_keeps_the_text_streamed(model, monkeypatch):
    from dasllama.core import Token

    def interrupted(*_args, **_kwargs):
        yield Token(5, "once ")
        yield Token(6, "upon")
        raise KeyboardInterrupt

    monkeypatch.setattr("dasllama_cli.generate.generate", interrupted)
    r = run("generate", "-m", model, "hi")
    assert r.exit_code == 130, r.output
    assert r.stdout == "once upon" and "Traceback" not in r.output and "Aborted" not in r.output
    assert "interrupted" in r.stderr


def test_ctrl_c_in_a_real_process(model):
    """SIGINT to a running `generate`: 130, the tokens so far on stdout, no traceback."""
    proc = subprocess.Popen([*DASLLAMA, "generate", "-m", model, "-n", "100000", "-c", "100000",
                             "--ignore-eos", "hello"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.set_blocking(proc.stdout.fileno(), True)
    first = proc.stdout.read(1)       # it streams: interrupt only once text has come
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err.decode()
    assert first and len(first + out) > 1
    assert b"Traceback" not in err and b"interrupted" in err


def test_a_closed_pipe_ends_quietly_as_yes_does(model):
    cmd = (f"{' '.join(DASLLAMA)} generate -m {model} -n 300 --ignore-eos -q hello 2>err.txt "
           "| head -c 10 >/dev/null; echo ${PIPESTATUS[0]}")
    cwd = Path(model).parent
    done = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=600)
    yes = subprocess.run(["bash", "-c", "yes | head -c 10 >/dev/null; echo ${PIPESTATUS[0]}"],
                         capture_output=True, text=True)
    assert done.stdout.strip() == yes.stdout.strip() == "141"
    assert (cwd / "err.txt").read_text() == ""


def test_a_bug_of_ours_shows_its_traceback_and_asks_for_a_report(model, monkeypatch):
    def broken(*_args, **_kwargs):
        raise RuntimeError("an internal slip")

    monkeypatch.setattr("dasllama_cli.generate.prompt_ids", broken)
    r = run("generate", "-m", model, "hi")
    assert r.exit_code == 1
    assert "Traceback" in r.stderr and "an internal slip" in r.stderr
    assert "bug in dasllama" in r.stderr and "report" in r.stderr


def test_transcribe_output_file_is_whole_or_absent(tmp_path, monkeypatch):
    """A Ctrl-C while a transcript is written leaves neither the file nor its temporary."""
    from dasllama_cli import transcribe

    def interrupted(self, target):
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        transcribe.write_whole(tmp_path / "clip.txt", "a transcript\n")
    assert list(tmp_path.iterdir()) == []


# --- 3. GGUF metadata the reader must distrust ------------------------------------------------

@pytest.mark.parametrize("alignment, words", [(0, "not a power of two"), (3, "not a power of two"),
                                              (48, "not a power of two")])
def test_gguf_alignment_that_is_not_a_power_of_two(tmp_path, alignment, words):
    def build(w):
        w.add_uint32("general.alignment", alignment)
        w.add_tensor("a.weight", np.zeros((2, 32), np.float32))

    path = write_gguf(tmp_path / "align.gguf", build)
    refused(run("generate", "-m", path, "hi"), words, "general.alignment")


def test_gguf_arrays_nested_200000_deep(tmp_path):
    depth = 200_000
    nest = struct.pack("<IQ", gguf.GGUFValueType.ARRAY, 1) * depth
    body = gguf_string("x") + struct.pack("<I", gguf.GGUFValueType.ARRAY) + nest \
        + struct.pack("<IQ", gguf.GGUFValueType.UINT8, 0)
    path = tmp_path / "deep.gguf"
    path.write_bytes(gguf_header(0, 1) + body)
    refused(run("generate", "-m", path, "hi"), "nests more than", "corrupt")


@pytest.mark.parametrize("body, what", [
    (gguf_header(0, 1 << 40), "metadata keys"),
    (gguf_header(1 << 40, 0), "tensors"),
    (gguf_header(0, 1) + struct.pack("<Q", 1 << 60) + b"xx", "string bytes"),
    (gguf_header(0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 6, 1 << 50), "array items"),
    (gguf_header(0, 1) + gguf_string("k") + struct.pack("<IIQ", 9, 8, 1 << 50), "strings"),
])
def test_gguf_counts_that_cannot_fit_the_file_are_impossible(tmp_path, body, what):
    path = tmp_path / "count.gguf"
    path.write_bytes(body + b"\0" * 64)
    r = run("generate", "-m", path, "hi")
    refused(r, "impossible count", what)
    assert "download" not in r.stderr    # corrupt by construction: a re-download will not mend it


def test_gguf_without_a_vocabulary(model, tmp_path):
    data = Path(model).read_bytes()
    assert data.count(b"tokenizer.ggml.tokens") == 1
    path = tmp_path / "novocab.gguf"
    path.write_bytes(data.replace(b"tokenizer.ggml.tokens", b"tokenizer.ggml.tokenz"))
    refused(run("generate", "-m", path, "hi"), "no vocabulary", "tokenizer.ggml.tokens")


def test_gguf_with_an_impossible_block_count(model, tmp_path):
    """A bit flip in block_count once sized the weight tables by 33 million layers."""
    from dasllama.formats.gguf import open_gguf
    g = open_gguf(model)
    n_layer = g.metadata["llama.block_count"]
    key = gguf_string("llama.block_count") + struct.pack("<I", gguf.GGUFValueType.UINT32)
    data = Path(model).read_bytes()
    at = data.index(key) + len(key)
    assert struct.unpack_from("<I", data, at)[0] == n_layer
    path = tmp_path / "layers.gguf"
    path.write_bytes(data[:at] + struct.pack("<I", 33554434) + data[at + 4:])
    refused(run("generate", "-m", path, "hi"), "block_count 33554434", "corrupt")


def test_gguf_weight_that_contradicts_the_hyper_parameters(model, tmp_path):
    key = gguf_string("llama.embedding_length") + struct.pack("<I", gguf.GGUFValueType.UINT32)
    data = Path(model).read_bytes()
    at = data.index(key) + len(key)
    path = tmp_path / "shape.gguf"
    path.write_bytes(data[:at] + struct.pack("<I", 96) + data[at + 4:])
    refused(run("generate", "-m", path, "hi"), "contradict", "corrupt")


# --- 4. numbers out of range ------------------------------------------------------------------

@pytest.mark.parametrize("flag, value", [
    ("-c", "-5"), ("-b", "0"), ("-b", "-1"), ("-n", "-2"), ("-t", "0"), ("-t", "1000"),
    ("--temp", "-1"), ("--temp", "nan"), ("--temp", "inf"), ("--top-p", "2"), ("--top-p", "nan"),
    ("--top-k", "-3"), ("--min-p", "-0.1"), ("--min-p", "1.5"), ("--repeat-penalty", "0"),
    ("--repeat-penalty", "inf"), ("--repeat-last-n", "-2"), ("-s", "-2"), ("-s", str(2**40)),
])
def test_generate_flags_out_of_range(model, flag, value):
    refused(run("generate", "-m", model, flag, value, "hi"), f"Invalid value for '{flag}",
            value if value.lstrip("-").isdigit() else "", code=2)


@pytest.mark.parametrize("args, flag", [
    (("verify", "-n", "0"), "-n"), (("verify", "-c", "0"), "-c"), (("verify", "-t", "0"), "-t"),
    (("verify", "--tie-gap", "nan"), "--tie-gap"), (("verify", "--drift-bound", "0"), "--drift-bound"),
    (("bench", "-r", "0"), "-r"), (("bench", "-t", "0"), "-t"), (("bench", "--wait-idle", "inf"), "--wait-idle"),
    (("bench", "-p", "-4"), "-p"), (("tune", "--budget", "0"), "--budget"),
    (("tune", "--budget", "nan"), "--budget"), (("tune", "-t", "0"), "-t"),
    (("transcribe", "-t", "0"), "-t"),
])
def test_other_subcommands_flags_out_of_range(args, flag):
    refused(run(*args), f"Invalid value for '{flag}", code=2)


def test_context_above_the_training_context_warns_with_the_kv_cache_size(model):
    r = run("generate", "-m", model, "-c", "3000", "-n", "1", "--temp", "0", "hi")
    assert r.exit_code == 0, r.output
    assert "larger than the 2048 tokens the model was trained on" in r.stderr
    assert "KV cache takes" in r.stderr and "MiB" in r.stderr
    quiet_default = run("generate", "-m", model, "-n", "1", "--temp", "0", "hi")
    assert "trained on" not in quiet_default.stderr    # the default -c is not the user's choice


def test_context_whose_kv_cache_exceeds_ram_is_refused(model):
    refused(run("generate", "-m", model, "-c", str(10**9), "hi"), "KV cache", "lower -c")


# --- 2. text that is not UTF-8 ----------------------------------------------------------------

def test_prompt_file_that_is_not_utf8_names_the_offset_and_the_flag(model, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes("café au lait".encode("latin-1"))
    refused(run("generate", "-m", model, "-f", f), "not valid utf-8", "offset 3", "--encoding")
    r = run("generate", "-m", model, "-f", f, "--encoding", "latin-1", "-n", "1", "--temp", "0", "-q")
    assert r.exit_code == 0, r.output


def test_binary_stdin_names_the_offset(model):
    refused(run("generate", "-m", model, input=b"ok\xff\xfe\x00"), "stdin", "offset 2", "--encoding")


def test_unknown_encoding(model):
    refused(run("generate", "-m", model, "--encoding", "klingon", "hi"), "not a text encoding", code=2)


# --- 5. every Whisper reader against the GGUF reader's list of bad files ----------------------

def bad_model_files(tmp_path, whisper_bin):
    """(name, path, words) for each bad file a transcribe -m can be given."""
    lfs = tmp_path / "lfs.bin"
    lfs.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 1\n")
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    html = tmp_path / "page.bin"
    html.write_text("<!DOCTYPE html><html><body>Sign in</body></html>")
    foreign = tmp_path / "foreign.bin"
    foreign.write_bytes(b"\x7fELF" + b"\0" * 100)
    emptydir = tmp_path / "emptydir"
    emptydir.mkdir()
    ct2_empty = tmp_path / "ct2-empty"
    ct2_empty.mkdir()
    (ct2_empty / "model.bin").write_bytes(b"")
    ct2_lfs = tmp_path / "ct2-lfs"
    ct2_lfs.mkdir()
    (ct2_lfs / "model.bin").write_text(lfs.read_text())
    cases = [("empty", empty, "empty"), ("lfs", lfs, "git-lfs pointer"), ("html", html, "HTML page"),
             ("foreign", foreign, "not a whisper.cpp ggml model"),
             ("directory", emptydir, "directory without model.bin"),
             ("ct2 empty", ct2_empty, "empty"), ("ct2 lfs", ct2_lfs, "git-lfs pointer"),
             ("missing", tmp_path / "nothing.bin", "no such file")]
    if whisper_bin is not None:
        data = Path(whisper_bin).read_bytes()
        cut = tmp_path / "cut.bin"
        cut.write_bytes(data[:len(data) // 2])
        short = tmp_path / "short.bin"
        short.write_bytes(data[:30])
        cases += [("truncated", cut, "truncated"), ("short", short, "truncated")]
    return cases


def test_transcribe_bad_model_files(tmp_path, whisper_bin):
    clip = tmp_path / "a.wav"
    soundfile.write(clip, np.zeros(16000, np.float32), 16000)
    for name, path, words in bad_model_files(tmp_path, whisper_bin):
        r = run("transcribe", "-m", path, clip)
        refused(r, words)


def test_transcribe_truncated_ct2(tmp_path, whisper_model):
    d = tmp_path / "ct2-cut"
    d.mkdir()
    (d / "model.bin").write_bytes((Path(whisper_model) / "model.bin").read_bytes()[:5000])
    clip = tmp_path / "a.wav"
    soundfile.write(clip, np.zeros(16000, np.float32), 16000)
    refused(run("transcribe", "-m", d, clip), "truncated CTranslate2 model")


def test_a_gguf_llm_given_to_transcribe(model, tmp_path):
    clip = tmp_path / "a.wav"
    soundfile.write(clip, np.zeros(16000, np.float32), 16000)
    refused(run("transcribe", "-m", model, clip), "GGUF file, not a whisper.cpp", "dasllama generate")


def test_a_whisper_model_given_to_generate(whisper_bin, whisper_model):
    refused(run("generate", "-m", whisper_bin, "hi"), "whisper.cpp speech model", "transcribe")
    refused(run("generate", "-m", Path(whisper_model) / "model.bin", "hi"),
            "faster-whisper", "transcribe")


# --- 7. audio that decodes to nothing useful --------------------------------------------------

@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_samples_are_an_error(tmp_path, bad, whisper_model):
    x = np.zeros(32000, np.float32)
    x[100] = bad
    clip = tmp_path / "bad.wav"
    soundfile.write(clip, x, 16000, subtype="FLOAT")
    refused(run("transcribe", "-m", whisper_model, "-q", clip), "NaN or infinite samples")


def test_short_and_empty_clips_warn(tmp_path, whisper_model):
    short = tmp_path / "short.wav"
    soundfile.write(short, np.zeros(4000, np.float32), 16000)
    nodata = tmp_path / "nodata.wav"
    soundfile.write(nodata, np.zeros(0, np.float32), 16000)
    r = run("transcribe", "-m", whisper_model, "-q", short, nodata)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert "short.wav is only 0.25 s long" in r.stderr
    assert "nodata.wav holds no audio samples" in r.stderr


# --- 8. tune sidecar refusals -----------------------------------------------------------------

def test_a_refused_sidecar_is_one_line_once(tmp_path):
    (tmp_path / "tune.json").mkdir()      # a directory where the sidecar should be
    env = {**os.environ, "DASLLAMA_CONFIG": str(tmp_path)}
    done = subprocess.run([*DASLLAMA, "tune", "--show"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "tune.json" in line]
    assert lines == [f"dasllama: tune sidecar {tmp_path / 'tune.json'} ignored: it is a "
                     "directory, not a file"], done.stderr
    assert "Warning" not in done.stderr and ".py:" not in done.stderr


# --- 6 and 9. verify and tune on a model the engine cannot run --------------------------------

def test_tune_show_on_a_model_the_engine_cannot_run(tmp_path):
    def build(w):
        w.add_tensor("a.weight", np.zeros((2, 32), np.float32))
    unknown = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(unknown), "mamba")
    build(w)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    refused(run("tune", "--show", "-m", unknown), "'mamba' is not supported")
    lacking = write_gguf(tmp_path / "lacking.gguf", build)     # llama without its keys
    refused(run("tune", "--show", "-m", lacking), "lacks the required key")


def test_verify_names_a_bad_model_before_looking_for_llama_cpp(tmp_path):
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    refused(run("verify", "-m", empty, env={"PATH": "/nonexistent"}), "is empty", code=2)


# --- found beyond the list ------------------------------------------------------------

def test_bench_receipt_in_a_missing_directory_is_refused_before_the_run(tmp_path):
    refused(run("bench", "--receipt", tmp_path / "no" / "r.json"), "does not exist", code=2)


def test_tune_reset_with_a_directory_for_a_sidecar(tmp_path):
    (tmp_path / "tune.json").mkdir()
    refused(run("tune", "--reset", env={"DASLLAMA_CONFIG": str(tmp_path)}), "is a directory")


def test_a_directory_given_as_audio(tmp_path, whisper_model):
    refused(run("transcribe", "-m", whisper_model, "-q", tmp_path), "is a directory, not an audio file")


def test_a_prompt_argument_that_is_not_utf8(model):
    refused(run("generate", "-m", model, "caf\udce9"), "not valid UTF-8", "--encoding")


@pytest.mark.parametrize("kv, words", [
    (gguf_string("general.architecture") + struct.pack("<II", gguf.GGUFValueType.UINT32, 7), "a number"),
    (b"", "names no general.architecture"),
])
def test_an_architecture_that_is_missing_or_not_a_name(tmp_path, kv, words):
    path = tmp_path / "arch.gguf"
    path.write_bytes(gguf_header(0, 1 if kv else 0) + kv + b"\0" * 32)
    refused(run("generate", "-m", path, "hi"), words)


def test_a_whisper_bin_without_the_byte_tokens(tmp_path):
    from dasllama.formats import whisper_ggml
    from tests.formats.test_fuzz_whisper import HPARAMS
    path = whisper_ggml.write(tmp_path / "ggml-tiny.bin", HPARAMS, np.zeros((80, 201), np.float32),
                              [b"a", b"bc"], [("x.weight", np.ones((4, 8), np.float16))])
    clip = tmp_path / "a.wav"
    soundfile.write(clip, np.zeros(16000, np.float32), 16000)
    refused(run("transcribe", "-m", path, clip), "lacks 255 of the 256 byte tokens")

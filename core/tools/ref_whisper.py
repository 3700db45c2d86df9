"""The Whisper reference engine, whisper.cpp, through pywhispercpp's bindings: finding it, giving
it the same weights as ours (a CT2 dir converted once to a ggml .bin in the cache dir), and
running its greedy decoding on the samples we decode.

whisper.cpp runs in a worker process (this file run as a script) that loads the model once and
then transcribes on request, so its threads, logs and crashes stay out of our process, and
`dasllama bench` can alternate the two engines without reloading either. Each transcription is
timed inside the worker around whisper_full alone (log-mel, encoder, decoder), as ours is
around `transcribe`: model loads are timed apart.
"""
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PYWHISPERCPP_VERSION = "1.5.1"
HOW_TO_GET = f"pip install pywhispercpp=={PYWHISPERCPP_VERSION}"


class WhisperCppError(RuntimeError):
    """whisper.cpp is missing or failed; the message is one sentence for the user."""


@dataclass
class RefSegment:
    t0: int                    # centiseconds from the start of the audio, as whisper.cpp counts
    t1: int
    text: str
    tokens: list               # ids whisper.cpp reports for the segment (no EOT)


@dataclass
class RefTranscript:
    segments: list
    language: str
    wall_s: float              # whisper_full's wall time

    @property
    def text(self):
        return "".join(s.text for s in self.segments)


def check_available():
    """Raise WhisperCppError naming the mend when pywhispercpp cannot be imported."""
    if importlib.util.find_spec("pywhispercpp") is None:
        raise WhisperCppError(f"whisper.cpp's Python bindings (pywhispercpp) are not installed: "
                              f"`{HOW_TO_GET}`.")


def converter_hash():
    """A hash of the sources that write a ggml .bin: a changed converter rebuilds its files."""
    from dasllama.formats import whisper_ggml

    from ..asr import model as whisper
    h = hashlib.sha256()
    for module in (whisper, whisper_ggml):
        h.update(Path(module.__file__).read_bytes())
    return h.hexdigest()[:10]


def ggml_bin(model_path, ftype="f16"):
    """A whisper.cpp .bin holding the weights of `model_path`: the file itself when it is one,
    else the CT2 dir converted by dasllama, kept in the cache dir under its model.bin's sha256."""
    from ..runtime.cache import cache_dir
    from .receipt import sha256_file
    from ..asr.model import WhisperModel, convert_ct2_to_ggml
    model_path = Path(model_path)
    probe = WhisperModel(model_path, weights=False)
    if probe.format == "ggml":
        return model_path
    ct2_dir = model_path if model_path.is_dir() else model_path.parent
    digest = sha256_file(ct2_dir / "model.bin")[:16]
    out_dir = cache_dir() / "whisper-ggml"
    out = out_dir / f"{probe.size_name}-{digest}-{ftype}-{converter_hash()}.bin"
    if not out.exists():
        out_dir.mkdir(parents=True, exist_ok=True)
        for stale in out_dir.glob(f"{probe.size_name}-{digest}-{ftype}-*.bin"):
            stale.unlink()
        convert_ct2_to_ggml(ct2_dir, out, ftype)
    return out


class WhisperCpp:
    """whisper.cpp with one model loaded, in a worker process; use as a context manager.

    Greedy only: temperature 0 with no fallback, whisper.cpp's non-speech tokens suppressed as
    openai-whisper's suppress list does, no prompt carried over from an earlier call.
    """

    def __init__(self, model_path, n_threads):
        check_available()
        self.model_path = Path(model_path)
        self._tmp = tempfile.TemporaryDirectory(prefix="dasllama-whispercpp-")
        self._log = open(Path(self._tmp.name) / "worker.log", "w+")
        self._worker = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, text=True)
        reply = self._ask({"model": os.fspath(self.model_path), "n_threads": n_threads})
        self.load_s = reply["load_s"]
        self.version = reply["version"]
        self.n_threads = n_threads

    def transcribe(self, samples, language=None, task="transcribe", timestamps=True):
        """RefTranscript of 16 kHz mono float32 samples (language None: detect)."""
        audio = Path(self._tmp.name) / "samples.npy"
        np.save(audio, np.asarray(samples, np.float32))
        params = {"language": language or "auto", "translate": task == "translate",
                  "no_timestamps": not timestamps}
        reply = self._ask({"audio": str(audio), "params": params})
        return RefTranscript([RefSegment(**s) for s in reply["segments"]], reply["language"],
                             reply["wall_s"])

    def describe(self):
        """What a receipt records about the reference."""
        return {"engine": "whisper.cpp", "bindings": f"pywhispercpp {self.version['pywhispercpp']}",
                "model": os.fspath(self.model_path), **self.version}

    def _ask(self, request):
        if self._worker.poll() is None:
            try:
                self._worker.stdin.write(json.dumps(request) + "\n")
                self._worker.stdin.flush()
                line = self._worker.stdout.readline()
            except BrokenPipeError:
                line = ""
        else:
            line = ""
        reply = json.loads(line) if line else {"error": self._last_log_line()}
        if "error" in reply:
            raise WhisperCppError(f"whisper.cpp failed on {self.model_path}: {reply['error']}")
        return reply

    def _last_log_line(self):
        self._worker.wait(timeout=10)
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        return lines[-1] if lines else f"its worker exited with status {self._worker.returncode}"

    def close(self):
        if self._worker.poll() is None:
            self._worker.stdin.close()
            self._worker.wait(timeout=30)
        self._log.close()
        self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# -- the worker: run as a script with pywhispercpp importable -------------------------------------


def _serve():
    """Load the model named by the first request, then answer each later one (a .npy of
    samples) with whisper.cpp's segments and the wall time of the transcription."""
    here = str(Path(__file__).resolve().parent)   # core/'s modules must not shadow others
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)                                 # anything whisper.cpp prints goes to the log
    import importlib.metadata

    import _pywhispercpp as pw
    from pywhispercpp.model import Model

    request = json.loads(sys.stdin.readline())
    path = request["model"]
    t0 = time.perf_counter()
    try:
        model = Model(path, redirect_whispercpp_logs_to=None, print_progress=False,
                      print_realtime=False, suppress_nst=True, temperature=0.0,
                      temperature_inc=0.0, no_context=True, n_threads=request["n_threads"])
    except Exception as e:                        # pywhispercpp raises plain Exceptions
        protocol.write(json.dumps({"error": str(e) or type(e).__name__}) + "\n")
        return
    if not model._ctx:
        protocol.write(json.dumps({"error": "whisper.cpp could not load the model"}) + "\n")
        return
    version = {"pywhispercpp": importlib.metadata.version("pywhispercpp"),
               "system_info": pw.whisper_print_system_info().strip(" |")}
    protocol.write(json.dumps({"load_s": time.perf_counter() - t0, "version": version}) + "\n")
    protocol.flush()
    ctx = model._ctx
    eot = pw.whisper_token_eot(ctx)
    for line in sys.stdin:
        request = json.loads(line)
        samples = np.load(request["audio"])
        t0 = time.perf_counter()
        model.transcribe(samples, **request["params"])
        wall = time.perf_counter() - t0
        segments = []
        for i in range(pw.whisper_full_n_segments(ctx)):
            ids = [pw.whisper_full_get_token_id(ctx, i, j) for j in range(pw.whisper_full_n_tokens(ctx, i))]
            segments.append({"t0": pw.whisper_full_get_segment_t0(ctx, i),
                             "t1": pw.whisper_full_get_segment_t1(ctx, i),
                             "text": pw.whisper_full_get_segment_text(ctx, i).decode("utf-8", "replace"),
                             "tokens": [t for t in ids if t != eot]})
        language = pw.whisper_lang_str(pw.whisper_full_lang_id(ctx))
        protocol.write(json.dumps({"segments": segments, "language": language, "wall_s": wall}) + "\n")
        protocol.flush()


if __name__ == "__main__":
    _serve()

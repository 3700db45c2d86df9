"""Timing our Piper voices against piper-tts (onnxruntime on the same .onnx) on the same text.

A sample is the wall time of speaking N sentences as one text, streamed sentence by sentence
(phonemes, network, the last chunk out), with the time to the first chunk (first-audio latency)
beside it. Both engines use espeak-ng's phonemes (piper-tts's own), so they run the same
phoneme ids; noise_w is 0 so both draw the same durations and speak the same seconds of audio
(the generator noise, which costs the same either way, stays at the voice's). Each engine
speaks once untimed first; then per repetition ours, then piper-tts's (A B A B), each taken on
a machine left idle by others as core/tools/bench_llm.py does.

Cold start is a fresh Python process that imports the engine, loads the voice and speaks the
first sentence (our compiled kernels come from numba's disk cache, as on any run after the
first). Warm start is the same in the bench process, the voice loaded.
"""
import json
import os
import subprocess
import sys
import time

from .bench_llm import IDLE_WAIT_S, summarize, take_sample
from ..tts import load_voice, synthesize

# Plain sentences of ~2-5 s each, numbers spelled out, the text N sentences are taken from.
SENTENCES = (
    "The quick brown fox jumps over the lazy dog, and then it runs back into the forest.",
    "My brother lives in a small house near the river with his four cats and one old dog.",
    "I have three sisters and one brother, and we all grew up on a farm.",
    "Please call me when you get home, so I know that you arrived safely.",
    "The train to the city leaves at seven in the morning from the north station.",
    "She opened the window and listened to the birds singing in the garden.",
    "We should plant more trees along the road before the summer comes.",
    "The old library has a reading room with tall windows and wooden tables.",
    "He forgot his umbrella at the office, so he walked home in the rain.",
    "A cup of hot tea is the best thing on a cold and windy afternoon.",
    "The children built a sand castle on the beach and watched the waves.",
    "Turn left at the bakery, and the museum is on your right.",
    "They painted the kitchen yellow because it gets very little light.",
    "Our neighbor grows tomatoes, beans and peppers in her back yard.",
    "The meeting was moved to Thursday because the manager was away.",
    "At night the sky was clear, and we could see thousands of stars.",
    "He plays the piano every evening after dinner for an hour.",
    "The bridge across the valley was finished after five long years.",
    "If you heat water to one hundred degrees, it begins to boil.",
    "The small boat drifted slowly toward the island in the fog.",
)
PHONEMIZER = "espeak"           # piper-tts's phonemes: both engines run the same ids

_COLD_OURS = """
import sys, time
t0 = time.perf_counter()
from dasllama.core.tts import load_voice, synthesize
voice = load_voice(sys.argv[1], n_threads=int(sys.argv[2]))
next(synthesize(sys.argv[3], voice, noise_w=0.0, phonemizer="espeak"))
print(time.perf_counter() - t0)
"""
_COLD_PIPER = """
import sys, time
t0 = time.perf_counter()
from dasllama.core.tools.bench_tts import load_piper
voice = load_piper(sys.argv[1], int(sys.argv[2]))
next(voice.synthesize(sys.argv[3], _piper_config()))
print(time.perf_counter() - t0)
""".replace("_piper_config()", "__import__('piper').SynthesisConfig(noise_w_scale=0.0)")


_COLD_KOKORO = """
import sys, time
t0 = time.perf_counter()
from dasllama.core.tools.bench_tts import load_kokoro_onnx, kokoro_onnx_stream
voice = load_kokoro_onnx(sys.argv[1], int(sys.argv[2]))
kokoro_onnx_stream(voice, sys.argv[3])
print(time.perf_counter() - t0)
"""


class KokoroOnnxVoice:
    """kokoro-onnx's Kokoro on the same .onnx and voice pack, its session held to n_threads."""

    def __init__(self, kokoro, voice_name):
        from types import SimpleNamespace
        self.kokoro, self.voice_name = kokoro, voice_name
        self.config = SimpleNamespace(sample_rate=24000)


def load_kokoro_onnx(path, n_threads):
    import onnxruntime
    from kokoro_onnx import Kokoro
    from ..tts.kokoro import _beside
    from pathlib import Path
    path = Path(path)
    voices = _beside(path, [f"{path.stem}.voices.npz", "voices*.npz", "voices*.bin"])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = n_threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    kokoro = Kokoro.from_session(session, str(voices))
    return KokoroOnnxVoice(kokoro, sorted(kokoro.get_voices())[0])


def kokoro_onnx_stream(voice, text):
    """kokoro-onnx speaking `text` sentence by sentence (its espeak phonemes), as ours streams."""
    import re
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text) if s]
    return _stream(voice.kokoro.create(s, voice=voice.voice_name, lang="en-us")[0] for s in sentences)


def load_piper(path, n_threads):
    """piper-tts's PiperVoice on `path` with onnxruntime held to n_threads (piper's own load
    leaves the session at onnxruntime's default, every core)."""
    import onnxruntime
    from piper import PiperVoice
    from piper.config import PiperConfig
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = n_threads
    options.inter_op_num_threads = 1
    with open(f"{path}.json", encoding="utf-8") as f:
        config = PiperConfig.from_dict(json.load(f))
    session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                           providers=["CPUExecutionProvider"])
    voice = PiperVoice(config=config, session=session)
    return voice


def reference_versions(ref="piper"):
    from importlib.metadata import version
    name = "kokoro-onnx" if ref == "kokoro-onnx" else "piper-tts"
    return {name: version(name), "onnxruntime": version("onnxruntime")}


def _stream(chunks):
    """(ns to the first chunk, ns to the last, samples) of consuming an audio iterator."""
    t0 = time.perf_counter_ns()
    first, n = None, 0
    for samples in chunks:
        first = first or time.perf_counter_ns() - t0
        n += len(samples)
    return first, time.perf_counter_ns() - t0, n


def ours_stream(voice, text):
    return _stream(s for _, s in synthesize(text, voice, noise_w=0.0, phonemizer=PHONEMIZER))


def piper_stream(voice, text):
    from piper import SynthesisConfig
    return _stream(c.audio_float_array for c in voice.synthesize(text, SynthesisConfig(noise_w_scale=0.0)))


def cold_start_s(engine, voice_path, n_threads, text):
    """Wall seconds of a fresh process: interpreter, import, load the voice, the first sentence."""
    code = {"dasllama": _COLD_OURS, "kokoro-onnx": _COLD_KOKORO}.get(engine, _COLD_PIPER)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, os.fspath(voice_path), str(n_threads), text],
                   check=True, capture_output=True)
    return time.perf_counter() - t0


def tts_record(engine, voice_path, n_threads, n_sentences, build, versions):
    return {"engine": engine, "build_commit": build["commit"], "cpu_info": build["cpu_info"],
            "backends": build["backends"], "versions": versions, "model_filename": os.fspath(voice_path),
            "model_size": os.path.getsize(voice_path), "n_threads": n_threads,
            "n_sentences": n_sentences, "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "samples_ns": [], "first_audio_ns": []}


def run_tts_bench(voice_path, n_threads, n_sentences, reps, build, ref=None, cold=True,
                  idle_wait=IDLE_WAIT_S, on_sample=None):
    """Records for ours (and piper-tts's when ref == "piper"), samples interleaved.

    build: {"commit", "cpu_info", "backends"}; on_sample(rep, ours (first_s, total_s),
    piper's or None) reports progress. avg_ts is seconds of audio per second of wall time,
    rtf its inverse; ratio (on ours) is piper-tts's wall time over ours."""
    text = " ".join((SENTENCES * (n_sentences // len(SENTENCES) + 1))[:n_sentences])
    engines = {"dasllama": (load_voice, ours_stream, {"dasllama": build["commit"]})}
    if ref == "piper":
        engines["piper-tts"] = (load_piper, piper_stream, reference_versions())
    elif ref == "kokoro-onnx":
        engines["kokoro-onnx"] = (load_kokoro_onnx, kokoro_onnx_stream, reference_versions(ref))
    records, voices = {}, {}
    for engine, (load, stream, versions) in engines.items():
        record = tts_record(engine, voice_path, n_threads, n_sentences,
                            build if engine == "dasllama" else {**build, "backends": "onnxruntime"},
                            versions)
        if cold:
            record["cold_start_s"] = cold_start_s(engine, voice_path, n_threads, SENTENCES[0])
        t0 = time.perf_counter()
        voices[engine] = voice = load(voice_path, n_threads=n_threads) if engine == "dasllama" \
            else load(voice_path, n_threads)
        record["load_s"] = time.perf_counter() - t0
        first, _, _ = stream(voice, SENTENCES[0])
        record["warm_start_s"] = first / 1e9          # the first sentence with the voice loaded
        _, _, n = stream(voice, text)                 # untimed: pages, caches, onnxruntime's arena
        record["audio_s"] = n / voice.config.sample_rate
        records[engine] = record
    for rep in range(reps):
        got = {}
        for engine, (_, stream, _) in engines.items():
            record = records[engine]
            firsts = []

            def measure():
                first, total, _ = stream(voices[engine], text)
                firsts.append(first)
                return total

            best = max((1e9 * record["audio_s"] / ns for ns in record["samples_ns"]), default=None)
            record["samples_ns"].append(take_sample(measure, best, record["audio_s"], idle_wait))
            record["first_audio_ns"].append(firsts[-1])
            got[engine] = (firsts[-1] / 1e9, record["samples_ns"][-1] / 1e9)
        if on_sample:
            on_sample(rep, got["dasllama"], got.get("piper-tts") or got.get("kokoro-onnx"))
    out = [_finish(r) for r in records.values()]
    if ref:
        out[0]["ratio"] = out[1]["avg_ns"] / out[0]["avg_ns"]
        out[0]["first_audio_ratio"] = out[1]["first_audio_s"] / out[0]["first_audio_s"]
    return out


def _finish(record):
    firsts = record.pop("first_audio_ns")
    summarize(record, record["audio_s"])
    samples = {k: record.pop(k) for k in ("samples_ns", "samples_ts")}
    record["rtf"] = record["avg_ns"] / 1e9 / record["audio_s"]
    record["first_audio_s"] = sum(firsts) / len(firsts) / 1e9
    record.update(samples, first_audio_ns=firsts)
    return record

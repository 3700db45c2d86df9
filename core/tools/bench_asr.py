"""Timing our Whisper against whisper.cpp on the same clips, weights and threads.

A sample is the wall time of one greedy transcription of a clip whose samples are already in
memory (log-mel, encoder and decoder; the model loaded before, its load timed apart). Each
engine transcribes every clip once untimed first (numba compiles, pages fault in). Then per
repetition and clip: ours, then whisper.cpp's (A B A B), each on a machine left idle by others
and taken again when visibly disturbed, as core/tools/bench_llm.py does for llama-bench.
"""
import os
import time
from functools import partial

from .bench_llm import IDLE_WAIT_S, summarize, take_sample
from ..asr.mel import SAMPLE_RATE
from ..asr.model import FTYPES
from ..asr.decode import transcribe

FTYPE_NAMES = {file_type: name.upper() for name, (file_type, _) in FTYPES.items()} | {0: "F32"}


def model_type(model):
    """'whisper tiny.en F16': family, size (.en for English-only) and weight type."""
    size = model.size_name + ("" if model.tokenizer.multilingual else ".en")
    return f"whisper {size} {FTYPE_NAMES.get(model.ftype, f'ftype {model.ftype}')}"


def model_bytes(path):
    """Bytes of the weights file (a CT2 dir's model.bin)."""
    return os.path.getsize(os.path.join(path, "model.bin") if os.path.isdir(path) else path)


def asr_record(engine, model_path, model, clip, samples, load_s, build):
    duration = len(samples) / SAMPLE_RATE
    return {
        "engine": engine, "build_commit": build["commit"], "cpu_info": build["cpu_info"],
        "backends": build["backends"], "model_filename": os.fspath(model_path),
        "model_type": model_type(model), "model_size": model_bytes(model_path),
        "n_threads": model.n_threads, "audio": os.fspath(clip), "audio_s": duration,
        "load_s": load_s, "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "samples_ns": [],
    }


def time_ours(model, samples, opts):
    t0 = time.perf_counter_ns()
    transcribe(model, samples, opts)
    return time.perf_counter_ns() - t0


def time_ref(ref, samples, opts, language):
    return int(ref.transcribe(samples, language, opts.task, opts.timestamps).wall_s * 1e9)


def run_asr_bench(model, clips, reps, opts, build, ref=None, language=None,
                  idle_wait=IDLE_WAIT_S, on_sample=None, on_retake=None):
    """Records per clip (ours, then whisper.cpp's when given), samples interleaved.

    clips: [(path, samples)]; build: {"commit", "cpu_info", "backends"}; ref: a WhisperCpp
    with the same weights loaded; language: what both engines are told (None: detect).
    on_sample(clip, rep, ours_s, ref_s or None) reports progress; on_retake(clip, engine, s,
    best_s) a disturbed sample taken again. avg_ts is seconds of audio per second of wall time
    (the inverse of the real-time factor, rtf); ratio is ours over whisper.cpp's in that speed.
    """
    for _, samples in clips:
        transcribe(model, samples, opts)
        if ref:
            time_ref(ref, samples, opts, language)
    ours = {c: asr_record("dasllama", model.path, model, c, s, model.load_s, build) for c, s in clips}
    ref_build = {**build, "commit": f"pywhispercpp {ref.version['pywhispercpp']}",
                 "backends": "ggml"} if ref else None
    theirs = {c: asr_record("whisper.cpp", ref.model_path, model, c, s, ref.load_s, ref_build)
              for c, s in clips} if ref else {}
    retaken = (lambda c, engine: partial(on_retake, c, engine)) if on_retake else (lambda c, engine: None)
    for rep in range(reps):
        for clip, samples in clips:
            duration = len(samples) / SAMPLE_RATE
            ns = take_sample(partial(time_ours, model, samples, opts), _best(ours[clip]), duration,
                             idle_wait, retaken(clip, "dasllama"))
            ours[clip]["samples_ns"].append(ns)
            ref_ns = None
            if ref:
                ref_ns = take_sample(partial(time_ref, ref, samples, opts, language),
                                     _best(theirs[clip]), duration, idle_wait, retaken(clip, "whisper.cpp"))
                theirs[clip]["samples_ns"].append(ref_ns)
            if on_sample:
                on_sample(clip, rep, ns / 1e9, ref_ns / 1e9 if ref_ns else None)
    records = []
    for clip, samples in clips:
        mine = _finish(ours[clip])
        records.append(mine)
        if ref:
            other = _finish(theirs[clip])
            mine["ratio"] = mine["avg_ts"] / other["avg_ts"]
            records.append(other)
    return records


def _best(record):
    """The fastest sample so far as a speed (audio seconds per second), None before the first."""
    return max((1e9 * record["audio_s"] / ns for ns in record["samples_ns"]), default=None)


def _finish(record):
    summarize(record, record["audio_s"])
    samples = {k: record.pop(k) for k in ("samples_ns", "samples_ts")}
    record["rtf"] = record["avg_ns"] / 1e9 / record["audio_s"]
    record.update(samples)                    # the samples last, as llama-bench prints them
    return record

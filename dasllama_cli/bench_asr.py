"""`dasllama bench` with a Whisper model: wall time and real-time factor per clip, the model
load apart, whisper.cpp (pywhispercpp) beside it on the same weights (--ref whisper.cpp)."""
import os
import shlex

import click

from dasllama.core.tools.bench_asr import run_asr_bench
from dasllama.core.tools.verify_asr import greedy_options
from dasllama.core.tools.receipt import build_receipt, write_results
from dasllama.core.asr.model import WhisperModel, default_model_path
from dasllama.core.asr.decode import check_language
from dasllama.core.tools.ref_whisper import WhisperCpp, check_available

from .bench_output import render
from .verify_asr import ASR_ERRORS, load_clips, reference_model

FIELDS = ("build_commit", "cpu_info", "backends", "model_filename", "model_type", "model_size",
          "n_threads", "audio", "audio_s", "load_s", "test_time", "avg_ns", "stddev_ns", "avg_ts",
          "stddev_ts", "rtf")


def bench_asr(model_path, audio, repetitions, threads, fmt, ref, ref_model, wait_idle,
              receipt_path, language, task, timestamps, hardware, build):
    opts = greedy_options(language, task, timestamps)
    try:
        clips = load_clips(audio)
        model = WhisperModel(model_path or default_model_path(), n_threads=threads)
        if ref:
            check_available()
        told = check_language(model.tokenizer, opts)
        ref_path = reference_model(model, ref_model, "bench") if ref else None
        reference = WhisperCpp(ref_path, model.n_threads) if ref else None
    except ASR_ERRORS as e:
        raise click.ClickException(str(e)) from None

    def progress(clip, rep, ours_s, ref_s):
        theirs = f", whisper.cpp {ref_s:.3f} s" if ref_s is not None else ""
        click.echo(f"bench: {os.path.basename(clip)} {rep + 1}/{repetitions}: dasllama {ours_s:.3f} s{theirs}",
                   err=True)

    def retaken(clip, engine, speed, best):
        click.echo(f"bench: {os.path.basename(clip)} {engine} ran at {speed:.2f}x real time, under half "
                   f"its best {best:.2f}x: disturbed, taken again", err=True)

    build = {**build, "backends": "numpy+numba"}
    try:
        records = run_asr_bench(model, clips, repetitions, opts, build, reference, told,
                                idle_wait=wait_idle, on_sample=progress, on_retake=retaken)
        ref_info = reference.describe() if reference else None
    except ASR_ERRORS as e:
        raise click.ClickException(str(e)) from None
    finally:
        if reference:
            reference.close()
    ours_cmd = our_command_line(model.path, audio, repetitions, model.n_threads, fmt, ref, ref_model,
                                language, task, timestamps)
    receipt = None
    if fmt == "json" or receipt_path:
        inputs = weight_files(model.path) + ([ref_path] if ref_path else []) + list(audio)
        ref_cmd = (f"pywhispercpp Model({ref_path!r}, n_threads={model.n_threads}, temperature=0, "
                   f"temperature_inc=0, suppress_nst=True, language={told or 'auto'!r}, "
                   f"translate={task == 'translate'}, no_timestamps={not timestamps}).transcribe(samples)"
                   if ref else None)
        receipt = build_receipt({"dasllama": ours_cmd, "whisper.cpp": [ref_cmd] if ref_cmd else []},
                                inputs, ref_info, hardware)
    if receipt_path:
        write_results(receipt_path, records, receipt)
    click.echo(render(records, fmt, receipt, ref is not None, FIELDS, to_markdown), nl=False)


def weight_files(path):
    """The files that make the model: a CT2 dir's model.bin and side files, or the .bin."""
    if not os.path.isdir(path):
        return [os.fspath(path)]
    names = ("model.bin", "config.json", "vocabulary.txt", "tokenizer.json")
    return [os.path.join(path, n) for n in names if os.path.isfile(os.path.join(path, n))]


def our_command_line(model_path, audio, reps, threads, fmt, ref, ref_model, language, task, timestamps):
    args = ["dasllama", "bench", "-m", os.path.abspath(model_path), "-r", str(reps), "-t", str(threads),
            "-o", fmt]
    if language:
        args += ["-l", language]
    if task != "transcribe":
        args += ["--task", task]
    if not timestamps:
        args.append("-nt")
    if ref:
        args += ["--ref", ref]
    if ref_model:
        args += ["--ref-model", os.path.abspath(ref_model)]
    return shlex.join(args + [os.path.abspath(a) for a in audio])


def to_markdown(records, with_ref):
    """llama-bench's table shape with an ASR test per clip: wall seconds per transcription and
    the real-time factor (wall / audio), the model load apart; whisper.cpp's beside, and the
    ratio of speeds (above 1: ours is faster)."""
    ours = [r for r in records if r["engine"] == "dasllama"]
    theirs = {r["audio"]: r for r in records if r["engine"] == "whisper.cpp"}
    head = ["model", "size", "backend", "threads", "test", "load s", "s", "RTF"]
    if with_ref:
        head += ["whisper.cpp load s", "whisper.cpp s", "whisper.cpp RTF", "ratio"]
    rows = []
    for r in ours:
        test = f"asr {os.path.basename(r['audio'])} ({r['audio_s']:.1f} s)"
        row = [r["model_type"], f"{r['model_size'] / 2**20:.2f} MiB", r["backends"], str(r["n_threads"]),
               test, f"{r['load_s']:.2f}", _seconds(r), f"{r['rtf']:.3f}"]
        if with_ref:
            other = theirs[r["audio"]]
            row += [f"{other['load_s']:.2f}", _seconds(other), f"{other['rtf']:.3f}", f"{r['ratio']:.2f}"]
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    left = {"model", "backend", "test"}
    line = lambda cells: "| " + " | ".join(c.ljust(w) if h in left else c.rjust(w)   # noqa: E731
                                           for c, w, h in zip(cells, widths, head)) + " |\n"
    rule = "| " + " | ".join("-" * (w - 1) + ("-" if h in left else ":") for w, h in zip(widths, head)) + " |\n"
    text = line(head) + rule + "".join(line(row) for row in rows)
    text += f"\nbuild: {ours[0]['build_commit']} (dasllama)"
    if theirs:
        text += f"; whisper.cpp through {next(iter(theirs.values()))['build_commit']}"
    return text + "\n"


def _seconds(r):
    return f"{r['avg_ns'] / 1e9:.3f} ± {r['stddev_ns'] / 1e9:.3f}"

"""`dasllama bench`: llama-bench's tests and output for our engine, with llama-bench itself run
beside it (--ref llama.cpp) and a receipt of the machine, software and inputs; with a Whisper
model, transcriptions of AUDIO files timed beside whisper.cpp's (--ref whisper.cpp)."""
import json
import os
import shlex

import click

from dasllama.core import load
from dasllama.core.tools.bench_serve import bodies_for, run_load, summary
from dasllama.core.tools.bench_llm import IDLE_WAIT_S, add_bandwidth, run_bench, tests_for
from dasllama.core.tools.receipt import (build_info, build_receipt, physical_cores, probe_hardware,
                                         write_results)
from dasllama.core.tools.ref_llama import ReferenceError, find_reference
from dasllama.core.tools.ref_seed import find_seed
from dasllama.core.asr.model import is_whisper_model

from .bench_asr import bench_asr
from .bench_batched import bench_batched
from .bench_mtmd import bench_mtmd
from .bench_tts import bench_tts
from .bench_output import render, warn_if_busy
from .errors import USER_ERRORS
from .options import THREADS, FiniteFloat, complete_model_names, media_option, model_name, writable_file

# llama-bench's record fields, in its order (tools/llama-bench), that apply to our engine too
FIELDS = ("build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
          "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
          "type_k", "type_v", "n_prompt", "n_gen", "n_depth", "test_time", "avg_ns", "stddev_ns",
          "avg_ts", "stddev_ts")


def bench_serve(url, n_gen, repetitions, concurrency, fmt):
    rows = []
    for _ in range(repetitions):
        for clients in (1, concurrency):
            results, wall = run_load(url, bodies_for(8, n_gen), clients, os.environ.get("DASLLAMA_API_KEY"))
            failed = [r.error for r in results if r.error]
            if failed:
                raise click.ClickException(f"{url}: a request failed ({failed[0]}); is `dasllama serve` "
                                           "running there (and --api-key in $DASLLAMA_API_KEY)?")
            rows.append({"concurrency": clients, **summary(results, wall)})
            click.echo(f"bench: {clients} client(s): {rows[-1]['tokens_per_s']:.1f} t/s", err=True)
    if fmt in ("json", "jsonl"):
        for row in rows:
            click.echo(json.dumps(row))
        return
    click.echo("| clients | requests | gen tokens | t/s | ttft p50 ms | ttft p99 ms |")
    click.echo("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        click.echo(f"| {r['concurrency']} | {r['requests']} | {r['gen_tokens']} | {r['tokens_per_s']:.1f} "
                   f"| {(r['ttft_p50_s'] or 0) * 1000:.0f} | {(r['ttft_p99_s'] or 0) * 1000:.0f} |")


def int_list(ctx, param, value):
    if value is None:
        return []
    try:
        values = [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a number or a comma-separated list of numbers.") from None
    if any(v < 0 for v in values):
        raise click.BadParameter("token counts cannot be negative.")
    return values


@click.command()
@click.argument("audio", nargs=-1)
@click.option("-m", "--model", "model_path", type=click.Path(),
              callback=model_name(), shell_complete=complete_model_names(),
              help="GGUF model file or a name `dasllama models` lists (default: the installed default model), "
                   "or a Whisper model (whisper.cpp .bin or faster-whisper dir) to time transcriptions of AUDIO.")
@click.option("--asr", is_flag=True,
              help="Time transcriptions of AUDIO files (implied when -m is a Whisper model).")
@click.option("-p", "--n-prompt", default="512", show_default=True, callback=int_list,
              help="Prompt tokens of the pp tests (comma-separated list; 0: none).")
@click.option("-n", "--n-gen", default="128", show_default=True, callback=int_list,
              help="Generated tokens of the tg tests (comma-separated list; 0: none).")
@click.option("-r", "--repetitions", default=5, show_default=True, type=click.IntRange(1),
              help="Samples per test.")
@click.option("-t", "--threads", type=THREADS, default=None,
              help="Threads for both engines (default: the physical cores, as llama-bench).")
@click.option("-o", "--output", "fmt", type=click.Choice(["md", "json", "csv", "jsonl"]), default="md",
              show_default=True, help="Output format.")
@click.option("--ref", "refs", type=click.Choice(["llama.cpp", "seed", "whisper.cpp", "piper", "kokoro-onnx"]),
              multiple=True,
              help="Run llama-bench (seed: the seed engine's dasllama-bench, see --seed-bench; for "
                   "Whisper, whisper.cpp through pywhispercpp; for a voice, piper-tts or kokoro-onnx) "
                   "on the same weights and threads, interleaved with ours, and add the ratio. A "
                   "language model takes both: --ref llama.cpp --ref seed.")
@click.option("--sentences", "n_sentences", default=20, show_default=True, type=click.IntRange(1),
              help="Piper voice: sentences spoken per sample.")
@click.option("--ref-bin", type=click.Path(file_okay=False, exists=True),
              help="Dir with llama-bench (default: PATH, then dasllama's cache).")
@click.option("--seed-bench", type=click.Path(dir_okay=False, exists=True),
              help="The seed engine's dasllama-bench executable (default: $DASLLAMA_SEED_BENCH, PATH, "
                   "then unpacked in dasllama's cache).")
@click.option("--ref-model", type=click.Path(dir_okay=False, exists=True),
              help="File for the reference to load instead of -m (Whisper default: -m as a ggml .bin).")
@click.option("--wait-idle", default=IDLE_WAIT_S, show_default=True, type=FiniteFloat(0),
              help="Before each sample, wait up to this many seconds for other processes to leave the CPUs.")
@click.option("--receipt", "receipt_path", type=click.Path(dir_okay=False, writable=True), callback=writable_file,
              help="Write the results with the receipt (commands, versions, sha256 of inputs, hardware) as JSON.")
@click.option("-l", "--language", default=None,
              help="Whisper: spoken language for both engines (default: detect; English-only models: en).")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe",
              show_default=True, help="Whisper: the task for both engines.")
@click.option("-nt", "--no-timestamps", is_flag=True, help="Whisper: decode without timestamp tokens.")
@click.option("--batched", "n_seqs", default=None, callback=int_list, metavar="B0,B1,...",
              help="Time batched decode instead, as llama-batched-bench's -npl: B sequences of the first -p "
                   "prompt tokens each, then the first -n steps of B tokens; --ref llama.cpp runs "
                   "llama-batched-bench beside it.")
@click.option("--mmproj", "mmproj_path", type=click.Path(dir_okay=False, exists=True),
              help="Time a turn about media instead: the model's mmproj GGUF; with --ref llama.cpp, "
                   "llama-mtmd-cli beside it (encoder and whole-turn wall time, -n tokens).")
@media_option("--mmproj: ")
@click.option("--serve", "serve_url", metavar="URL",
              help="Load a running `dasllama serve` at URL instead: 8 streamed completions of -n "
                   "tokens at 1 and at --concurrency clients, alternated -r times; tokens/s and "
                   "time to first token (p50, p99).")
@click.option("--concurrency", default=4, show_default=True, type=click.IntRange(1, 64),
              help="--serve: the clients at once to compare with one.")
def bench_cmd(audio, model_path, asr, n_prompt, n_gen, repetitions, threads, fmt, refs, n_sentences, ref_bin,
              seed_bench, ref_model, wait_idle, receipt_path, language, task, no_timestamps, n_seqs, mmproj_path,
              media, serve_url, concurrency):
    """Measure prompt (pp) and generation (tg) speed as llama-bench does; with a Whisper model,
    the wall time and real-time factor of transcribing AUDIO; with a Piper voice (.onnx), of
    speaking N sentences; with --serve, a running server's throughput."""
    refs = tuple(dict.fromkeys(refs))
    ref = refs[0] if len(refs) == 1 else None
    if len(refs) > 1 and set(refs) != {"llama.cpp", "seed"}:
        raise click.UsageError("only a language model is timed against two references (--ref llama.cpp "
                               "--ref seed); give one --ref.")
    if media and not mmproj_path:
        raise click.UsageError("--image and --audio need --mmproj, the model's vision or audio tower.")
    if mmproj_path:
        if audio or asr or set(refs) - {"llama.cpp"}:
            raise click.UsageError("a media turn is timed against --ref llama.cpp (llama-mtmd-cli), with "
                                   "--image/--audio files and no AUDIO arguments.")
        if not media:
            raise click.UsageError("--mmproj times a turn about media: give --image FILE or --audio FILE.")
        if not model_path:
            raise click.UsageError("--mmproj needs -m, the text model it was made for.")
        hardware = probe_hardware()
        warn_if_busy(hardware)
        bench_mtmd(model_path, mmproj_path, media, n_gen[0] if n_gen else 32, repetitions,
                   threads or physical_cores(), fmt, "llama.cpp" in refs, wait_idle, build_info(hardware))
        return
    if serve_url:
        bench_serve(serve_url, n_gen[0] if n_gen else 32, repetitions, concurrency, fmt)
        return
    if model_path and model_path.endswith((".onnx", ".onnx.json")):
        if not set(refs) <= {"piper", "kokoro-onnx"} or len(refs) > 1 or audio:
            raise click.UsageError("a voice is timed against --ref piper or kokoro-onnx, with no AUDIO.")
        hardware = probe_hardware()
        warn_if_busy(hardware)
        bench_tts(model_path.removesuffix(".json"), n_sentences, repetitions, threads or physical_cores(),
                  fmt, ref, wait_idle, receipt_path, hardware, build_info(hardware))
        return
    if set(refs) & {"piper", "kokoro-onnx"}:
        raise click.UsageError(f"--ref {ref} times voices: pass one with -m VOICE.onnx.")
    if asr or (model_path and is_whisper_model(model_path)):
        if set(refs) & {"llama.cpp", "seed"}:
            raise click.UsageError(f"--ref {refs[0]} times language models; a Whisper model takes "
                                   "--ref whisper.cpp.")
        hardware = probe_hardware()
        warn_if_busy(hardware)
        bench_asr(model_path, audio, repetitions, threads or physical_cores(), fmt, ref, ref_model,
                  wait_idle, receipt_path, language, task, not no_timestamps, hardware, build_info(hardware))
        return
    if audio:
        raise click.UsageError(f"unexpected argument {audio[0]!r}: AUDIO files go with a Whisper model.")
    if "whisper.cpp" in refs:
        raise click.UsageError("--ref whisper.cpp times Whisper models: pass one with -m.")
    if n_seqs:
        bench_batched(model_path, n_prompt, n_gen, n_seqs, repetitions, threads, fmt, refs, ref_bin, ref_model,
                      wait_idle)
        return
    tests = tests_for(n_prompt, n_gen)
    if not tests:
        raise click.UsageError("nothing to measure: give -p or -n a count above 0.")
    references = []
    try:
        # batches of 512 as llama-bench's ubatches: a pp1024 runs as two
        model = load(model_path, n_threads=threads or physical_cores(),
                     n_ctx=max(512, max(t.n_prompt + t.n_gen for t in tests)), n_batch=512)
        for name in refs:
            if name == "llama.cpp":
                references.append(find_reference(ref_bin))
                references[-1].tool("llama-bench")
            else:
                references.append(find_seed(seed_bench))
    except (ReferenceError, *USER_ERRORS) as e:
        raise click.ClickException(str(e)) from None
    hardware = probe_hardware()
    warn_if_busy(hardware)
    build = build_info(hardware)

    def progress(test, rep, ours_ts, refs_ts):
        theirs = "".join(f", {name} {ts:.2f} t/s" for name, ts in refs_ts.items())
        click.echo(f"bench: {test.name} {rep + 1}/{repetitions}: dasllama {ours_ts:.2f} t/s{theirs}", err=True)

    def retaken(test, engine, ts, best):
        click.echo(f"bench: {test.name} {engine} ran at {ts:.2f} t/s, under half its best {best:.2f}: "
                   "disturbed, taken again", err=True)

    try:
        records, ref_cmds = run_bench(model, tests, repetitions, build, references, ref_model,
                                      idle_wait=wait_idle, on_sample=progress, on_retake=retaken)
    except ReferenceError as e:
        raise click.ClickException(str(e)) from None
    for line in add_bandwidth(model, records):
        click.echo(f"bench: {line}", err=True)
    ours_cmd = our_command_line(model.path, n_prompt, n_gen, repetitions, model.n_threads, fmt, refs, ref_model)
    receipt = None
    if fmt == "json" or receipt_path:
        inputs = [model.path] + ([ref_model] if ref_model else [])
        commands = {"dasllama": ours_cmd, **{name: [shlex.join(c) for c in cmds] for name, cmds in ref_cmds.items()}}
        described = [r.describe() for r in references]
        receipt = build_receipt(commands, inputs, described[0] if len(described) == 1 else described or None,
                                hardware)
    if receipt_path:
        write_results(receipt_path, records, receipt)
    click.echo(render(records, fmt, receipt, bool(refs), FIELDS, to_markdown), nl=False)


def our_command_line(model_path, n_prompt, n_gen, reps, threads, fmt, refs, ref_model):
    args = ["dasllama", "bench", "-m", os.path.abspath(model_path), "-p", ",".join(map(str, n_prompt)),
            "-n", ",".join(map(str, n_gen)), "-r", str(reps), "-t", str(threads), "-o", fmt]
    for ref in refs:
        args += ["--ref", ref]
    if ref_model:
        args += ["--ref-model", os.path.abspath(ref_model)]
    return shlex.join(args)


def to_markdown(records, with_ref):
    """llama-bench's table (model, size, params, backend, threads, test, t/s) for our engine,
    plus each reference's t/s and ours / theirs when they ran beside (one: "ratio"; two:
    "vs llama.cpp", "vs seed")."""
    ours = [r for r in records if r["engine"] == "dasllama"]
    names = list(ours[0].get("ratios", {})) if with_ref else []
    theirs = {(r["engine"], r["n_prompt"], r["n_gen"]): r for r in records if r["engine"] != "dasllama"}
    head = ["model", "size", "params", "backend", "threads", "test", "t/s"]
    head += [f"{name} t/s" for name in names]
    head += ["ratio"] if len(names) == 1 else [f"vs {name}" for name in names]
    rows = []
    for r in ours:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}"
        row = [r["model_type"], _size(r["model_size"]), _params(r["model_n_params"]), r["backends"],
               str(r["n_threads"]), test, f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"]
        for name in names:
            other = theirs[(name, r["n_prompt"], r["n_gen"])]
            row.append(f"{other['avg_ts']:.2f} ± {other['stddev_ts']:.2f}")
        row += [f"{r['ratios'][name]:.2f}" for name in names]
        rows.append(row)
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    left = {"model", "backend"}
    line = lambda cells: "| " + " | ".join(c.ljust(w) if h in left else c.rjust(w)
                                           for c, w, h in zip(cells, widths, head)) + " |\n"
    rule = "| " + " | ".join("-" * (w - 1) + ("-" if h in left else ":") for w, h in zip(widths, head)) + " |\n"
    text = line(head) + rule + "".join(line(row) for row in rows)
    text += f"\nbuild: {ours[0]['build_commit']} (dasllama)"
    for name in names:
        first = next(r for (engine, *_), r in theirs.items() if engine == name)
        text += f"; {name} {first.get('build_commit')} ({first.get('build_number')})"
    return text + "\n"


def _size(n_bytes):
    return f"{n_bytes / 2**20:.2f} MiB" if n_bytes < 2**30 else f"{n_bytes / 2**30:.2f} GiB"


def _params(n):
    return f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B"

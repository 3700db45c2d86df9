"""`dasllama bench --batched B0,B1,...`: batched decode (B sequences a step) timed as
llama-batched-bench times it, with llama-batched-bench beside it under --ref llama.cpp."""
import json

import click

from dasllama.core import load
from dasllama.core.tools.bench_batched import run_batched
from dasllama.core.tools.bench_llm import model_type
from dasllama.core.tools.receipt import build_info, physical_cores, probe_hardware
from dasllama.core.tools.ref_llama import ReferenceError, find_reference

from .bench_output import warn_if_busy
from .errors import USER_ERRORS


def bench_batched(model_path, n_prompt, n_gen, n_seqs, repetitions, threads, fmt, refs, ref_bin, ref_model,
                  wait_idle):
    if set(refs) - {"llama.cpp"}:
        raise click.UsageError("batched decode is timed against --ref llama.cpp (llama-batched-bench).")
    if not (n_prompt and n_prompt[0] > 0 and n_gen and n_gen[0] > 0) or min(n_seqs) < 1:
        raise click.UsageError("--batched needs -p and -n above 0 and sequence counts of at least 1.")
    n_prompt, n_gen = n_prompt[0], n_gen[0]
    reference = None
    try:
        model = load(model_path, n_threads=threads or physical_cores(), n_ctx=n_prompt + n_gen,
                     n_batch=max(512, max(n_seqs)))
        if refs:
            reference = find_reference(ref_bin)
            reference.tool("llama-batched-bench")
    except (ReferenceError, *USER_ERRORS) as e:
        raise click.ClickException(str(e)) from None
    hardware = probe_hardware()
    warn_if_busy(hardware)

    def progress(n_seq, rep, ours_ts, theirs_ts):
        other = f", llama.cpp {theirs_ts:.2f} t/s" if theirs_ts is not None else ""
        click.echo(f"bench: tg{n_gen}@B{n_seq} {rep + 1}/{repetitions}: dasllama {ours_ts:.2f} t/s{other}", err=True)

    try:
        records = run_batched(model, n_prompt, n_gen, n_seqs, repetitions, reference, ref_model,
                              idle_wait=wait_idle, on_sample=progress)
    except ReferenceError as e:
        raise click.ClickException(str(e)) from None
    build = build_info(hardware)
    for r in records:
        r.update(build_commit=build["commit"], cpu_info=build["cpu_info"], model_filename=model.path)
    if fmt in ("json", "jsonl"):
        for r in records:
            click.echo(json.dumps(r))
        return
    click.echo(batched_markdown(records, model), nl=False)


def batched_markdown(records, model):
    """A row per B: our t/s of the batched steps and over B=1's; llama-batched-bench's beside."""
    ours = [r for r in records if r["engine"] == "dasllama"]
    theirs = {r["n_seq"]: r for r in records if r["engine"] != "dasllama"}
    head = "| model | threads | test | t/s | vs B=1 |"
    rule = "|---|---:|---|---:|---:|"
    if theirs:
        head += " llama.cpp t/s | llama.cpp vs B=1 | ratio |"
        rule += "---:|---:|---:|"
    lines = [head, rule]
    for r in ours:
        row = (f"| {model_type(model.gguf)} | {r['n_threads']} | tg{r['n_gen']}@B{r['n_seq']} (pp{r['n_prompt']} each) "
               f"| {r['avg_ts']:.2f} ± {r['stddev_ts']:.2f} | {r['vs_b1']:.2f} |")
        if theirs:
            t = theirs[r["n_seq"]]
            row += f" {t['avg_ts']:.2f} ± {t['stddev_ts']:.2f} | {t['vs_b1']:.2f} | {r['ratio']:.2f} |"
        lines.append(row)
    return "\n".join(lines) + f"\n\nbuild: {ours[0]['build_commit']} (dasllama); {ours[0]['cpu_info']}\n"

"""`dasllama bench -m MODEL --mmproj MMPROJ --image FILE --ref llama.cpp`: the media encoder's
and the whole turn's wall time, ours (`dasllama mtmd`) beside llama-mtmd-cli, alternated."""
import json

import click

from dasllama.core.mtmd.media import split_paths
from dasllama.core.tools.bench_mtmd import run_mtmd_bench
from dasllama.core.tools.ref_mtmd import ReferenceError, llama_cpp_dir


def bench_mtmd(model_path, mmproj_path, media, n_gen, repetitions, threads, fmt, with_ref, wait_idle,
               build):
    if with_ref:
        try:
            llama_cpp_dir()
        except ReferenceError as e:
            raise click.ClickException(str(e)) from None

    def progress(rep, ours, theirs):
        other = f"; llama-mtmd-cli encoder {theirs[0]:.3f} s, turn {theirs[1]:.2f} s" if theirs else ""
        click.echo(f"bench: turn {rep + 1}/{repetitions}: dasllama encoder {ours[0]:.3f} s, turn {ours[1]:.2f} s"
                   f"{other}", err=True)

    try:
        records = run_mtmd_bench(model_path, mmproj_path, split_paths(media), n_gen, threads, repetitions, with_ref,
                                 idle_wait=wait_idle, on_sample=progress)
    except ReferenceError as e:
        raise click.ClickException(str(e)) from None
    for r in records:
        r.update(build_commit=build["commit"], cpu_info=build["cpu_info"])
    if fmt in ("json", "jsonl"):
        for r in records:
            click.echo(json.dumps(r))
        return
    click.echo(to_markdown(records), nl=False)


def to_markdown(records):
    """One row per engine: encoder and turn seconds (mean ± sd); ours carries theirs / ours."""
    ours = records[0]
    media = f"{ours['n_media']} file(s)"
    lines = ["| engine | threads | media | tokens | encoder s | turn s | encoder ratio | turn ratio |",
             "|---|---:|---|---:|---:|---:|---:|---:|"]
    for r in records:
        ratios = r.get("ratios", {})
        enc = f"{ratios['encoder']:.2f}" if ratios.get("encoder") else ""
        turn = f"{ratios['turn']:.2f}" if "turn" in ratios else ""
        lines.append(f"| {r['engine']} | {r['n_threads']} | {media} | {r['n_gen']} | "
                     f"{r['encoder_s']:.3f} ± {r['encoder_sd']:.3f} | {r['turn_s']:.2f} ± {r['turn_sd']:.2f} | "
                     f"{enc} | {turn} |")
    return "\n".join(lines) + f"\n\nbuild: {ours.get('build_commit')} (dasllama); {ours.get('cpu_info')}\n"

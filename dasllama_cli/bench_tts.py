"""`dasllama bench -m VOICE.onnx`: wall time, real-time factor and first-audio latency of
speaking N sentences, cold and warm start, piper-tts beside it on the same voice and threads
(--ref piper), with a receipt like the other benches."""
import os
import shlex

import click

from dasllama.core.tools.bench_tts import reference_versions, run_tts_bench
from dasllama.core.tools.receipt import build_receipt, write_results
from dasllama.core.tts import PhonemizerUnavailable, VoiceError, load_voice

from .bench_output import render

FIELDS = ("build_commit", "cpu_info", "backends", "model_filename", "model_size", "n_threads",
          "n_sentences", "audio_s", "load_s", "cold_start_s", "warm_start_s", "first_audio_s",
          "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts", "rtf")


def bench_tts(model_path, n_sentences, repetitions, threads, fmt, ref, wait_idle, receipt_path,
              hardware, build):
    try:
        load_voice(model_path)                      # a bad voice is one sentence, before any timing
        if ref:
            reference_versions(ref)
            __import__("kokoro_onnx" if ref == "kokoro-onnx" else "piper")
    except (VoiceError, PhonemizerUnavailable) as e:
        raise click.ClickException(str(e)) from None
    except ImportError:
        raise click.ClickException(f"--ref {ref} needs its package: pip install "
                                   f"{'kokoro-onnx==0.6.1' if ref == 'kokoro-onnx' else 'piper-tts==1.8.0'}.") from None

    def progress(rep, ours, theirs):
        other = f", {ref} {theirs[1]:.3f} s (first audio {theirs[0]:.3f} s)" if theirs else ""
        click.echo(f"bench: {n_sentences} sentences {rep + 1}/{repetitions}: dasllama {ours[1]:.3f} s "
                   f"(first audio {ours[0]:.3f} s){other}", err=True)

    try:
        records = run_tts_bench(model_path, threads, n_sentences, repetitions,
                                {**build, "backends": "numba+numpy"}, ref, idle_wait=wait_idle,
                                on_sample=progress)
    except (VoiceError, PhonemizerUnavailable) as e:
        raise click.ClickException(str(e)) from None
    receipt = None
    if fmt == "json" or receipt_path:
        ours = shlex.join(["dasllama", "bench", "-m", os.path.abspath(model_path), "--sentences",
                           str(n_sentences), "-r", str(repetitions), "-t", str(threads), "-o", fmt]
                          + (["--ref", ref] if ref else []))
        theirs = [f"piper.PiperVoice(onnxruntime.InferenceSession({os.path.abspath(model_path)!r}, "
                  f"intra_op_num_threads={threads})).synthesize(text, SynthesisConfig(noise_w_scale=0))"]
        receipt = build_receipt({"dasllama": ours, ref or "piper-tts": theirs if ref else []},
                                [p for p in (model_path, f"{model_path}.json") if os.path.exists(p)],
                                reference_versions(ref) if ref else None, hardware)
    if receipt_path:
        write_results(receipt_path, records, receipt)
    click.echo(render(records, fmt, receipt, ref is not None, FIELDS, to_markdown), nl=False)


def to_markdown(records, with_ref):
    """One row per engine: N sentences' wall time, RTF, first-audio latency, cold and warm
    start; the ratio of wall times (above 1: ours is faster)."""
    head = ["engine", "threads", "test", "audio s", "s", "RTF", "first audio s", "cold start s",
            "warm start s", "ratio"]
    rows = []
    for r in records:
        rows.append([r["engine"], str(r["n_threads"]), f"tts {r['n_sentences']} sentences",
                     f"{r['audio_s']:.1f}", f"{r['avg_ns'] / 1e9:.3f} ± {r['stddev_ns'] / 1e9:.3f}",
                     f"{r['rtf']:.4f}", f"{r['first_audio_s']:.3f}", f"{r.get('cold_start_s', 0):.2f}",
                     f"{r['warm_start_s']:.3f}", f"{r['ratio']:.2f}" if "ratio" in r else ""])
    if not with_ref:
        head, rows = head[:-1], [row[:-1] for row in rows]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    left = {"engine", "test"}
    line = lambda cells: "| " + " | ".join(c.ljust(w) if h in left else c.rjust(w)   # noqa: E731
                                           for c, w, h in zip(cells, widths, head)) + " |\n"
    rule = "| " + " | ".join("-" * (w - 1) + ("-" if h in left else ":") for w, h in zip(widths, head)) + " |\n"
    text = line(head) + rule + "".join(line(row) for row in rows)
    return text + f"\nbuild: {records[0]['build_commit']} (dasllama); {records[0]['cpu_info']}\n"

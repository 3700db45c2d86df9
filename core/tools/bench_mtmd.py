"""Timing a multimodal turn against llama-mtmd-cli: the media encoder's wall time and the whole
turn's (a process that loads the model and the mmproj, encodes the media, reads the prompt and
writes N greedy tokens), ours as `dasllama mtmd` and theirs as llama-mtmd-cli on the same files,
prompt and threads. Each side runs once untimed (our first run may compile kernels; both warm
the page cache), then per repetition ours then theirs, each on a machine left idle by others."""
import json
import subprocess
import sys
import time

from .bench_llm import IDLE_WAIT_S, _avg, _stdev, wait_for_idle
from .ref_llama import last_line
from .ref_mtmd import ReferenceError, encode_ms, mtmd_cli_cmd
from .verify_mtmd import DEFAULT_PROMPT


def our_cmd(model, mmproj, media, prompt, n_gen, n_threads):
    cmd = [sys.executable, "-m", "dasllama_cli.main", "mtmd", "-m", str(model), "--mmproj", str(mmproj),
           "-p", prompt, "-n", str(n_gen), "--temp", "0", "--seed", "0", "-t", str(n_threads), "--json", "-q"]
    for path in media:
        cmd += ["--image", str(path)]          # either kind: the kind is read from the file
    return cmd


def _run(cmd, engine):
    t0 = time.perf_counter()
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise ReferenceError(f"{engine} failed: {last_line(done.stderr)}")
    return done, wall


def sample_ours(cmd):
    done, wall = _run(cmd, "dasllama mtmd")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    return sum(record["timings"]["encode_s"]), wall


def sample_ref(cmd):
    done, wall = _run(cmd, "llama-mtmd-cli")
    return encode_ms(done.stderr) / 1000, wall


def run_mtmd_bench(model, mmproj, media, n_gen, n_threads, reps, with_ref=True, idle_wait=IDLE_WAIT_S,
                   prompt=DEFAULT_PROMPT, on_sample=None):
    """Records per engine (dasllama, then llama-mtmd-cli when with_ref): encoder and turn
    seconds (mean, stdev, samples) and, on ours, the ratios theirs / ours (above 1: ours is
    faster)."""
    cmds = {"dasllama": our_cmd(model, mmproj, media, prompt, n_gen, n_threads)}
    if with_ref:
        cmds["llama-mtmd-cli"] = mtmd_cli_cmd(model, mmproj, media, (), prompt, n_gen, n_threads)
    measure = {"dasllama": sample_ours, "llama-mtmd-cli": sample_ref}
    for engine, cmd in cmds.items():
        measure[engine](cmd)                       # untimed
    samples = {engine: [] for engine in cmds}
    for rep in range(reps):
        for engine, cmd in cmds.items():
            if idle_wait > 0:
                wait_for_idle(timeout=idle_wait)
            samples[engine].append(measure[engine](cmd))
        if on_sample:
            on_sample(rep, samples["dasllama"][-1], samples.get("llama-mtmd-cli", [None])[-1])
    records = []
    for engine, taken in samples.items():
        encoder, turn = [s[0] for s in taken], [s[1] for s in taken]
        records.append({"engine": engine, "n_threads": n_threads, "n_gen": n_gen, "n_media": len(media),
                        "prompt": prompt,
                        "encoder_s": _avg(encoder), "encoder_sd": _stdev(encoder),
                        "turn_s": _avg(turn), "turn_sd": _stdev(turn),
                        "samples": [{"encoder_s": e, "turn_s": t} for e, t in taken],
                        "command": cmds[engine]})
    if not with_ref:
        return records
    ours, theirs = records
    ours["ratios"] = {"encoder": theirs["encoder_s"] / ours["encoder_s"] if ours["encoder_s"] else None,
                      "turn": theirs["turn_s"] / ours["turn_s"]}
    return records

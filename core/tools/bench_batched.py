"""Batched decode timed as llama-batched-bench times it: B sequences, each with its own P random
prompt tokens, then N steps of B tokens, one per sequence; the speed is B N / (the N steps'
seconds), its S_TG. Ours steps through Model.decode_batch (one pass over the weights for the B
rows, as `serve` steps its sequences); with the reference, each of our samples is followed by
one llama-batched-bench run of the same shape (A B A B), as bench_llm does for llama-bench."""
import time

import numpy as np

from .bench_llm import IDLE_WAIT_S, _avg, _stdev, random_ids, take_sample, wait_for_idle


def time_batched(model, n_prompt, n_gen, n_seq, rng):
    """ns of the n_gen batched steps, after each of n_seq fresh caches read its prompt."""
    caches = model.new_kvs(n_seq)
    kept = model.kv
    try:
        for cache in caches:
            model.kv = cache
            model.eval(random_ids(model, n_prompt, rng))
    finally:
        model.kv = kept
    steps = rng.integers(0, model.n_vocab, (n_gen, n_seq))
    t0 = time.perf_counter_ns()
    for tokens in steps:
        model.decode_batch(tokens, caches)
    return time.perf_counter_ns() - t0


def run_batched(model, n_prompt, n_gen, n_seqs, reps, reference=None, ref_path=None, seed=0,
                idle_wait=IDLE_WAIT_S, on_sample=None):
    """Records per B in n_seqs, ours then the reference's: t/s of the batched steps (avg, stdev,
    samples) and `vs_b1`, t/s over the first B's (B=1 when listed); ours, beside a reference,
    `ratio` (ours / theirs)."""
    rng = np.random.default_rng(seed)
    time_batched(model, min(n_prompt, 8), 2, max(n_seqs), rng)          # compile, page in
    ref_path = ref_path or model.path
    ours = {b: [] for b in n_seqs}
    theirs = {b: [] for b in n_seqs}
    for rep in range(reps):
        for b in n_seqs:
            n = b * n_gen
            best = max((n * 1e9 / ns for ns in ours[b]), default=None)
            ours[b].append(take_sample(lambda: time_batched(model, n_prompt, n_gen, b, rng), best, n, idle_wait))
            if reference is not None:
                if idle_wait > 0:
                    wait_for_idle(timeout=idle_wait)
                rec = reference.batched_bench(ref_path, n_prompt, n_gen, b, model.n_threads)
                theirs[b].append(rec["speed_tg"])
            if on_sample:
                on_sample(b, rep, n * 1e9 / ours[b][-1], theirs[b][-1] if reference is not None else None)
    records = []
    first = {}
    for b in n_seqs:
        ts = [b * n_gen * 1e9 / ns for ns in ours[b]]
        mine = {"engine": "dasllama", "n_seq": b, "n_prompt": n_prompt, "n_gen": n_gen,
                "n_threads": model.n_threads, "avg_ts": _avg(ts), "stddev_ts": _stdev(ts), "samples_ts": ts}
        first.setdefault("dasllama", mine["avg_ts"])
        mine["vs_b1"] = mine["avg_ts"] / first["dasllama"]
        records.append(mine)
        if reference is not None:
            other = {"engine": reference.name, "n_seq": b, "n_prompt": n_prompt, "n_gen": n_gen,
                     "n_threads": model.n_threads, "avg_ts": _avg(theirs[b]), "stddev_ts": _stdev(theirs[b]),
                     "samples_ts": theirs[b]}
            first.setdefault(reference.name, other["avg_ts"])
            other["vs_b1"] = other["avg_ts"] / first[reference.name]
            mine["ratio"] = mine["avg_ts"] / other["avg_ts"]
            records.append(other)
    return records

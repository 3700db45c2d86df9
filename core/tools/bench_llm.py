"""Timing our engine the way llama-bench times llama.cpp, with llama-bench itself beside it.

pp<N>: N random prompt tokens (BOS first when the vocab adds one) evaluated from an empty
cache in batches of the model's n_batch; tg<N>: N single-token evals from an empty cache. t/s per sample is
tokens / seconds, averaged over samples, as llama-bench reports. With references (llama.cpp's
llama-bench, the seed engine's dasllama-bench), each of our samples is followed by one run of
each on the same test (A B C A B C), so the machine's drift falls on all engines alike and
cancels in the ratios. Each sample waits for the machine
to go idle first, and a sample that others visibly disturbed is taken again.
"""
import math
import os
import time
from dataclasses import dataclass
from functools import partial

import numba
import numpy as np
from numba import njit, prange

from dasllama.kernels.tune import model_shapes

IDLE_BUSY = 0.25     # others may use this share of the CPUs before a sample waits for them
IDLE_WAIT_S = 10.0   # longest wait for an idle machine before each sample
RETAKES = 2


@dataclass(frozen=True)
class Test:
    n_prompt: int
    n_gen: int

    @property
    def name(self):
        return f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"


def tests_for(n_prompts, n_gens):
    """llama-bench's test list: a pp test per -p value, then a tg test per -n value (0 = none)."""
    return [Test(p, 0) for p in n_prompts if p > 0] + [Test(0, n) for n in n_gens if n > 0]


def time_prompt(model, n_prompt, rng):
    ids = random_ids(model, n_prompt, rng)
    model.reset()
    t0 = time.perf_counter_ns()
    model.eval(ids, copy=False)     # llama-bench reads no logits either
    return time.perf_counter_ns() - t0


def time_gen(model, n_gen, rng):
    ids = random_ids(model, n_gen, rng)
    model.reset()
    t0 = time.perf_counter_ns()
    for tok in ids:
        model.eval([tok], copy=False)
    return time.perf_counter_ns() - t0


def random_ids(model, n, rng):
    ids = rng.integers(0, model.n_vocab, n)
    bos = model.tokenizer.bos_id
    if bos is not None and model.tokenizer.add_bos:
        ids[0] = bos
    return ids


def time_test(model, test, rng):
    return time_prompt(model, test.n_prompt, rng) if test.n_prompt else time_gen(model, test.n_gen, rng)


def warm_up(model, tests, rng):
    """Compile (numba) and page in the weights before the first timed sample, as llama-bench's
    warm-up run does."""
    for test in tests:
        if test.n_prompt:
            time_prompt(model, test.n_prompt, rng)
        else:
            time_gen(model, 1, rng)


def summarize(record, n_tokens):
    """Fill llama-bench's statistics from record["samples_ns"] (its avg/stdev definitions)."""
    ns = [int(x) for x in record.pop("samples_ns")]
    ts = [1e9 * n_tokens / x for x in ns]
    record.pop("samples_ts", None)
    record.update(avg_ns=int(_avg(ns)), stddev_ns=int(_stdev(ns)), avg_ts=_avg(ts), stddev_ts=_stdev(ts),
                  samples_ns=ns, samples_ts=ts)     # the samples last, as llama-bench prints them
    return record


def _avg(v):
    return sum(v) / len(v) if v else 0.0


def _stdev(v):
    if len(v) <= 1:
        return 0.0
    mean = _avg(v)
    return math.sqrt(max(sum(x * x for x in v) / (len(v) - 1) - mean * mean * len(v) / (len(v) - 1), 0.0))


def our_record(model, test, build):
    """A llama-bench record (its field names) for our engine; build: {"commit", "cpu_info"}."""
    g = model.gguf
    return {
        "engine": "dasllama", "build_commit": build["commit"], "build_number": 0,
        "cpu_info": build["cpu_info"], "gpu_info": "", "backends": "numba",
        "model_filename": model.path, "model_type": model_type(g),
        "model_size": sum(t.nbytes for t in g.tensors.values()),
        "model_n_params": sum(int(np.prod(t.shape)) for t in g.tensors.values()),
        "n_batch": model.n_batch, "n_ubatch": model.n_batch, "n_threads": model.n_threads,
        "type_k": "f16", "type_v": "f16", "n_prompt": test.n_prompt, "n_gen": test.n_gen,
        "n_depth": 0, "test_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "samples_ns": [],
    }


def model_type(g):
    """'gemma3 270M Q4_K_M': architecture, size label and file type, as llama-bench's model column."""
    from gguf.constants import LlamaFileType
    parts = [g.architecture, g.get("general.size_label")]
    ftype = g.get("general.file_type")
    if ftype is not None:
        try:
            parts.append(LlamaFileType(int(ftype)).name.removeprefix("MOSTLY_"))
        except ValueError:
            parts.append(f"ftype {ftype}")
    return " ".join(str(p) for p in parts if p)


def busy_fraction(interval=0.25):
    """Share of the machine's CPU time spent busy over `interval` s (None off Linux). We sleep
    meanwhile, so what is busy is other processes."""
    def sample():
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]      # total, idle + iowait
    try:
        total0, idle0 = sample()
        time.sleep(interval)
        total1, idle1 = sample()
    except OSError:
        return None
    return 1.0 - (idle1 - idle0) / max(total1 - total0, 1)


def wait_for_idle(max_busy=IDLE_BUSY, timeout=IDLE_WAIT_S):
    """Wait until others use less than max_busy of the CPUs, at most timeout s; the busy
    fraction seen last (None where it cannot be read)."""
    deadline = time.monotonic() + timeout
    busy = busy_fraction()
    while busy is not None and busy > max_busy and time.monotonic() < deadline:
        busy = busy_fraction()
    return busy


def best_ts(record, n_tokens):
    """The fastest sample so far, in t/s (None before the first)."""
    return max((1e9 * n_tokens / ns for ns in record["samples_ns"]), default=None)


def take_sample(measure, best, n_tokens, idle_wait=IDLE_WAIT_S, on_retake=None):
    """One sample (ns) taken on an idle machine; retaken, up to RETAKES times, when it runs at
    under half the best speed seen so far for it: another process took the CPUs meanwhile
    (llama.cpp's spinning threads can slow a hundredfold when a core is taken from them)."""
    for attempt in range(RETAKES + 1):
        if idle_wait > 0:
            wait_for_idle(timeout=idle_wait)
        ns = measure()
        ts = 1e9 * n_tokens / ns
        if best is None or ts >= 0.5 * best or attempt == RETAKES:
            return ns
        if on_retake:
            on_retake(ts, best)


def run_bench(model, tests, reps, build, refs=(), ref_model=None, seed=0,
              idle_wait=IDLE_WAIT_S, on_sample=None, on_retake=None):
    """Records for every test (ours, then each reference's), samples interleaved: each of our
    samples is followed by one sample of each reference (A B C A B C ...).

    refs: engines with a `name`, `bench(path, n_prompt, n_gen, n_threads)` giving one
    llama-bench-like record, `bench_cmd(...)` and optionally `warm_up(path, n_threads)`: llama.cpp's
    llama-bench (ref_llama.Reference), the seed engine's dasllama-bench (ref_seed.SeedBench).
    on_sample(test, rep, ours_ts, {name: ts}) reports progress; on_retake(test, engine, ts,
    best_ts) a disturbed sample taken again. Our records carry `ratios` ({name: ours / theirs
    t/s}) and `ratio`, the first reference's. Returns (records, {name: commands}).
    """
    rng = np.random.default_rng(seed)
    warm_up(model, tests, rng)
    ref_path = os.fspath(ref_model or model.path)
    for ref in refs:
        if hasattr(ref, "warm_up"):
            ref.warm_up(ref_path, model.n_threads)
    ours = {t: our_record(model, t, build) for t in tests}
    theirs = {ref.name: {t: {"engine": ref.name, "samples_ns": []} for t in tests} for ref in refs}
    retaken = (lambda t, engine: partial(on_retake, t, engine)) if on_retake else (lambda t, engine: None)
    for rep in range(reps):
        for t in tests:
            n = t.n_prompt + t.n_gen
            ns = take_sample(partial(time_test, model, t, rng), best_ts(ours[t], n), n, idle_wait,
                             retaken(t, "dasllama"))
            ours[t]["samples_ns"].append(ns)
            for ref in refs:
                record = theirs[ref.name][t]
                measure = partial(_ref_sample, ref, ref_path, t, model.n_threads, record)
                record["samples_ns"].append(take_sample(measure, best_ts(record, n), n, idle_wait,
                                                        retaken(t, ref.name)))
            if on_sample:
                on_sample(t, rep, 1e9 * n / ns,
                          {name: 1e9 * n / by_test[t]["samples_ns"][-1] for name, by_test in theirs.items()})
    records = []
    for t in tests:
        mine = summarize(ours[t], t.n_prompt + t.n_gen)
        records.append(mine)
        others = [summarize(theirs[ref.name][t], t.n_prompt + t.n_gen) for ref in refs]
        if others:
            mine["ratios"] = {o["engine"]: mine["avg_ts"] / o["avg_ts"] for o in others}
            mine["ratio"] = mine["ratios"][refs[0].name]
        records += others
    ref_cmds = {ref.name: [ref.bench_cmd(ref_path, t.n_prompt, t.n_gen, model.n_threads) for t in tests]
                for ref in refs}
    return records, ref_cmds


def _ref_sample(ref, path, test, n_threads, record):
    """One run of the reference's bench on `test` (one sample); its fields go into record."""
    rec = ref.bench(path, test.n_prompt, test.n_gen, n_threads)
    record.update((k, v) for k, v in rec.items() if k != "samples_ns")
    return rec["samples_ns"][0]


# --- the memory wall: what a decode token streams, and how fast a plain read streams it --------

READ_PASSES = 5


def decode_bytes(model):
    """Bytes of weights one decode token reads: every matrix the model multiplies, the output
    one included (the tuner's decode shapes; the embedding gives one row). Decode multiplies
    the file's own blocks (or Q8_0_X* / Q4_0_X* copies within 20/18 of them)."""
    return sum(s.count * s.weights.nbytes for s in model_shapes(model.gguf) if s.phase == "decode")


@njit(parallel=True, cache=True)
def _read_words(words, n_parts):
    """Sum of uint64 words in n_parts contiguous parts, one per thread: a plain streaming read."""
    n = words.shape[0]
    part = (n + n_parts - 1) // n_parts
    sums = np.zeros(n_parts, np.uint64)
    for t in prange(n_parts):
        w = words[min(n, t * part):min(n, (t + 1) * part)]
        acc = np.uint64(0)
        for i in range(w.shape[0]):
            acc += w[i]
        sums[t] = acc
    return sums.sum()


def read_bandwidth(model, n_bytes=None):
    """Bytes a second of a plain multi-threaded read of the model's weights as decode reads them
    (the file's bytes copied into anonymous memory, as the model's copies are; the first
    n_bytes, default all): the best of READ_PASSES passes, the wall a decode step runs
    against. Uses the model's thread count. (Read from the map, the wall was lower than what
    the copies stream: decode passed 100 % of it. model.wbuf holds only the bytes no copy
    serves: its other pages, never touched, would read as one zero page.)"""
    data = np.asarray(model.gguf.data)
    n = (min(n_bytes or data.size, data.size) // 8) * 8
    words = np.array(data[:n]).view(np.uint64)
    threads = numba.get_num_threads()
    numba.set_num_threads(model.n_threads)
    try:
        _read_words(words, model.n_threads)       # compile, page in
        best = math.inf
        for _ in range(READ_PASSES):
            t0 = time.perf_counter_ns()
            _read_words(words, model.n_threads)
            best = min(best, time.perf_counter_ns() - t0)
    finally:
        numba.set_num_threads(threads)
    return n * 1e9 / best


def add_bandwidth(model, records):
    """For tg records, the GB/s each engine streams (the bytes a token reads x its t/s) against
    a plain read of the same weights taken now, added to the records; returns the lines that say
    so, one per record."""
    decode = [r for r in records if r["n_gen"] and not r["n_prompt"]]
    if not decode:
        return []
    per_token = decode_bytes(model)
    wall = read_bandwidth(model)
    lines = []
    for r in decode:
        r["decode_bytes_per_token"] = per_token
        r["decode_gbps"] = per_token * r["avg_ts"] / 1e9
        r["read_gbps"] = wall / 1e9
        lines.append(f"tg{r['n_gen']} {r['engine']}: {per_token / 1e6:.0f} MB a token at "
                     f"{r['avg_ts']:.2f} t/s = {r['decode_gbps']:.1f} GB/s, "
                     f"{100 * r['decode_gbps'] / r['read_gbps']:.0f} % of a plain read of the "
                     f"weights ({r['read_gbps']:.1f} GB/s, {model.n_threads} threads)")
    return lines

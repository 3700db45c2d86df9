"""Timing for the tuner: a noise probe of the machine, and interleaved races of kernel
variants that drop the clearly slower ones early (kernels/tune.py decides with them)."""
import itertools
import os
import time

import numba
import numpy as np

from .quants import JIT

NOISE_LIMIT = 0.05           # relative spread of the probe above which ranking is refused
SAMPLE_S = 0.002             # one timing sample repeats a call up to about this long
DROP_AFTER = 2.0             # a variant this many times the leader's median stops racing
FAR_BEHIND = 10.0            # ... or this many times the fastest first call: out after one call
MIN_ROUNDS = 3               # races run at least this many rounds


class Noisy(RuntimeError):
    """The machine is too busy to rank variants; the message names the measurement."""


@numba.njit(**JIT, parallel=True)
def _probe_work(a):
    s = 0.0
    for i in numba.prange(a.size):
        s += a[i] * a[i]
    return s


def probe_noise(n_samples=40):
    """(spread, reason): the interquartile range of a fixed ~1 ms parallel workload over its
    median, and a sentence saying what was measured."""
    a = np.ones(1 << 21, np.float32)   # (2M,) 8 MB: past L2, like a weight stream
    _probe_work(a)
    times = []
    for _ in range(n_samples):
        t0 = time.perf_counter()
        _probe_work(a)
        times.append(time.perf_counter() - t0)
    q1, med, q3 = np.percentile(times, [25, 50, 75])
    spread = float((q3 - q1) / med)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    reason = (f"a fixed workload's timings spread {spread:.1%} (limit {NOISE_LIMIT:.0%}); "
              f"load average {load:.1f} on {os.cpu_count()} CPUs")
    return spread, reason


_turn = itertools.count()     # calls rotate over a list's copies across samples and variants


def _sample(kernel, args, reps):
    """Seconds per call over `reps` calls; args: one call's arguments, or a list taken in
    turn."""
    calls = args if isinstance(args, list) else [args]
    t0 = time.perf_counter()
    for _ in range(reps):
        kernel(*calls[next(_turn) % len(calls)])
    return (time.perf_counter() - t0) / reps


def _args_of(args, name):
    """A race's arguments for variant `name`: args is one set for all, or {name: set}."""
    return args[name] if isinstance(args, dict) else args


def _reps(kernels, args):
    """Calls per sample: about SAMPLE_S of the fastest variant (after a warm-up call each)."""
    first = {}
    for name, kernel in kernels.items():
        _sample(kernel, _args_of(args, name), 1)   # compiled and warm before any clock starts
        first[name] = _sample(kernel, _args_of(args, name), 1)
    return max(1, int(SAMPLE_S / min(first.values()))), first


def race(kernels, args, budget_s, min_rounds=MIN_ROUNDS):
    """{name: median seconds per call}: interleaved rounds, in rotated order, until the budget
    is spent. A variant over DROP_AFTER x the leader's median leaves after MIN_ROUNDS (after
    its first call if it is over FAR_BEHIND x the fastest first call). args: the calls of
    _race_args, shared, or {name: calls} where variants multiply different layouts."""
    reps, first = _reps(kernels, args)
    best_first = min(first.values())
    samples = {name: [t] for name, t in first.items()}
    alive = [n for n in kernels if first[n] < FAR_BEHIND * best_first]
    start = time.perf_counter()
    rounds = 0
    while len(alive) > 1 and (rounds < min_rounds or time.perf_counter() - start < budget_s):
        shift = rounds % len(alive)
        for name in alive[shift:] + alive[:shift]:
            samples[name].append(_sample(kernels[name], _args_of(args, name), reps))
        rounds += 1
        if rounds >= min_rounds:
            lead = min(float(np.median(samples[n])) for n in alive)
            alive = [n for n in alive if min(samples[n]) < DROP_AFTER * lead]
    return {name: float(np.median(s)) for name, s in samples.items()}

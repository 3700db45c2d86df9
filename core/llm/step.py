"""A model's compiled step, one per set of weight formats.

`matmul` is an if-chain over the qtypes it serves, and numba compiles every branch of it into
the step that links it: the dispatch over the whole registry (13 formats, their copy layouts,
both phases) made a gemma3 cold start compile 27 matmul functions where its 7 qtypes need 12.
`step_for(qtypes)` compiles forward.py's @per_formats functions (and batch.py's) against
`matmul_for(qtypes)` instead (the set: copy layouts, and the (format, phase) pairs the copies
leave to the file's blocks, model.step_formats; gemma3 and Qwen2.5 Q4_K_M with their copies
take no format's matmul kernel at all): the same Python functions, given a copy of their module's
globals in which `matmul`, `_linear`, `_qkv`, ... are the set's own. Each gets a qualified name
that carries the set (forward__q0_6_8), so numba's disk cache keeps one entry per set: its
index files are named after the function's qualified name, and a step compiled for one set is
never loaded for another (the cache key otherwise holds the signature and the bytecode, the
same for every set).
"""
import os
import pickle
import subprocess
import sys
import types
from collections import namedtuple

import numba
import numpy as np
from numba import njit

from dasllama.kernels.actq import quantize_act
from dasllama.kernels.attention import attention, attention_work
from dasllama.kernels.matmul import dispatch_set, fused_for, matmul_for, rows_for, set_key, set_text
from dasllama.kernels.quants import dequantize_row_for

from ..runtime.threads import free_cores
from . import batch, forward as fw, team  # noqa: F401  (batch, team: register forward_batch, team_step)

Step = namedtuple("Step", "forward forward_batch team_step qtypes fused")

_steps = {}     # (frozenset of qtypes, frozenset of fused qtypes) -> Step


def _tag(qtypes):
    return "q" + "_".join(set_text(qtypes))


def step_for(qtypes, fused=None):
    """The Step (forward, forward_batch) compiled against the matmul dispatch over `qtypes`
    (model.step_formats: the formats of a model's matrices and of their copies) and the fused
    decode dispatch with kernels for the `fused` ones (model.fused_formats; default all of
    `qtypes`; the others multiply one matrix at a time), one per pair of sets per process; numba
    compiles it on its first call (or loads it from the cache)."""
    qtypes = dispatch_set(qtypes)
    ids = {q for q in qtypes if not isinstance(q, tuple)} | {q[0] for q in qtypes if isinstance(q, tuple) and q[1] == "decode"}
    fused = frozenset(ids) if fused is None else frozenset(int(q) for q in fused) & ids
    if (qtypes, fused) not in _steps:
        _steps[qtypes, fused] = _build(qtypes, fused)
    return _steps[qtypes, fused]


def _build(qtypes, fused):
    tag = _tag(qtypes) + "__f" + _tag(fused)
    own = {"matmul": matmul_for(qtypes), "fused_matmul": fused_for(qtypes, fused),
           "dequantize_row": dequantize_row_for(qtypes), "matmul_rows": rows_for(qtypes)}
    module_globals = []
    for f, options in fw.PER_FORMATS:
        g = dict(f.__globals__)     # a copy: filled below with the set's own functions
        fn = types.FunctionType(f.__code__, g, f.__name__, f.__defaults__, f.__closure__)
        fn.__qualname__ = f"{f.__qualname__}__{tag}"   # the cache's index file: one per set
        fn.__doc__, fn.__module__ = f.__doc__, f.__module__
        own[f.__name__] = njit(cache=True, **options)(fn)
        module_globals.append(g)
    for g in module_globals:        # numba reads globals when it compiles: after this, before it
        g.update(own)
    return Step(own["forward"], own["forward_batch"], own["team_step"], qtypes, fused)


class FirstCompile:
    """A first run's compile (an empty cache) on both cores. numba compiles a function's callees
    one after the other as it types it, on one core; here a second process compiles the step's
    matmul dispatch and its fused decode dispatch (their kernels: a third of a cold start) into
    the disk cache from the
    model's load on, while this one loads the model (which compiles the copies' fills) and then,
    in `finish` before the step's first call, compiles attention and the activation quantiser
    (another third); the step's compile then finds all three compiled. The arguments are
    samples of the types the step passes (test_step.py checks they are): a sample of another
    type would cost a compile the step does not use, never a wrong result. Where the helper
    cannot start or fails, the step compiles the dispatch itself.

    On where two cores are free, one for each process (free_cores: 1.5 or more free over 0.1 s
    while this process waits; the load average at most cores - 1 where /proc/stat is not to
    be read), or with
    DASLLAMA_COMPILE_HELPER=1; off with =0. On a quiet 2-core machine it took the first
    `generate` from 44.1-45.1 s to 37.8-38.3 s with the matmul dispatch, 31.9-33.9 s with the
    fused one too (the main process's own compiles are then the path: the samples of the row
    ops compiled here too gave nothing more, 31.6-33.5 s); on a busy host it cost time (at load 5.5, 143 s
    against 136 without; at load 3.4, 120 against 99: the helper and the load's own work fight
    for the same cores), hence the load test (docs/BENCHMARKS.md, 2026-12-06)."""

    def __init__(self, step, shape):
        self.local, matmul_args, fused_args = _samples(shape)
        self.helper = None
        if not _helper_pays():
            return
        sigs = [tuple(numba.typeof(a) for a in args) for args in (matmul_args, fused_args)]
        try:
            self.helper = subprocess.Popen(
                [sys.executable, "-c", "from dasllama.core.llm.step import _helper; _helper()"],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.helper.stdin.write(pickle.dumps((sorted(step.qtypes, key=set_key), sorted(step.fused), sigs)))
            self.helper.stdin.close()
        except OSError:
            self.helper = None

    def finish(self):
        if self.helper is None:
            return      # nothing runs beside this process: the step compiles its callees itself
        for dispatcher, args in self.local:
            dispatcher.compile(tuple(numba.typeof(a) for a in args))
        if self.helper is not None:
            self.helper.wait()


def _helper_pays():
    forced = os.environ.get("DASLLAMA_COMPILE_HELPER")
    if forced in ("0", "1"):
        return forced == "1"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2:
        return False
    free = free_cores()
    return free >= 1.5 if free is not None else os.getloadavg()[0] <= cores - 1


def _samples(shape):
    """([(dispatcher, arguments)] this process compiles, the dispatch's arguments, the fused
    dispatch's): arguments of the types the step passes (one token; every array row-contiguous,
    the weights read-only)."""
    def rows(dtype):
        return np.zeros((1, 1), dtype)
    weights = np.zeros(1, np.uint8)
    weights.setflags(write=False)
    x, xq, xd, xa, xf = rows(np.float32), rows(np.int8), rows(np.float32), rows(np.float32), rows(np.float32)
    cache, cells = np.zeros((1, 1), np.uint16), np.zeros(1, np.int64)
    sh = shape
    attention_args = (x, cells, cache, cache, cells, sh.n_head, sh.n_head_kv, sh.head_dim, sh.head_dim_v,
                      sh.kq_scale, sh.attn_softcap, sh.n_swa, True, x, 1,
                      attention_work(sh.n_head, sh.n_head_kv, sh.head_dim, sh.head_dim_v))
    local = [(attention, attention_args), (quantize_act, (np.int64(0), x, xq, xd, xa, xf))]
    fused = (np.int64(0), weights, 1, x, weights, 1, x, weights, 1, x, 1, xq, xd, xa, xf, 1)
    return local, (np.int64(0), weights, 1, 1, xq, xd, xa, xf, 1, x), fused


def _helper():
    """FirstCompile's second process: the dispatch over a set and the fused decode dispatch, for
    one signature each, into the cache (the environment, and so the cache folder and the variant
    selection, is the parent's)."""
    qtypes, fused, (sig, fused_sig) = pickle.load(sys.stdin.buffer)
    matmul_for(qtypes).compile(sig)
    fused_for(qtypes, fused).compile(fused_sig)

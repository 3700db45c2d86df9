"""A model's compiled step, one per set of weight formats.

`matmul` is an if-chain over the qtypes it serves, and numba compiles every branch of it into
the step that links it: the dispatch over the whole registry (13 formats, their copy layouts,
both phases) made a gemma3 cold start compile ~20 kernels for formats the model does not hold.
`step_for(qtypes)` compiles forward.py's @per_formats functions (and batch.py's) against
`matmul_for(qtypes)` instead: the same Python functions, given a copy of their module's
globals in which `matmul`, `_linear`, `_qkv`, ... are the set's own. Each gets a qualified name
that carries the set (forward__q0_6_8), so numba's disk cache keeps one entry per set: its
index files are named after the function's qualified name, and a step compiled for one set is
never loaded for another (the cache key otherwise holds the signature and the bytecode, the
same for every set).
"""
import types
from collections import namedtuple

from numba import njit

from dasllama.kernels.matmul import matmul_for

from . import batch, forward as fw  # noqa: F401  (batch: registers forward_batch as per-formats)

Step = namedtuple("Step", "forward forward_batch qtypes")

_steps = {}     # frozenset of qtypes -> Step


def _tag(qtypes):
    return "q" + "_".join(str(q) for q in sorted(qtypes))


def step_for(qtypes):
    """The Step (forward, forward_batch) compiled against the matmul dispatch over `qtypes`
    (model.step_formats: the formats of a model's matrices and of their copies), one per set per
    process; numba compiles it on its first call (or loads it from the cache)."""
    key = frozenset(int(q) for q in qtypes)
    if key not in _steps:
        _steps[key] = _build(key)
    return _steps[key]


def _build(qtypes):
    tag = _tag(qtypes)
    own = {"matmul": matmul_for(qtypes)}
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
    return Step(own["forward"], own["forward_batch"], qtypes)

"""A decode step and a batched step allocate nothing inside their compiled code: numba's NRT
counters (on only where NUMBA_NRT_STATS=1 is set before numba is imported: a process of its own)
across the step's call, less the one meminfo numba makes for each array argument it unboxes.
Tiny random-weight models: a copy layout's aux rows, the one-chunk and split-KV attention
(a sequence past 256 cells), a batched step's rows."""
import json
import os
import subprocess
import sys

import pytest

_COUNT = r"""
import json, sys
import numpy as np
from numba.core.runtime import rtsys
from dasllama.core import Model

def arrays(obj):
    if isinstance(obj, np.ndarray):
        return 1
    return sum(arrays(o) for o in obj) if isinstance(obj, tuple) else 0

model = Model(sys.argv[1], n_ctx=1024, n_threads=2, quiet=True)
inside = {}

def counted(name, step):
    def call(*args):
        before = rtsys.get_allocation_stats().alloc
        step(*args)
        inside.setdefault(name, []).append(rtsys.get_allocation_stats().alloc - before - arrays(args))
    return call

model.step = model.step._replace(forward=counted("decode", model.step.forward),
                                 forward_batch=counted("batched", model.step.forward_batch))
caches = model.new_kvs(4)
for i, cache in enumerate(caches):
    model.kv = cache
    model.eval(list(range(1, 300 if i == 0 else 5 + i)))     # the first past 256 cells: split-KV
inside.clear()                                               # the prompts' steps: prefill, not counted
for token in (7, 8):
    model.kv = caches[0]
    model.eval([token])                                      # split-KV attention
    model.kv = caches[1]
    model.eval([token])                                      # one chunk
    model.decode_batch([token] * 4, caches)
print(json.dumps(inside))
"""


@pytest.mark.parametrize("arch,qtype", [("llama", "Q8_0"), ("gemma3", "Q4_K")])
def test_a_decode_and_a_batched_step_allocate_nothing(tiny_model, arch, qtype):
    path = tiny_model(arch, qtype)
    env = dict(os.environ, NUMBA_NRT_STATS="1")
    run = subprocess.run([sys.executable, "-c", _COUNT, str(path)], capture_output=True, text=True, env=env,
                         timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    inside = json.loads(run.stdout.strip().splitlines()[-1])
    assert inside == {"decode": [0, 0, 0, 0], "batched": [0, 0]}

"""A model's step is compiled per set of weight formats (core/llm/step.py): the matmul dispatch
it links holds its formats' kernels and no others, the set covers every matrix and copy the
model multiplies, and each set has a cache entry of its own (a step of one set loaded for a
model of another would multiply its weights with nothing)."""
import numpy as np
import pytest

from dasllama.core import Model
from dasllama.core.llm import forward as fw, step
from dasllama.core.llm.model import step_formats
from dasllama.kernels import matmul as M
from dasllama.kernels import quants as Q


def test_the_dispatch_of_a_set_calls_only_its_kernels():
    source = "\n".join(M._dispatch_source(frozenset({Q.Q8_0, Q.Q8_0_X16})))
    assert "_decode_8(" in source and "_prefill_8(" in source and "_copy_59(" in source
    for other in (Q.Q4_K, Q.Q6_K, Q.F32, Q.Q4_K_X16):
        assert f"_decode_{other}(" not in source and f"_copy_{other}(" not in source
    assert set(M._active_kernels(frozenset({Q.Q8_0}))) == {"_decode_8", "_prefill_8"}


def test_a_models_set_holds_every_matrix_and_copy_it_multiplies(tiny_model):
    model = Model(tiny_model("gemma3", "Q4_K"), n_ctx=64, n_threads=2, quiet=True)
    t = model.tables
    L = t.wtab.shape[0] - 1
    multiplied = set(t.wtab[:L, :, 1].ravel()) | {t.wtab[L, fw.W_OUT, 1]} | set(model.ctab[..., 1].ravel())
    multiplied.discard(-1)
    assert multiplied and multiplied <= model.step.qtypes
    assert Q.Q2_K not in model.step.qtypes and Q.F16 not in model.step.qtypes
    # copies off or on, the same set: one compiled step per model
    assert step_formats(t.wtab) == model.step.qtypes
    assert Model(tiny_model("gemma3", "Q4_K"), n_ctx=64, copies=False, quiet=True).step is model.step


def test_each_set_is_its_own_step_and_cache_entry():
    a, b = step.step_for({Q.Q8_0}), step.step_for({Q.Q4_0, Q.Q8_0})
    assert a is step.step_for([Q.Q8_0]) and a is not b
    names = {s.forward.py_func.__qualname__ for s in (a, b)} | {s.forward_batch.py_func.__qualname__ for s in (a, b)}
    assert len(names) == 4      # numba names a function's cache index after its qualified name


def test_a_step_holds_the_same_logits_as_its_superset(tiny_model):
    # the step over a model's set and one over a wider set (another branch order of the
    # dispatch, other kernels linked in): bit for bit
    path = tiny_model("llama", "Q8_0")
    own = Model(path, n_ctx=64, n_threads=2, quiet=True)
    wide = Model(path, n_ctx=64, n_threads=2, quiet=True)
    wide.step = step.step_for(own.step.qtypes | {Q.Q4_0, Q.Q4_0_X8})
    assert wide.step is not own.step
    ids = list(range(3, 20))
    np.testing.assert_array_equal(own.eval(ids, all_logits=True), wide.eval(ids, all_logits=True))
    np.testing.assert_array_equal(own.eval([5]), wide.eval([5]))


def test_the_first_compiles_samples_have_the_types_the_step_passes(tiny_model):
    # FirstCompile compiles the dispatch, attention and the quantiser from samples before the
    # step: a sample of another type would be a compile the step does not use
    from numba import typeof
    model = Model(tiny_model("gemma3", "Q4_K"), n_ctx=64, n_threads=2, quiet=True)
    local, matmul_args, fused_args = step._samples(model.tables.shape)
    model.eval([1, 2, 3])
    model.eval([4])
    if any(model.step.forward.stats.cache_hits.values()):
        # a step loaded from numba's disk cache types none of its callees in this process
        pytest.skip("the step came from the disk cache: only a first compile shows its callees' types")
    assert tuple(typeof(a) for a in matmul_args) in M.matmul_for(model.step.qtypes).signatures
    assert tuple(typeof(a) for a in fused_args) in M.fused_for(model.step.qtypes, model.step.fused).signatures
    for dispatcher, args in local:
        assert tuple(typeof(a) for a in args) in dispatcher.signatures, dispatcher.__name__


def test_the_helper_compiles_the_dispatch_into_the_cache_for_this_process(tiny_model, monkeypatch):
    # the second process's compile is this one's cache hit, not a second compile
    from numba import typeof
    monkeypatch.setenv("DASLLAMA_COMPILE_HELPER", "1")
    model = Model(tiny_model("llama", "Q4_0"), n_ctx=64, n_threads=2, quiet=True)
    first = step.FirstCompile(model.step, model.tables.shape)
    assert first.helper is not None
    first.finish()
    assert first.helper.returncode == 0
    _, matmul_args, _ = step._samples(model.tables.shape)
    sig = tuple(typeof(a) for a in matmul_args)
    # a dispatcher of its own: one an earlier test compiled in this process answers from memory
    monkeypatch.setattr(M, "_for_set", {})
    dispatch = M.matmul_for(model.step.qtypes)
    dispatch.compile(sig)
    assert dispatch.stats.cache_hits[sig] == 1 and not dispatch.stats.cache_misses[sig]


def test_the_helper_stays_off_while_every_core_is_busy(monkeypatch):
    """The gate reads idle cores now, not the minute's load average: with a busy loop on every
    core, fewer than 1.5 are idle and the first run compiles alone."""
    import os
    import subprocess
    import sys
    import time
    if not os.path.exists("/proc/stat"):
        pytest.skip("idle_cores reads Linux's /proc/stat")
    monkeypatch.delenv("DASLLAMA_COMPILE_HELPER", raising=False)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        assert step.idle_cores() < 1.5
        assert not step._helper_pays()
    finally:
        for p in busy:
            p.kill()
            p.wait()

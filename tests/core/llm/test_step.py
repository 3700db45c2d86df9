"""A model's step is compiled per set of weight formats (core/llm/step.py): the matmul dispatch
it links holds the kernels of the (format or copy layout, batch) pairs the model multiplies and
no others, a pair outside it raises, and each set has a cache entry of its own."""
import numpy as np
import pytest

from dasllama.core import Model
from dasllama.core.llm import forward as fw, step
from dasllama.core.llm.model import BATCH_MAX, plan_copies, step_formats
from dasllama.kernels import matmul as M
from dasllama.kernels import quants as Q, rowgroups


def test_the_dispatch_of_a_set_calls_only_its_kernels():
    source = "\n".join(M._dispatch_source(frozenset({Q.Q8_0, Q.Q8_0_X16})))
    assert "_decode_8(" in source and "_prefill_8(" in source and "_copy_59(" in source
    for other in (Q.Q4_K, Q.Q6_K, Q.F32, Q.Q4_K_X16):
        assert f"_decode_{other}(" not in source and f"_copy_{other}(" not in source
    assert set(M._active_kernels(frozenset({Q.Q8_0}))) == {"_decode_8", "_prefill_8"}
    assert set(M._active_kernels(frozenset({(Q.Q8_0, "prefill"), Q.Q8_0_X16}))) == {"_prefill_8", "_copy_59"}


def _taken(wtab, ctab, batches=tuple(range(1, 40)) + (511, BATCH_MAX)):
    """The set a step must hold, by brute force over batch sizes: for each weight at each size,
    the copy forward._weight takes (its first ctab entry that serves the size) or the file's
    format in that phase; and the embedding's lookup."""
    taken = {(int(wtab[-1, fw.W_EMBD, 1]), "rows")}
    L = wtab.shape[0] - 1
    for layer, slot in [(layer, slot) for layer in range(L) for slot in range(wtab.shape[1])] + [(L, fw.W_OUT)]:
        if wtab[layer, slot, 1] < 0:
            continue
        for n in batches:
            served = [row for row in ctab[layer, slot] if row[1] >= 0 and row[4] <= n <= row[5]]
            qtype = int(served[0][1]) if served else int(wtab[layer, slot, 1])
            taken.add(qtype if qtype in rowgroups.LAYOUT_OF.values() else (qtype, "decode" if n == 1 else "prefill"))
    return taken


@pytest.mark.parametrize("copies", [True, False])
def test_a_models_set_is_every_weight_at_every_batch_it_multiplies(tiny_model, copies):
    # the step's dispatch holds exactly the (layout or format, batch) pairs the copies leave:
    # a pair it lacks would raise; a format's kernels no weight takes are not compiled
    model = Model(tiny_model("gemma3", "Q4_K"), n_ctx=64, n_threads=2, copies=copies, quiet=True)
    t = model.tables
    assert model.step.qtypes == _taken(t.wtab, model.ctab)
    if copies and rowgroups.HAS_X16:    # the tied Q4_K output: p16 for 1-3 rows, the file's from 4
        assert (Q.Q4_K, "decode") not in model.step.qtypes and (Q.Q4_K, "prefill") in model.step.qtypes
    model.eval(list(range(3, 20)), all_logits=True)     # prefill, every row's logits
    model.eval([5])


def test_a_copy_skipped_brings_its_formats_kernels_in(tiny_model):
    # past the RAM budget, or declined (make_copy clears the entry: a Q8_0 quant of -128
    # without VNNI), a weight multiplies the file's blocks in the batches the copy would serve
    t = Model(tiny_model("gemma3", "Q4_K"), n_ctx=64, n_threads=2, quiet=True).tables
    full, _, _ = plan_copies(t.wtab)
    for ctab in (plan_copies(t.wtab, budget=0)[0], plan_copies(t.wtab, enabled=False)[0]):
        assert step_formats(t.wtab, ctab) == _taken(t.wtab, ctab)
    declined = full.copy()
    declined[0, fw.W_Q] = -1
    assert step_formats(t.wtab, declined) == _taken(t.wtab, declined)
    if rowgroups.HAS_X16:
        assert (int(t.wtab[0, fw.W_Q, 1]), "decode") in step_formats(t.wtab, declined)
        assert (int(t.wtab[0, fw.W_Q, 1]), "decode") not in step_formats(t.wtab, full)


def test_a_dispatch_raises_for_a_pair_outside_its_set():
    w = np.zeros(34 * 16, np.uint8)
    xq, xd = np.zeros((2, 32), np.int8), np.ones((2, 1), np.float32)
    xa, xf, out = np.zeros((2, 2), np.float32), np.zeros((2, 32), np.float32), np.zeros((2, 16), np.float32)
    decode_only = M.matmul_for({(Q.Q8_0, "decode")})
    decode_only(Q.Q8_0, w, 16, 32, xq[:1], xd[:1], xa[:1], xf[:1], 1, out[:1])
    with pytest.raises(ValueError):
        decode_only(Q.Q8_0, w, 16, 32, xq, xd, xa, xf, 2, out)
    with pytest.raises(ValueError):
        decode_only(Q.Q4_0, w, 16, 32, xq[:1], xd[:1], xa[:1], xf[:1], 1, out[:1])


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
        pytest.skip("free_cores reads Linux's /proc/stat")
    monkeypatch.delenv("DASLLAMA_COMPILE_HELPER", raising=False)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        assert step.free_cores() < 1.5
        assert not step._helper_pays()
    finally:
        for p in busy:
            p.kill()
            p.wait()


def test_eval_without_a_copy_gives_the_models_row_until_the_next_step(tiny_model):
    # generate and bench read each row before the next step: no 1 MB copy a token there
    model = Model(tiny_model("llama", "Q8_0"), n_ctx=64, n_threads=2, quiet=True)
    copied = model.eval([1, 5, 9])
    model.reset()
    row = model.eval([1, 5, 9], copy=False)
    assert np.array_equal(row, copied) and np.shares_memory(row, model.logits)
    token = int(np.argmax(row))
    model.reset()
    model.eval([1, 5, 9])
    after = model.eval([token])
    model.reset()
    model.eval([1, 5, 9], copy=False)
    assert np.array_equal(model.eval([token], copy=False), after)
    assert not np.array_equal(row, copied)      # the next step wrote over the first row

"""Every family and weight format on tiny random-weight GGUFs, against llama.cpp on the same file.

The models are written by tests/gguf_factory.py with llama.cpp's tensor names and keys; both
engines decode greedily and must agree but for near-ties (tests/parity.py).
"""
import numpy as np
import pytest

from dasllama.core import Model, load
from dasllama.core.llm.model import BATCH_MAX, weight_copies
from dasllama.kernels import quants as Q, sidecar, rowgroups
from dasllama.kernels.quants import Q6_K, Q8_0
from dasllama.kernels.cpu import probe
from tests.gguf_factory import ARCHES
from tests.parity import compare_greedy

N_PREDICT = 16
NEAR_TIE = 0.1     # random weights give flat logits; see tests/core/llm/test_parity.py
if "avx512f" in probe().features:
    NEAR_TIE = 0.0 # every format's path is emulated bit for bit there (tests/core/llm/test_exact.py)
PROMPT = "Hello world, this is a test"


def _check(tiny_model, llama_bin, arch, qtype):
    model = load(tiny_model(arch, qtype), n_ctx=256, n_threads=2)
    n_same, gap = compare_greedy(model, llama_bin, PROMPT, N_PREDICT, NEAR_TIE)
    print(f"{arch} {qtype}: {n_same} ids equal" + (f", then a near-tie ({gap:.4f})" if gap else ""))


@pytest.mark.parametrize("arch", ARCHES)
def test_family_f32(tiny_model, llama_bin, arch):
    _check(tiny_model, llama_bin, arch, "F32")


@pytest.mark.parametrize("qtype", ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                   "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"])
@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_formats(tiny_model, llama_bin, arch, qtype):
    _check(tiny_model, llama_bin, arch, qtype)


@pytest.mark.parametrize("qtype", ["Q5_0", "Q8_0", "Q4_0", "Q4_K", "Q6_K"])
@pytest.mark.parametrize("copy", ["x8", "x16"])
def test_weight_copies_change_no_logit(tiny_model, monkeypatch, qtype, copy):
    # with the layout pinned to a copy, prefill multiplies copies of Q5_0 and Q8_0 weights in
    # the Q8_0_X8/X16 layout, of Q4_0, Q4_K and Q6_K in their own (same integers, same folds),
    # and decode those of Q8_0, Q5_0 and Q4_0; the other decodes, batches under 8 with Q6_K
    # and the model without copies use the file's blocks: every logit must agree bit for bit
    if copy == "x16" and not rowgroups.HAS_X16:
        pytest.skip("the 16-row copies run on CPUs with AVX-512 and VNNI (test_matmul checks their bits anywhere)")
    monkeypatch.setenv(sidecar.PIN_ENV, f"{qtype}={copy}")
    path = tiny_model("llama", qtype)
    ids = list(range(5, 40))
    with_copy = Model(path, n_ctx=256, n_threads=2)
    without = Model(path, n_ctx=256, n_threads=2, copies=False)
    layout = rowgroups.copy_layout(getattr(Q, qtype), 16, copy)
    assert (with_copy.ctab[..., 1] == layout).any() and (without.ctab[..., 1] < 0).all()
    np.testing.assert_array_equal(with_copy.eval(ids, all_logits=True), without.eval(ids, all_logits=True))
    np.testing.assert_array_equal(with_copy.eval([7]), without.eval([7]))
    np.testing.assert_array_equal(with_copy.eval([8, 9, 10], all_logits=True),
                                  without.eval([8, 9, 10], all_logits=True))


def test_the_layouts_say_which_batches_take_a_copy(tiny_model):
    # decode and prefill each take the copy or the file's blocks as the layouts say; a copy no
    # phase takes is not made; Q6_K's copy serves batches of 8 and more only
    model = Model(tiny_model("llama", "Q8_0"), n_ctx=64, n_threads=2)

    def served(decode, prefill, qtype=Q8_0, m=model):
        _, ctab = weight_copies(m.gguf.data, m.tables.wtab, layouts={(qtype, "decode"): decode,
                                                                      (qtype, "prefill"): prefill})
        return {tuple(int(v) for v in row[4:]) for row in ctab.reshape(-1, ctab.shape[-1]) if row[1] >= 0}

    assert served("x8", "x8") == {(1, BATCH_MAX)}
    assert served("file", "x8") == {(2, BATCH_MAX)}
    assert served("x8", "file") == {(1, 1)}
    assert served("file", "file") == set()
    if rowgroups.HAS_X16:      # a phase each: two copies of one weight
        assert served("x8", "x16") == {(1, 1), (2, BATCH_MAX)}
    else:               # not offered here: no copy in that layout is made
        assert served("x8", "x16") == {(1, 1)}
    q6 = Model(tiny_model("llama", "Q6_K"), n_ctx=64, n_threads=2)
    assert served("x8", "x8", Q6_K, q6) == {(8, BATCH_MAX)}


_LAUNCH = ("import numba, numpy as np\n"
           "@numba.njit(parallel=True)\n"
           "def f(a):\n"
           "    for i in numba.prange(a.size): a[i] += 1\n"
           "f(np.zeros(4)); print(numba.threading_layer())")


def _first_available(layers, env):
    """The first of `layers` numba can launch here (each tried in a fresh process)."""
    import subprocess
    import sys
    for layer in layers:
        run = subprocess.run([sys.executable, "-c", _LAUNCH], capture_output=True, text=True,
                             env=dict(env, NUMBA_THREADING_LAYER=layer))
        if run.returncode == 0:
            return layer


@pytest.mark.parametrize("kind", ["llm", "whisper"])
def test_threading_layer_follows_the_workload(tiny_model, kind):
    """LLMs and Whisper ask numba for libgomp's spinning workers first (their decode steps
    run many short parallel regions); the layer is per process, so each runs in its own."""
    import os
    import subprocess
    import sys
    from dasllama.core.runtime.threads import DECODE_LAYERS
    if kind == "llm":
        setup = f"from dasllama.core import load; load({str(tiny_model('llama'))!r}).eval([1, 2])"
    else:
        from tests import whisper_assets
        setup = ("from dasllama.core.asr.model import WhisperModel; import numpy as np; "
                 f"m = WhisperModel({str(whisper_assets.tiny_en())!r}); "
                 "m.encode(np.zeros((m.hparams.n_mels, 3000), np.float32))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_THREADING_LAYER")}
    out = subprocess.run([sys.executable, "-c", setup + "; import numba; print(numba.threading_layer())"],
                         env=env, capture_output=True, text=True, check=True)
    want = _first_available(DECODE_LAYERS, env)
    assert out.stdout.split()[-1] == want


def test_copies_and_file_bytes_are_made_at_the_first_batch_that_reads_them(tiny_model):
    # a 7-token prompt takes the p16 copies (Q4_K's serve 1-7 tokens: the first 4 through
    # llama.cpp's repacked gemm, the rest its gemv): the x16 copies are not made and wbuf stays
    # the map (the embedding's rows read from it); every logit of a longer prompt then takes the
    # x16 copies and the tied output's file bytes (no copy serves 4 rows or more of it): made
    # before that forward, and bit for bit the model without copies
    if not rowgroups.HAS_X16:
        pytest.skip("the p16 copies run on CPUs with AVX-512 and VNNI")
    path = tiny_model("gemma3", "Q4_K")
    model, without = Model(path, n_ctx=128, n_threads=2), Model(path, n_ctx=128, n_threads=2, copies=False)
    x16 = model.ctab[..., 1] == Q.Q4_K_X16
    assert x16.any() and model.wbuf is model.gguf.data
    prompt = [5, 6, 7, 8, 9, 10, 11]
    np.testing.assert_array_equal(model.eval(prompt), without.eval(prompt))
    assert (model._made[..., 1][x16] < 0).all() and model.wbuf is model.gguf.data
    ids = list(range(8, 30))
    np.testing.assert_array_equal(model.eval(ids, all_logits=True), without.eval(ids, all_logits=True))
    assert (model._made[..., 1][x16] == Q.Q4_K_X16).all() and model.wbuf is not model.gguf.data

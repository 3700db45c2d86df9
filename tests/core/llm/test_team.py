"""The one-region decode step (core/llm/team.py) gives forward's logits and KV cache bit for bit,
for every family and format mix whose token matrices all have rows functions: on tiny
random-weight models, past 256 cells (attention's split-KV jobs) and through sliding-window
layers (the window ring)."""
import numpy as np
import pytest

from dasllama.core import Model
from dasllama.core.llm import team
from dasllama.kernels import rowgroups
from tests import assets, gguf_factory

pytestmark = pytest.mark.skipif(not rowgroups.HAS_X16, reason="the decode copies need AVX-512 VNNI")


@pytest.fixture
def team_on(monkeypatch):
    """DASLLAMA_TEAM=1: a Model plans its Team (team.enabled) only where it may run it."""
    monkeypatch.setenv("DASLLAMA_TEAM", "1")


def _forward(model, token):
    model.step.forward(np.array([token], np.int64), model._no_embd, model.n_past, True, model.net,
                       model.kv.arrays, model.scratch, model.acts, 1, model.logits, model._no_trace,
                       model.n_threads, model._no_rope)


def _same_steps(model, n_prompt, n_steps=3, seed=0):
    """Decode n_steps tokens after a prompt of n_prompt, each step once by forward and once by
    the team from the same cache: the logits' bits and every cache array must agree."""
    rng = np.random.default_rng(seed)
    model.reset()
    model.eval(rng.integers(0, model.n_vocab, n_prompt))
    if not team.threading_allows():
        pytest.skip("numba's threading layer is neither libgomp nor tbb")
    for _ in range(n_steps):
        token = int(rng.integers(0, model.n_vocab))
        before = [a.copy() for a in model.kv.arrays]
        _forward(model, token)
        logits, after = model.logits[0].copy(), [a.copy() for a in model.kv.arrays]
        for a, b in zip(model.kv.arrays, before):
            a[...] = b
        model.logits[:] = np.nan
        model._team.run(model.step.team_step, token, model.n_past, model.kv.arrays)
        assert np.array_equal(model.logits[0].view(np.uint32), logits.view(np.uint32))
        for a, b in zip(model.kv.arrays, after):
            assert np.array_equal(a, b)
        model.n_past += 1


@pytest.mark.parametrize("arch, qtype", [("gemma3", "Q8_0"), ("gemma3", "Q4_K"), ("gemma3", "Q6_K"),
                                         ("qwen2", "Q5_0"), ("llama", "Q8_0"), ("gemma2", "Q8_0")])
def test_the_team_step_is_forwards_bit_for_bit(tiny_model, team_on, arch, qtype):
    # gemma3: QK-norm, post-norms, sliding-window layers; qwen2: biases; llama: SwiGLU and an
    # untied output; gemma2: both soft-caps. Past 256 cells the global layers' attention takes
    # the split-KV jobs, the window ring's keeps the one chunk.
    model = Model(tiny_model(arch, qtype), n_ctx=1024, n_threads=2, quiet=True)
    assert model._team is not None
    _same_steps(model, n_prompt=300)
    _same_steps(model, n_prompt=20, seed=1)


def _mixed(tmp_path_factory):
    """A tiny gemma3 quantised as llama-quantize mixes Q4_K_M: Q4_K and Q6_K matrices, and
    (n_ff not a multiple of 256) ffn_down in the fallbacks Q5_0 and Q8_0, as the real model's
    rows of 640."""
    import subprocess
    bindir = assets.llama_cpp_bin()
    if bindir is None:
        pytest.skip("the llama.cpp reference (llama-quantize) could not be built")
    root = tmp_path_factory.mktemp("mixed")
    src = gguf_factory.write_model(root, "gemma3", "F32", n_embd=256, n_ff=288, n_layer=4)
    out = root / "gemma3-Q4_K_M.gguf"
    subprocess.run([str(bindir / "llama-quantize"), "--allow-requantize", str(src), str(out), "Q4_K_M", "2"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return out


def test_a_stage_of_mixed_formats_is_forwards_bit_for_bit(tmp_path_factory, team_on):
    model = Model(_mixed(tmp_path_factory), n_ctx=1024, n_threads=2, quiet=True)
    assert model._team is not None
    needs = model._team.needs
    assert len({int(layout) for layout in model._team.mats[:, team.M_LAYOUT]}) > 2
    assert (needs & 1).any() and (needs & 2).any()      # both activation kinds (Q8_0's, Q8_K's)
    assert any(bin(int(need) >> 2).count("1") > 1 for need in needs)    # a stage of two aux kinds
    _same_steps(model, n_prompt=280)


def test_a_model_whose_matrices_lack_rows_functions_keeps_forward(tiny_model, team_on):
    # phi3's fused QKV and gate-up weights, a model without copies, one thread
    assert Model(tiny_model("phi3", "Q8_0"), n_ctx=64, n_threads=2, quiet=True)._team is None
    assert Model(tiny_model("gemma3", "Q8_0"), n_ctx=64, n_threads=2, copies=False, quiet=True)._team is None
    assert Model(tiny_model("gemma3", "Q8_0"), n_ctx=64, n_threads=1, quiet=True)._team is None


def test_the_split_gives_each_thread_a_run_of_each_matrix():
    pieces = [(53, 100), (16, 100), (16, 80)]
    for n in (2, 3):
        split = team._split(pieces, n)
        for (groups, _), runs in zip(pieces, split):
            assert runs[0][0] == 0 and runs[-1][1] == groups
            assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))


def test_eval_takes_the_team_where_asked(tiny_model, monkeypatch):
    # the hook: with DASLLAMA_TEAM=1 a one-token eval runs team_step (on all the threads the
    # lanes pick), and every token's logits are those of a model without it
    path = tiny_model("gemma3", "Q8_0")
    plain = Model(path, n_ctx=128, n_threads=2, quiet=True)
    monkeypatch.setenv("DASLLAMA_TEAM", "1")
    teamed = Model(path, n_ctx=128, n_threads=2, quiet=True)
    assert teamed._team_on and not plain._team_on
    prompt = list(range(3, 11))
    plain.eval(prompt)
    teamed.eval(prompt)
    runs = []
    run = teamed._team.run
    teamed._team.run = lambda *args: (runs.append(1), run(*args))
    for token in range(20, 32):
        assert np.array_equal(plain.eval([token]).view(np.uint32), teamed.eval([token]).view(np.uint32))
    assert runs or not team.threading_allows()

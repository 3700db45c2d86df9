"""core/tools/ref_llama.py against the real llama.cpp: finding it, its greedy ids and logits through
the bindings and through llama-completion, and reading llama-eval-callback's tensor dumps."""
import numpy as np
import pytest

from dasllama.core.tools import ref_llama
from dasllama.core.tools.ref_llama import ReferenceError, find_reference
from dasllama.kernels.cpu import build_key

PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def ref(llama_bin):
    return find_reference(llama_bin)


def test_a_dir_without_tools_is_an_error_that_says_how_to_get_them(tmp_path):
    with pytest.raises(ReferenceError, match="llama-cpp-python"):
        find_reference(tmp_path)


def test_a_cached_build_stamped_with_another_cpu_is_refused(tmp_path, monkeypatch):
    # a native build made on another CPU class may die of SIGILL here: it is not used
    root = tmp_path / "llama.cpp"
    monkeypatch.setattr(ref_llama, "cached_build", lambda: root)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")          # no llama.cpp tools on PATH
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "llama-bench").write_text("")
    (root / "CPU").write_text("x86_64:avx,avx2,fma")
    with pytest.raises(ReferenceError, match="made for another CPU"):
        find_reference()
    assert not ref_llama.built_for_this_cpu(root)
    (root / "CPU").write_text(build_key() + "\n")          # as .ci/build-llama-cpp writes it
    assert ref_llama.built_for_this_cpu(root)


@pytest.mark.slow
def test_cached_build_has_tools_bindings_and_version(ref):
    assert ref.has_tool("llama-bench") and ref.has_tool("llama-eval-callback")
    assert ref.has_bindings, "the cached build should carry lib/ and python/ (.ci/build-llama-cpp)"
    assert ref.describe()["commit"] == "0c1e570"


@pytest.mark.slow
def test_bindings_and_completion_give_the_same_greedy_ids(ref, smollm2):
    (run,) = ref.greedy(smollm2, [PROMPT], 8, 2)
    text_only = ref.greedy_by_completion(smollm2, PROMPT, 8, 2, 4096)
    assert run.prompt_ids == text_only.prompt_ids
    assert run.ids == text_only.ids and len(run.ids) == 8
    assert "".join(run.pieces).startswith(" Paris")
    for step, tok in zip(run.top, run.ids):
        logits = [v for _, v in step]
        assert step[0][0] == tok and logits == sorted(logits, reverse=True)


@pytest.mark.slow
def test_eval_callback_dump_reads_back_consistently(ref, smollm2):
    ids, dumps = ref.eval_callback(smollm2, PROMPT, 2)
    assert ids[:2] == [504, 3575] and len(ids) == 5     # no BOS in SmolLM2's vocab
    qcur = [d for d in dumps if d.name == "Qcur-0"]
    # printed three times: the matmul {576, T}, reshaped {64, 9, T}, then roped
    assert [d.ne for d in qcur[:2]] == [(576, 5, 1, 1), (64, 9, 5, 1)]
    flat, heads = qcur[0], qcur[1]
    assert flat.total == pytest.approx(heads.total, abs=1e-3)
    shared, at_flat, at_heads = np.intersect1d(flat.index, heads.index, return_indices=True)
    assert len(shared) >= 6, "the 2-D and 3-D prints share their first row's first values"
    np.testing.assert_array_equal(flat.values[at_flat], heads.values[at_heads])
    norm = next(d for d in dumps if d.name == "attn_norm-0")
    assert norm.values.size == 5 * 6 and norm.index.max() < norm.numel

"""Greedy parity with llama.cpp on the real models of ASSETS.md, run side by side.

llama.cpp (built from the pinned sdist) and dasllama decode the same prompt greedily on the
same file. The ids must agree; where they part, the step must be a near-tie for us (the two
best logits within NEAR_TIE), since float summation order differs between any two engines.
A wrong kernel or graph shows up as a divergence on a wide gap, and fails.
"""
import numpy as np
import pytest

from dasllama.core import SamplerParams, generate, load
from tests import assets
from tests.llama_ref import reference_greedy_ids

N_PREDICT = 64
NEAR_TIE = 0.05          # logits; divergences seen between llama.cpp builds sit well below
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time, in a small village,",
           "Water boils at 100 degrees Celsius because"]

pytestmark = pytest.mark.slow


def _compare(model, bindir, prompt, n=N_PREDICT):
    ref_prompt, ref_ids = reference_greedy_ids(bindir, model.path, prompt, n)
    ids = model.tokenizer.encode(prompt, add_special=True, parse_special=True)
    assert ids == ref_prompt, "prompt tokenization differs from llama.cpp"
    ours = [t.id for t in generate(model, ids, n, SamplerParams(temp=0), ignore_eos=False) if t.id >= 0]
    ref_ids = [t for t in ref_ids if t not in model.tokenizer.eog_ids]
    n_same = next((i for i, (a, b) in enumerate(zip(ours, ref_ids)) if a != b), min(len(ours), len(ref_ids)))
    if n_same == min(len(ours), len(ref_ids)):
        assert len(ours) == len(ref_ids) or n_same == n, "one engine stopped early"
        return n_same, None
    model.reset()
    logits = model.eval(ids + ours[:n_same])
    top2 = np.sort(logits)[-2:]
    gap = float(top2[1] - top2[0])
    assert gap < NEAR_TIE, (f"diverged at step {n_same} on a wide gap {gap:.3f}: "
                            f"ours {ours[n_same]} vs llama.cpp {ref_ids[n_same]}")
    assert {ours[n_same], ref_ids[n_same]} <= set(np.argsort(logits)[-3:].tolist())
    return n_same, gap


MODELS = {
    "gemma3-Q4_K_M": assets.gemma3_q4km,
    "smollm2-Q4_1": assets.smollm2_q4_1,
    "qwen2.5-Q4_K_M": assets.qwen25_05b_q4km,
}
REQUANT = ["F16", "Q8_0", "Q4_0", "Q5_K", "Q6_K", "Q3_K", "Q2_K"]


def _load(fetch):
    try:
        path = fetch()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))
    return load(path, n_ctx=512, n_threads=2)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_models_match_llama_cpp(name, llama_bin):
    model = _load(MODELS[name])
    for prompt in PROMPTS:
        n_same, gap = _compare(model, llama_bin, prompt)
        print(f"{name} {prompt!r}: {n_same} ids equal" + (f", then a near-tie ({gap:.4f})" if gap else ""))


@pytest.mark.parametrize("qtype", REQUANT)
def test_requantized_gemma3_matches_llama_cpp(qtype, llama_bin):
    model = _load(lambda: assets.requantized(qtype))
    for prompt in PROMPTS[:2]:
        n_same, gap = _compare(model, llama_bin, prompt)
        print(f"gemma3 {qtype} {prompt!r}: {n_same} ids equal" + (f", then a near-tie ({gap:.4f})" if gap else ""))

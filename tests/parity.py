"""Greedy parity between dasllama and llama.cpp on one file, as the tests assert it.

The ids must agree; where they part, the step must be a near-tie for us (the two best logits
within `near_tie`, and both engines' picks among our top three). A wrong kernel or graph parts
on a wide gap, and fails.

With llama.cpp's bindings the reference decodes the prompt as one batch, as we do (bit-exact
on the pinned models, see tests/core/test_exact.py); with its tools alone llama-completion
decodes it as N-1 tokens then 1, which takes other matmul paths and moves the last bits.
"""
import numpy as np

from dasllama.core import SamplerParams
from dasllama.core.llm.generate import generate
from dasllama.core.tools.ref_llama import find_reference
from tests.llama_ref import reference_greedy_ids


def reference_ids(bindir, model, prompt, n):
    ref = find_reference(bindir)
    if ref.has_bindings:
        (run,) = ref.greedy(model.path, [prompt], n, 2, model.n_ctx)
        return run.prompt_ids, run.ids
    return reference_greedy_ids(bindir, model.path, prompt, n)


def compare_greedy(model, bindir, prompt, n, near_tie):
    """(ids equal before parting, gap at the parting or None); asserts the rule above."""
    ref_prompt, ref_ids = reference_ids(bindir, model, prompt, n)
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
    assert gap < near_tie, (f"diverged at step {n_same} on a wide gap {gap:.3f}: "
                            f"ours {ours[n_same]} vs llama.cpp {ref_ids[n_same]}")
    assert {ours[n_same], ref_ids[n_same]} <= set(np.argsort(logits)[-3:].tolist())
    return n_same, gap



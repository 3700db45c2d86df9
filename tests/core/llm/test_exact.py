"""Bit-exact parity with llama.cpp, tensor by tensor: every tensor our trace names against the
same node of llama.cpp's graph (core/tools/ref_llama_worker.py, through its shared library), for a prompt
batch and the single-token decodes after it. Each op that was made to fold as ggml-cpu does on
this CPU (RoPE's contraction, the one-chunk flash attention, the repacked Q4_K gemm, the tiled
K-quant matmul of batches of 8 and more, SwiGLU's ggml_v_expf, the last layer's FFN on the
output rows only, the tiled flash attention of batches of 64 and more) is pinned here by the
tensors it writes."""
import pytest

from dasllama.core import load
from dasllama.core.tools.ref_llama import find_reference
from dasllama.core.tools.verify_llm import exact_drift
from tests import assets

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ref(llama_bin):
    reference = find_reference(llama_bin)
    if not reference.has_bindings:
        pytest.skip("llama.cpp's bindings are not in the cached build")
    return reference


# 105 tokens: batches of 64 queries and more take ggml's tiled flash attention.
LONG = ("The history of the city begins in the early medieval period, when a small settlement grew "
        "around a river crossing. Merchants came from the north and the south, bringing wool, salt "
        "and wine, and the town council built walls, a market hall and a stone bridge. Over the "
        "following centuries the town grew into a regional centre of trade and learning, with a "
        "cathedral, a university and a busy harbour. Its archives record floods, fires and plagues, "
        "but also festivals, fairs and the slow rise of a proud civic culture that")


# Gemma's short prompt (5 tokens) runs its Q4_K through the repacked gemm and gemv; the long
# ones (>= 8 tokens) run Q6_K and Qwen's non-repacked K-quants through the tiled matmul.
@pytest.mark.parametrize("fetch, prompt", [
    (assets.smollm2_q4_1, "Once upon a time, in a small village,"),
    (assets.gemma3_q4km, "Once upon a time"),
    (assets.gemma3_q4km, "Water boils at 100 degrees Celsius because"),
    (assets.qwen25_05b_q4km, "Once upon a time, in a small village,"),
    (assets.gemma3_q4km, LONG),
], ids=["smollm2-Q4_1", "gemma3-Q4_K_M-short", "gemma3-Q4_K_M-long", "qwen2.5-Q4_K_M",
        "gemma3-Q4_K_M-tiled-attention"])
def test_every_traced_tensor_is_bit_identical(ref, fetch, prompt):
    try:
        path = fetch()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))
    model = load(path, n_ctx=512, n_threads=2)
    prompt_ids = model.tokenizer.encode(prompt, add_special=True, parse_special=True)
    (run,) = ref.greedy(path, [prompt], 8, 2, 512)
    drift = exact_drift(model, ref, path, prompt_ids, run.ids[:7], 2)
    names = {r.name for r in drift.rows}
    assert {"Qcur-0", "kqv_out-0", "ffn_out-0", "l_out-0", "result_output"} <= names
    assert {r.step for r in drift.rows} == set(range(8))
    assert drift.first is None, drift.first


def test_split_kv_decode_logits_are_bit_identical(ref):
    """Past 256 cells llama.cpp pads the cache it attends to 512 cells, and a single query then
    takes the split-KV path: one chunk of keys per thread, partials merged. The logits of
    every greedy step, to position 290, equal llama.cpp's at 2 threads."""
    try:
        path = assets.smollm2_q4_1()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))
    model = load(path, n_ctx=1024, n_threads=2)
    (run,) = ref.greedy(path, [LONG], 184, 2, 1024)
    ids = model.tokenizer.encode(LONG, add_special=True, parse_special=True)
    assert len(ids) + len(run.ids) > 256 + 20, "the run must pass 256 cells"
    model.reset()
    logits = model.eval(ids)
    for step, (tok, top) in enumerate(zip(run.ids, run.top)):
        assert [float(logits[i]) for i, _ in top] == [v for _, v in top], f"step {step}"
        logits = model.eval([tok])


def test_sliding_window_ring_logits_are_bit_identical(ref):
    """Gemma 3's window layers keep, as llama.cpp's tools do, a ring of 1024 cells (window 512
    plus a batch) that a 1100-token prompt wraps: the prompt's third batch and every decode
    after it sum keys in ring order over a 1024-cell cache while the global layers see 1280
    cells. The logits of every greedy step equal llama.cpp's at its default 4096 cells."""
    try:
        path = assets.gemma3_q4km()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))
    model = load(path, n_ctx=4096, n_threads=2)
    prompt = " ".join([LONG] * 11)
    ids = model.tokenizer.encode(prompt, add_special=True, parse_special=True)
    assert len(ids) > 1024 + 64, "the prompt must wrap the ring with a tiled batch"
    (run,) = ref.greedy(path, [prompt], 24, 2, 4096)
    logits = model.eval(ids)
    for step, (tok, top) in enumerate(zip(run.ids, run.top)):
        assert [float(logits[i]) for i, _ in top] == [v for _, v in top], f"step {step}"
        logits = model.eval([tok])

"""Model.decode_batch: B sequences stepped in one pass give the logits each gets stepped alone
(tiny random-weight models: three families, a K-quant, past gemma's sliding window), and the
per-sequence caches do not leak into each other. Quantised weights: bit for bit (the batch
tiles fold each row as the decode kernels do). Float weights: the batch kernels fold their
sums in another order, as llama.cpp's do, so equal within an NMSE of 1e-6."""
import numpy as np
import pytest

from dasllama.core import Model

PROMPTS = ([1, 5, 9, 13], [2, 7], [3, 4, 8, 16, 23, 42, 11])


def stepped(model, caches, steps, batched, prompts=PROMPTS):
    """(greedy token, logits after feeding it) per step of each sequence after its prompt."""
    logits = []
    for cache, prompt in zip(caches, prompts):
        model.kv = cache
        logits.append(model.eval(prompt))
    out = [[] for _ in caches]
    for _ in range(steps):
        tokens = [int(np.argmax(row)) for row in logits]
        if batched:
            logits = list(model.decode_batch(tokens, caches))
        else:
            logits = []
            for cache, token in zip(caches, tokens):
                model.kv = cache
                logits.append(model.eval([token]))
        for seq, token, row in zip(out, tokens, logits):
            seq.append((token, row.copy()))
    return out


@pytest.mark.parametrize("arch,qtype", [("llama", "Q8_0"), ("qwen2", "Q8_0"), ("llama", "F32"), ("gemma3", "Q4_K")])
def test_a_batched_step_is_each_sequence_stepped_alone(tiny_model, arch, qtype):
    model = Model(tiny_model(arch, qtype), n_ctx=128, n_threads=2, quiet=True)
    steps = 40 if arch == "gemma3" else 6          # gemma3's window is 32: cross it
    alone = stepped(model, model.new_kvs(3), steps, batched=False)
    together = stepped(model, model.new_kvs(3), steps, batched=True)
    for a, b in zip(alone, together):
        assert [t for t, _ in a] == [t for t, _ in b]
        for (_, x), (_, y) in zip(a, b):
            if qtype == "F32":
                assert ((x - y) ** 2).sum() / (x ** 2).sum() < 1e-6    # NMSE
            else:
                assert np.array_equal(x, y)


def test_a_batched_step_splits_the_long_sequences_keys_as_alone(tiny_model):
    # the rows' attention runs in one region: a sequence past 256 cells takes the split-KV
    # path (its padded cells reach 512) beside one that does not, each as stepped alone
    model = Model(tiny_model("llama", "Q8_0"), n_ctx=1024, n_threads=2, quiet=True)
    prompts = ([int(i) for i in np.random.default_rng(5).integers(1, 60, 300)], PROMPTS[1])
    alone = stepped(model, model.new_kvs(2), 2, batched=False, prompts=prompts)
    together = stepped(model, model.new_kvs(2), 2, batched=True, prompts=prompts)
    for a, b in zip(alone, together):
        for (ta, x), (tb, y) in zip(a, b):
            assert ta == tb and np.array_equal(x, y)


def test_decode_batch_refuses_caches_of_other_blocks(tiny_model):
    model = Model(tiny_model("llama", "F32"), n_ctx=32, n_threads=2, quiet=True)
    a, b = model.new_kvs(1)[0], model.new_kvs(1)[0]
    with pytest.raises(ValueError):
        model.decode_batch([1, 2], [a, b])

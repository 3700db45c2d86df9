"""The sampler chain: each step on crafted logits, the draw against llama.cpp's RNG, speed."""
import re
import tarfile
import time

import numpy as np
import pytest

from dasllama.core.llm.sampling import (
    Candidates,
    Sampler,
    SamplerParams,
    draw,
    min_p,
    penalize_repeats,
    temperature,
    top_k,
    top_p,
)
from tests import assets

# Probabilities 0.5, 0.3, 0.15, 0.05, shuffled so that id order is not logit order.
PROBS = np.array([0.15, 0.5, 0.05, 0.3], dtype=np.float32)
LOGITS = np.log(PROBS)


def unsorted(logits):
    return Candidates(np.arange(logits.size), logits, False)


def only(**chain):
    """Params with every filter off except those given."""
    return SamplerParams(**{"top_k": 0, "top_p": 1.0, "min_p": 0.0, "temp": 1.0, **chain})


@pytest.mark.slow
def test_defaults_are_llama_cpps():
    sdist = assets.llama_cpp_sdist()
    with tarfile.open(sdist) as tar:
        member = next(m for m in tar if m.name.endswith("vendor/llama.cpp/common/common.h"))
        header = tar.extractfile(member).read().decode()
    struct = header[header.index("struct common_params_sampling {"):]
    struct = struct[:struct.index("};")]

    def default(name):
        return float(re.search(rf"\b{name}\s*=\s*([-0-9.]+)f?;", struct).group(1))

    params = SamplerParams()
    assert params.temp == pytest.approx(default("temp"))
    assert params.top_k == default("top_k")
    assert params.top_p == pytest.approx(default("top_p"))
    assert params.min_p == pytest.approx(default("min_p"))
    assert params.repeat_penalty == pytest.approx(default("penalty_repeat"))
    assert params.repeat_last_n == default("penalty_last_n")


def test_repeat_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([2.0, -2.0, 1.0, 0.5, 0.0], dtype=np.float32)
    out = penalize_repeats(logits, [0, 1, 0, 0, 4], penalty=2.0, last_n=64)
    # Once per token however often it repeats; zero stays zero.
    np.testing.assert_array_equal(out, [1.0, -4.0, 1.0, 0.5, 0.0])
    np.testing.assert_array_equal(logits, [2.0, -2.0, 1.0, 0.5, 0.0])  # the input is untouched


def test_repeat_penalty_looks_only_at_the_last_n_tokens():
    logits = np.full(4, 3.0, dtype=np.float32)
    history = [0, 1, 2]
    np.testing.assert_array_equal(penalize_repeats(logits, history, 1.5, last_n=1), [3, 3, 2, 3])
    np.testing.assert_array_equal(penalize_repeats(logits, history, 1.5, last_n=-1), [2, 2, 2, 3])
    np.testing.assert_array_equal(penalize_repeats(logits, history, 1.5, last_n=0), logits)
    np.testing.assert_array_equal(penalize_repeats(logits, history, 1.0, last_n=64), logits)


def test_repeat_penalty_steers_greedy_away_from_a_repeat():
    logits = np.array([0.0, 5.0, 4.0], dtype=np.float32)
    assert Sampler(SamplerParams(temp=0)).sample(logits, history=[1]) == 1
    assert Sampler(SamplerParams(temp=0, repeat_penalty=1.5)).sample(logits, history=[1]) == 2


def test_greedy_takes_the_first_of_tied_maxima_whatever_the_seed():
    logits = np.array([0.0, 1.0, 3.0, -1.0, 3.0], dtype=np.float32)
    picks = {Sampler(SamplerParams(temp=0.0, seed=seed)).sample(logits) for seed in range(20)}
    assert picks == {2}
    assert Sampler(SamplerParams(temp=-1.0)).sample(logits) == 2


def test_top_k_keeps_the_k_best_sorted_with_ties_by_id():
    logits = np.array([1.0, 4.0, 2.0, 4.0, 3.0, 0.0], dtype=np.float32)
    cands = top_k(logits, 3)
    assert cands.is_sorted
    np.testing.assert_array_equal(cands.ids, [1, 3, 4])
    np.testing.assert_array_equal(cands.logits, [4.0, 4.0, 3.0])
    np.testing.assert_array_equal(top_k(logits, 100).ids, [1, 3, 4, 2, 0, 5])


def test_top_k_of_zero_keeps_the_vocabulary_in_id_order():
    cands = top_k(LOGITS, 0)
    assert not cands.is_sorted
    np.testing.assert_array_equal(cands.ids, [0, 1, 2, 3])


def test_top_k_on_a_large_vocabulary_matches_a_full_sort():
    logits = np.random.default_rng(1).standard_normal(262144).astype(np.float32)
    for k in (1, 40, 1000):
        expected = np.argsort(-logits, kind="stable")[:k]
        np.testing.assert_array_equal(top_k(logits, k).ids, expected)


def test_top_p_keeps_the_smallest_prefix_reaching_p():
    kept = {p: top_p(unsorted(LOGITS), p).ids.tolist() for p in (0.4, 0.7, 0.9, 0.99, 1.0)}
    assert kept[0.4] == [1]
    assert kept[0.7] == [1, 3]
    assert kept[0.9] == [1, 3, 0]
    assert kept[0.99] == [1, 3, 0, 2]
    assert kept[1.0] == [0, 1, 2, 3]  # disabled: untouched, still in id order


@pytest.mark.parametrize("scale", [8.0, 0.05])  # peaked (prefix inside the top 256) and flat
def test_top_p_on_a_large_unsorted_vocabulary_matches_a_full_sort(scale):
    logits = (np.random.default_rng(2).standard_normal(262144) * scale).astype(np.float32)
    probs = np.exp(logits.astype(np.float64) - logits.max())
    probs /= probs.sum()
    order = np.argsort(-logits, kind="stable")
    cands = top_p(unsorted(logits), 0.95)
    # A prefix of the tokens by descending logit (equal logits may come in any order).
    np.testing.assert_array_equal(logits[cands.ids], logits[order[:cands.ids.size]])
    # The kept mass reaches p and would not without its last token, up to float32 summation.
    mass = probs[cands.ids].sum()
    assert mass >= 0.95 - 1e-4 and mass - probs[cands.ids[-1]] < 0.95 + 1e-4


def test_min_p_is_relative_to_the_most_likely_token():
    assert min_p(unsorted(LOGITS), 0.2).ids.tolist() == [0, 1, 3]   # p >= 0.1: order kept
    assert min_p(unsorted(LOGITS), 0.5).ids.tolist() == [1, 3]      # p >= 0.25
    assert min_p(unsorted(LOGITS), 0.0).ids.tolist() == [0, 1, 2, 3]


def test_temperature_divides_the_logits():
    np.testing.assert_allclose(temperature(unsorted(LOGITS), 0.5).logits, LOGITS * 2, rtol=1e-6)


def test_draw_walks_the_candidates_in_their_order():
    cands = unsorted(np.zeros(4, dtype=np.float32))
    assert [draw(cands, u) for u in (0.0, 0.25, 0.26, 0.74, 0.76, 0.999)] == [0, 0, 1, 2, 3, 3]


def test_draws_are_llama_cpps_for_the_same_seed():
    # std::uniform_real_distribution<double>(0, 1) over std::mt19937 (libstdc++): seed 42 gives
    # 0.7965, 0.1834, 0.7797, 0.5969 and seed 0 gives 0.5928, 0.8443, 0.8579, 0.8473; over ten
    # equal candidates in id order the first cumulative sum >= 10*u is token floor(10*u).
    flat = np.zeros(10, dtype=np.float32)
    for seed, expected in ((42, [7, 1, 7, 5]), (0, [5, 8, 8, 8])):
        sampler = Sampler(only(seed=seed))
        assert [sampler.sample(flat) for _ in range(4)] == expected


def test_a_seed_reproduces_its_tokens_and_another_seed_does_not():
    logits = np.random.default_rng(3).standard_normal(1000).astype(np.float32)

    def run(seed):
        sampler = Sampler(SamplerParams(temp=1.5, top_k=100, top_p=1.0, min_p=0.0, seed=seed))
        return [sampler.sample(logits) for _ in range(50)]

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_no_seed_or_minus_one_draws_a_fresh_seed():
    seeds = [Sampler(SamplerParams(seed=seed)).seed for seed in (None, -1, None, -1)]
    assert len(set(seeds)) == 4


def test_the_chain_draws_only_survivors_at_their_probabilities():
    logits = np.log(np.array([0.1, 0.4, 0.05, 0.25, 0.2], dtype=np.float32))
    sampler = Sampler(SamplerParams(temp=1.0, top_k=3, top_p=1.0, min_p=0.0, seed=5))
    counts = np.bincount([sampler.sample(logits) for _ in range(4000)], minlength=5)
    assert counts[0] == counts[2] == 0
    expected = np.array([0.4, 0.25, 0.2]) / 0.85
    np.testing.assert_allclose(counts[[1, 3, 4]] / 4000, expected, atol=0.03)


def test_low_temperature_sharpens_the_distribution():
    logits = np.log(np.array([0.6, 0.4], dtype=np.float32))
    sampler = Sampler(only(temp=0.25, seed=9))
    share = np.mean([sampler.sample(logits) == 0 for _ in range(2000)])
    expected = 0.6 ** 4 / (0.6 ** 4 + 0.4 ** 4)  # p^(1/T), renormalised
    assert share == pytest.approx(expected, abs=0.03)


@pytest.mark.parametrize("params", [SamplerParams(seed=1),
                                    SamplerParams(repeat_penalty=1.1, seed=1),
                                    only(top_p=0.95, min_p=0.05, temp=0.8, seed=1)],
                         ids=["defaults", "repeat-penalty", "no-top-k"])
def test_speed_on_a_262144_token_vocabulary(params):
    rng = np.random.default_rng(4)
    logits = (rng.standard_normal(262144) * 3).astype(np.float32)
    history = rng.integers(0, 262144, 512).tolist()
    sampler = Sampler(params)
    sampler.sample(logits, history)
    n = 50
    start = time.perf_counter()
    for _ in range(n):
        sampler.sample(logits, history)
    ms = (time.perf_counter() - start) / n * 1e3
    print(f"\nsample() on 262144 logits, {params}: {ms:.2f} ms")

"""The contenders of a screened logits row: exactly the entries that could be the largest."""
import numpy as np
import pytest

from dasllama.kernels.speech.screen import contenders


def brute(seg, margin):
    finite = np.isfinite(seg)
    floor = (seg[finite] - margin[finite]).max()
    return [i for i in range(seg.size) if finite[i] and margin[i] > 0 and seg[i] + margin[i] >= floor]


@pytest.mark.parametrize("seed", range(5))
def test_contenders_are_the_entries_whose_bound_reaches_the_floor(seed):
    rng = np.random.default_rng(seed)
    seg = (rng.standard_normal(50_000) * 3).astype(np.float32)
    margin = (rng.random(50_000) * (1 + seed)).astype(np.float32)
    seg[rng.integers(0, seg.size, 5_000)] = -np.inf          # masked by the rules
    margin[rng.integers(0, seg.size, 100)] = 0                 # refined already
    got = contenders(seg, margin)
    assert got.tolist() == brute(seg, margin)
    assert got.size > 0


def test_a_row_with_nothing_finite_has_no_contenders():
    seg = np.full(64, -np.inf, np.float32)
    assert contenders(seg, np.ones(64, np.float32)).size == 0

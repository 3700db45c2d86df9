"""The graph's element-wise ufuncs split across threads (core/tts/elementwise.py) give the
ufunc's own bits and dtype, whatever the broadcast, on tensors big enough to be split."""
import warnings

import numba
import numpy as np
import pytest

from dasllama.core.tts import elementwise

N = elementwise.SPLIT_ELEMENTS // 64 + 7       # (1, 64, N): above the split size, odd length


@pytest.mark.parametrize("ufunc, shapes, dtypes", [
    (np.multiply, [(1, 64, N), (1, 64, 1)], [np.float32, np.float32]),     # AdaIN's gamma
    (np.add, [(1, 64, N), (1, 1, N)], [np.float32, np.float32]),
    (np.true_divide, [(1, 64, N), ()], [np.float32, np.float32]),
    (np.add, [(1, 64, N), (64, 1)], [np.int32, np.int32]),                   # a quantised bias
    (np.subtract, [(1, 64, N), ()], [np.float32, np.int64]),                 # promotes to float64
    (np.sin, [(1, 64, N)], [np.float32]),
])
def test_split_ufunc_gives_the_same_bits(ufunc, shapes, dtypes):
    rng = np.random.default_rng(0)
    args = [np.asarray(rng.standard_normal(s) * 100).astype(d) for s, d in zip(shapes, dtypes)]
    want = ufunc(*args)
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: nothing is split")
    got = elementwise.apply(ufunc, *args)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert np.array_equal(got, want)


def test_the_callers_error_handling_holds_in_the_threads():
    # Graph.run silences the export's 0 / 0 with np.errstate, which numpy keeps per thread
    x = np.zeros((1, 64, N), np.float32)
    if numba.get_num_threads() < 2:
        pytest.skip("one thread: nothing is split")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(elementwise.apply(np.true_divide, x, x)).all()
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        elementwise.apply(np.true_divide, x, x)

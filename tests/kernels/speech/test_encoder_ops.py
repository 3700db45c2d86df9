"""encoder_ops and the decoder's attend_f16 against float64 numpy references: within float32
rounding."""
import numpy as np
import pytest

from dasllama.kernels.speech.attend import attend_f16, attend_ref, bias_f16_bits, to_f16_bits
from dasllama.kernels.speech.encoder_ops import (
    bias_gelu,
    bias_gelu_ref,
    exp_nonpositive,
    layer_norm,
    layer_norm_ref,
    log_softmax,
    row_max,
    softmax_rows,
)
from numba import njit


def nmse(got, ref):
    return float(((got.astype(np.float64) - ref) ** 2).mean() / (ref.astype(np.float64) ** 2).mean())


@njit
def _exp_all(x, out):
    for i in range(x.size):
        out[i] = exp_nonpositive(x[i])


def test_exp_within_two_ulp_down_to_the_float32_floor():
    x = -np.concatenate([np.linspace(0, 87, 100_001), np.float32([0, 1e-8, 1e-3])]).astype(np.float32)
    got = np.empty_like(x)
    _exp_all(x, got)
    ref = np.exp(x.astype(np.float64))
    assert np.all(np.abs(got - ref) <= 2 * np.spacing(ref.astype(np.float32)))


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_bias_gelu_matches_reference(scale):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 96)) * scale).astype(np.float32)
    bias = rng.standard_normal(96).astype(np.float32)
    ref = bias_gelu_ref(x, bias)
    bias_gelu(x, bias)
    assert nmse(x, ref) < 1e-13
    assert np.abs(x - ref).max() <= 4e-7 * max(1.0, np.abs(ref).max())


def test_layer_norm_matches_reference():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((41, 384)) * 5 + 2).astype(np.float32)
    w, b = rng.standard_normal((2, 384)).astype(np.float32)
    out = np.empty_like(x)
    layer_norm(x, w, b, 1e-5, out)
    assert nmse(out, layer_norm_ref(x, w, b, 1e-5)) < 1e-13


def test_softmax_rows_is_the_unnormalised_softmax_and_its_sums():
    rng = np.random.default_rng(3)
    s = (rng.standard_normal((19, 1500)) * 8).astype(np.float32)
    ref = np.exp(s.astype(np.float64) - s.max(-1, keepdims=True))
    sums = np.empty(19, np.float32)
    softmax_rows(s, sums)
    assert np.abs(s - ref).max() <= 4e-7
    assert np.allclose(sums, ref.sum(-1), rtol=2e-6, atol=0)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 33, 1500])
def test_row_max_is_numpys_at_any_length_and_position(n):
    rng = np.random.default_rng(n)
    row = rng.standard_normal(n).astype(np.float32)
    row[rng.random(n) < 0.3] = -np.inf          # masked scores
    for where in {0, n // 2, n - 1}:            # the largest first, inside, last
        r = row.copy()
        r[where] = 9.0
        assert row_max(r, 0, n) == 9.0
    assert row_max(row, 0, n) == row.max()
    assert row_max(np.full(n, -np.inf, np.float32), 0, n) == -np.inf


def test_log_softmax_matches_float64_and_keeps_minus_inf():
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(51865) * 6).astype(np.float32)
    x[:300] = -np.inf                                   # suppressed tokens
    finite = np.isfinite(x)
    x64 = x[finite].astype(np.float64)
    ref = x64 - (x64.max() + np.log(np.exp(x64 - x64.max()).sum()))
    got = log_softmax(x)
    assert got.dtype == np.float64
    assert np.all(np.isneginf(got[~finite]))
    assert np.abs(got[finite] - ref).max() < 1e-6


@pytest.mark.parametrize("n_tok,n_keys,first", [(1, 1500, -1), (4, 37, 33), (1, 1, 0)])
def test_attend_f16_matches_reference(n_tok, n_keys, first):
    """Cross-attention (all keys), a causal prompt and a first token; the caches hold more
    columns than are valid, as the decoder's self-attention cache does."""
    rng = np.random.default_rng(5)
    n, n_head, capacity = 384, 6, n_keys + 11
    q = (rng.standard_normal((n_tok, n)) * 0.125).astype(np.float32)
    kv = (rng.standard_normal((capacity, 2 * n)) * 2).astype(np.float32)
    k_t, v_t = np.empty((n, capacity), np.uint16), np.empty((n, capacity), np.uint16)
    to_f16_bits(kv[:, :n], k_t)
    to_f16_bits(kv[:, n:], v_t)
    assert np.array_equal(k_t, kv[:, :n].T.astype(np.float16).view(np.uint16))
    out = np.empty((n_tok, n), np.float32)
    attend_f16(q, k_t, v_t, n_keys, n_head, first, out)
    ref = attend_ref(q, k_t, v_t, n_keys, n_head, first)
    assert np.abs(out - ref).max() <= 2e-6 * np.abs(ref).max()


def test_bias_f16_bits_is_numpys_sum_then_half_rounding():
    """Ties, halves' subnormals and overflow to inf included: the same bits as numpy's f32 sum
    cast to float16 (round to nearest even)."""
    rng = np.random.default_rng(6)
    y = (rng.standard_normal((23, 1500)) * 4).astype(np.float32)
    y[0, :4] = [65520.0, -65519.0, 2.0 ** -25, 3 * 2.0 ** -26]   # overflow, round down, subnormal ties
    y[1, :3] = [1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 2.0 ** -20]  # ties to even, a subnormal
    bias = rng.standard_normal(23).astype(np.float32)
    bias[:2] = 0
    out = np.empty(y.shape, np.uint16)
    bias_f16_bits(y, bias, out)
    with np.errstate(over="ignore"):                              # the overflow is the point
        ref = (y + bias[:, None]).astype(np.float16).view(np.uint16)
    assert np.array_equal(out, ref)

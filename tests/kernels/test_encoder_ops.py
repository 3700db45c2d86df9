"""encoder_ops against their float64 numpy references: NMSE within float32 rounding."""
import numpy as np
import pytest

from dasllama.kernels.encoder_ops import (bias_gelu, bias_gelu_ref, exp_nonpositive, layer_norm,
                                          layer_norm_ref)
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

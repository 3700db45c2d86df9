"""StyleTTS2's fused element-wise chains (kernels/tts/pointwise.py) against the graph's nodes
computed one by one in numpy, and their sine against float64's (the whole graph with the
fused ops against onnxruntime: tests/core/tts/test_kokoro_graph.py)."""
import numpy as np
import pytest
from numba import njit

from dasllama.kernels.tts import pointwise


@njit
def _sines(x, out):
    for i in range(x.shape[0]):
        out[i] = pointwise.sin_f32(x[i])


def test_sine_is_float64s_rounded_to_float32():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(100_000) * s for s in (1e-3, 1.0, 30.0, 3e3, 3e5)]).astype(np.float32)
    x = np.concatenate([x, np.float32([0.0, -0.0, np.pi / 2, np.pi, 2 * np.pi, np.inf, -np.inf, np.nan])])
    got = np.empty_like(x)
    _sines(x, got)
    with np.errstate(invalid="ignore"):
        want = np.sin(x.astype(np.float64)).astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)


def _rows(rng, c, t):
    x = (rng.standard_normal((c, t)) * 4 + rng.standard_normal((c, 1))).astype(np.float32)
    alpha = (rng.random(c) * 2 + 0.05).astype(np.float32)
    return x, alpha, (1 / alpha).astype(np.float32)


def _close(got, want, ulps=4):
    return np.abs(got.astype(np.float64) - want).max() <= ulps * np.finfo(np.float32).eps * np.abs(want).max()


@pytest.mark.parametrize("c, t", [(1, 1), (3, 17), (64, 1001)])
def test_snake_matches_the_nodes(c, t):
    x, alpha, inv_alpha = _rows(np.random.default_rng(t), c, t)
    got = np.empty_like(x)
    pointwise.snake(x, alpha, inv_alpha, got)
    assert _close(got, pointwise.snake_ref(x, alpha, inv_alpha))


@pytest.mark.parametrize("c, t", [(1, 2), (3, 17), (64, 1001)])
@pytest.mark.parametrize("with_snake", [False, True], ids=["adain", "adain+snake"])
def test_adain_matches_the_nodes(c, t, with_snake):
    rng = np.random.default_rng(c + t)
    x, alpha, inv_alpha = _rows(rng, c, t)
    gamma1, beta = (rng.random(c) + 0.5).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    eps = np.float32(1e-5)
    want = pointwise.adain_ref(x.astype(np.float64), gamma1, beta, eps)
    if with_snake:
        want = pointwise.snake_ref(want, alpha, inv_alpha)
    else:
        alpha = inv_alpha = np.zeros(0, np.float32)
    got = np.empty_like(x)
    pointwise.adain(x, gamma1, beta, eps, alpha, inv_alpha, got)
    assert _close(got, want, ulps=16)

"""The speech-out conv tiles (kernels/tts/conv.py) against their float64 reference: shapes
with a time tail (not a multiple of the tile's columns), dilations, padding, the fused leaky
ReLU and residual, and the channel counts of Piper's flow and HiFi-GAN; the transposed conv
against its definition."""
import numpy as np
import pytest

from dasllama.kernels.tts.conv import CONV_ROWS, conv1d_ref, conv1d_tiled, tiled
from dasllama.kernels.tts.ops import conv_transpose1d

# float32 fma chains of K * C_in terms against float64: measured <= 1.2e-5 at these sizes
MAX_ABS_DIFF = 5e-5


def conv_case(k, c_out, c_in, dilation, n, pads, residual):
    """(x (C_in, n), taps (k, C_out, C_in), bias, residual (C_out, n_out) or None, n_out) of a
    random conv, seeded by its shape."""
    rng = np.random.default_rng(k * 1000 + n)
    x = rng.standard_normal((c_in, n)).astype(np.float32)
    taps = (rng.standard_normal((k, c_out, c_in)) / np.sqrt(k * c_in)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    n_out = n + pads[0] + pads[1] - dilation * (k - 1)
    res = rng.standard_normal((c_out, n_out)).astype(np.float32) if residual else None
    return x, taps, bias, res, n_out


@pytest.mark.parametrize("k, c_out, c_in, dilation, n, pads, slope, residual", [
    (7, 32, 32, 12, 1001, (36, 36), 0.1, True),    # a resblock conv, the last stage
    (3, 64, 64, 1, 77, (1, 1), 0.1, True),
    (5, 384, 192, 1, 130, (2, 2), 1.0, False),     # the flow's WaveNet in_layers
    (1, 192, 96, 1, 50, (0, 0), 1.0, False),       # a 1x1
    (3, 8, 12, 2, 5, (0, 3), 0.01, False),         # shorter than a tile, lopsided pads
])
def test_tiles_match_the_reference(k, c_out, c_in, dilation, n, pads, slope, residual):
    x, taps, bias, res, n_out = conv_case(k, c_out, c_in, dilation, n, pads, residual)
    ours = conv1d_tiled(x, taps, bias, pads, dilation, slope, res)
    ref = conv1d_ref(x, taps, bias, pads, dilation, slope, res)
    assert ours.shape == ref.shape == (c_out, n_out)
    assert np.abs(ours - ref).max() < MAX_ABS_DIFF


def test_views_in_and_no_bias():
    rng = np.random.default_rng(1)
    big = rng.standard_normal((2 * CONV_ROWS, 300)).astype(np.float32)
    x = big[::-1, 7:250]                            # reversed channels, a window: not contiguous
    taps = rng.standard_normal((3, 2 * CONV_ROWS, 2 * CONV_ROWS)).astype(np.float32)
    ours = conv1d_tiled(x, taps, None, (1, 1))
    assert np.abs(ours - conv1d_ref(x, taps, None, (1, 1))).max() < MAX_ABS_DIFF


def test_convs_the_tiles_do_not_take():
    assert not tiled(np.zeros((7, 1, 32), np.float32))          # HiFi-GAN's conv_post: one channel
    assert not tiled(np.zeros((3, 192, 1), np.float32), groups=192)   # depth-wise


def test_channels_split_over_a_pool_give_the_same_bits():
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(2)
    x = rng.standard_normal((24, 90)).astype(np.float32)
    taps = rng.standard_normal((3, 12 * CONV_ROWS, 24)).astype(np.float32)
    whole = conv1d_tiled(x, taps, None, (1, 1))
    with ThreadPoolExecutor(3) as pool:
        parts = conv1d_tiled(x, taps, None, (1, 1), pool=pool, n_parts=5)
    assert np.array_equal(whole, parts)


@pytest.mark.parametrize("c_in, c_out, k, stride, pad, n",
                         [(8, 4, 16, 8, 4, 37), (3, 2, 5, 1, 0, 9), (6, 5, 3, 2, 1, 1)])
def test_conv_transpose_matches_its_definition(c_in, c_out, k, stride, pad, n):
    # every input frame i adds weight[:, :, tap] . x[:, i] at output i * stride + tap - pad
    rng = np.random.default_rng(k * n)
    x = rng.standard_normal((c_in, n)).astype(np.float32)
    weight = rng.standard_normal((c_in, c_out, k)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    want = np.zeros((c_out, (n - 1) * stride + k))
    for i in range(n):
        for tap in range(k):
            want[:, i * stride + tap] += weight[:, :, tap].T.astype(np.float64) @ x[:, i]
    want = want[:, pad:want.shape[1] - pad] + bias[:, None]
    got = conv_transpose1d(x, weight, bias, stride, pad)
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()

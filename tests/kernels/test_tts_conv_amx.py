"""HiFi-GAN's time-major convs on AMX-BF16 tiles (kernels/tts/conv_amx.py) against the float64
reference: ragged times, channels not a multiple of 16 or 32, dilations, the fused leaky ReLU
and residual, one output channel (conv_post), and the transposed conv as polyphase taps.
The bound is relative to the conv's own scale, sum |w| |x| over its terms: the three bf16
passes err ~2^-17 a product, and the float32 sums their share."""
import numpy as np
import pytest

from dasllama.kernels import amx
from dasllama.kernels.tts import conv_amx
from dasllama.kernels.tts.conv import conv1d_ref
from dasllama.kernels.tts.ops import conv_transpose1d
from tests.kernels.test_tts_conv import conv_case

BOUND = 2.0 ** -15
pytestmark = pytest.mark.skipif(not amx.BF16, reason="no AMX-BF16 on this CPU (or the OS refused the tile state)")


@pytest.mark.parametrize("k, c_out, c_in, dilation, n, pads, slope, residual", [
    (7, 32, 32, 12, 1001, (36, 36), 0.1, True),    # a resblock conv, the last stage
    (3, 128, 128, 1, 77, (1, 1), 0.1, True),
    (7, 1, 32, 1, 100, (3, 3), 0.01, False),       # conv_post
    (7, 256, 192, 1, 45, (3, 3), 1.0, False),      # conv_pre
    (3, 40, 50, 2, 5, (0, 3), 0.1, False),         # shorter than a tile, ragged channels
])
def test_time_major_conv_within_bound(k, c_out, c_in, dilation, n, pads, slope, residual):
    x, taps, bias, res, n_out = conv_case(k, c_out, c_in, dilation, n, pads, residual)
    ours = conv_amx.conv_time_major(np.ascontiguousarray(x.T), conv_amx.TimeMajorTaps(taps, bias), pads,
                                    dilation, slope, None if res is None else np.ascontiguousarray(res.T))
    ref = conv1d_ref(x, taps, bias, pads, dilation, slope, res)
    scale = conv1d_ref(np.abs(x), np.abs(taps), None, pads, dilation, 1.0)
    assert ours.shape == (n_out, c_out)
    assert np.max(np.abs(ours.T - ref) / scale) < BOUND


@pytest.mark.parametrize("c_in, c_out, k, stride, pad, n", [(256, 128, 16, 8, 4, 50), (64, 32, 8, 4, 2, 33)])
def test_transposed_conv_as_polyphase(c_in, c_out, k, stride, pad, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((c_in, n)).astype(np.float32)
    w = (rng.standard_normal((c_in, c_out, k)) / np.sqrt(c_in)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32)
    taps = conv_amx.TimeMajorTaps(conv_amx.polyphase_taps(w, stride), np.tile(bias, stride))
    act = np.maximum(x, 0.1 * x).astype(np.float64)
    ref = conv_transpose1d(act, w.astype(np.float64), bias.astype(np.float64), stride, pad)
    scale = conv_transpose1d(np.abs(act), np.abs(w).astype(np.float64), None, stride, pad)
    ours = conv_amx.conv_transpose_time_major(np.ascontiguousarray(x.T), taps, stride, pad, ref.shape[1], 0.1)
    assert ours.shape == ref.shape[::-1]
    assert np.max(np.abs(ours.T - ref) / scale) < BOUND


def test_resblock_conv_starts_in_the_input_pass():
    """A conv whose residual is its own input (HiFi-GAN's ResBlock2) starts its output as
    input + bias while it splits the input: the same result as with a separate residual."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 64)).astype(np.float32)
    taps = conv_amx.TimeMajorTaps((rng.standard_normal((5, 64, 64)) / 16).astype(np.float32),
                                  rng.standard_normal(64).astype(np.float32))
    fused = conv_amx.conv_time_major(x, taps, (6, 6), 3, 0.1, residual=x)
    apart = conv_amx.conv_time_major(x, taps, (6, 6), 3, 0.1, residual=x.copy())
    assert np.array_equal(fused, apart)


@pytest.mark.parametrize("own_input", [True, False], ids=["residual-is-input", "residual-apart"])
def test_convs_add_into_one_buffer(own_input):
    """Two convs written into one buffer, the second accumulating: the sum of the two (how
    the decoder sums its resblocks)."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((200, 32)).astype(np.float32)
    res = x if own_input else rng.standard_normal((200, 32)).astype(np.float32)
    taps = [conv_amx.TimeMajorTaps((rng.standard_normal((3, 32, 32)) / 10).astype(np.float32),
                                   rng.standard_normal(32).astype(np.float32)) for _ in range(2)]
    apart = [conv_amx.conv_time_major(x, t, (1, 1), 1, 0.1, res).copy() for t in taps]
    sums = conv_amx.out_buffer(200, taps[0])
    for k, t in enumerate(taps):
        conv_amx.conv_time_major(x, t, (1, 1), 1, 0.1, res, out=sums, accumulate=k > 0)
    assert np.abs(sums[:200, :32] - (apart[0] + apart[1])).max() < 1e-5

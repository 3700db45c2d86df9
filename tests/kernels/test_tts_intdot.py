"""The exact integer products of Kokoro's int8 graph (kernels/tts/intdot.py, the LSTM's
recurrence in kernels/tts/lstm.py) against their plain int64 references, bit for bit: shapes
with row tails (outputs not a multiple of the tile's rows), lane tails (tokens or frames not
a multiple of the vector), sums not a multiple of 4, int8 and uint8 weights with their zero
points, and the tile variants other CPUs get (8 lanes; plain IR where there is no VNNI)."""
import numba
import numpy as np
import pytest

from dasllama.kernels.tts import amx, intdot
from dasllama.kernels.tts.intdot import (conv_int, conv_int_ref, conv_int_scaled, int_weights, matmul_int,
                                         matmul_int_ref, product_kernel, scale_rows)

# what AVX-VNNI runs (ymm vpdpbusd), the tiles' sums in plain IR (the tile without VNNI), and
# the widening loop a CPU without VNNI runs (None)
OTHER_KERNELS = {"ymm_vnni": (4, 3, 8, True), "ymm_plain": (4, 3, 8, False), "zmm_plain": (4, 6, 16, False),
                 "widening": None}


def _weights(rng, shape, dtype):
    if dtype == np.uint8:
        return rng.integers(0, 256, shape, dtype=np.uint8), np.uint8(rng.integers(0, 256))
    return rng.integers(-128, 128, shape, dtype=np.int8), rng.integers(-128, 128, shape[-1:], dtype=np.int8)


@pytest.mark.parametrize("m, k, n", [(1, 128, 256), (3, 301, 70), (17, 5, 3), (97, 768, 37)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_matmul_is_exact(m, k, n, dtype):
    rng = np.random.default_rng(m * k + n)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b, b_zp = _weights(rng, (k, n), dtype)
    want = matmul_int_ref(a, 131, b, b_zp)
    assert np.array_equal(matmul_int(a, 131, int_weights(b, b_zp)), want)


def test_extreme_values_wrap_as_int32_does():
    # 255 * 127 * 4 a lane: vpdpbusd sums without saturating, and the zero-point terms
    # cancel modulo 2**32 into the int32 ORT holds
    a = np.full((5, 1000), 255, np.uint8)
    b = np.full((1000, 20), -128, np.int8)
    for a_zp in (0, 255):
        assert np.array_equal(matmul_int(a, a_zp, int_weights(b, np.int8(127))), matmul_int_ref(a, a_zp, b, 127))


@pytest.mark.parametrize("c_in, c_out, k, n, pads, dilation", [
    (128, 128, 11, 1001, (15, 15), 3),   # a decoder resblock's dilated conv
    (22, 128, 1, 300, (0, 0), 1),        # a 1x1 over the harmonic source's 22 channels
    (7, 5, 3, 17, (1, 2), 2),            # channels not in quads, outputs not in rows, lopsided pads
    (1, 1, 3, 40, (1, 1), 1),            # one channel in, one out
    (9, 6, 5, 3, (2, 2), 1),             # shorter than a vector
])
def test_conv_is_exact(c_in, c_out, k, n, pads, dilation):
    rng = np.random.default_rng(c_in * n + k)
    x = rng.integers(0, 256, (c_in, n), dtype=np.uint8)
    w, w_zp = _weights(rng, (c_out, c_in, k), np.uint8)
    got = conv_int(x, 77, int_weights(w, w_zp), pads, dilation)
    want = conv_int_ref(x, 77, w, w_zp, pads, dilation)
    assert got.shape == want.shape == (c_out, n + sum(pads) - dilation * (k - 1))
    assert np.array_equal(got, want)


def _scaled_ref(x, x_zp, w, w_zp, pads, dilation, bias, scale, residual):
    acc = conv_int_ref(x, x_zp, w, w_zp, pads, dilation)
    out = np.empty(acc.shape, np.float32)
    scale_rows(acc, bias, scale, residual, out)
    return out


@pytest.mark.parametrize("c_in, c_out, k, n, pads, dilation", [
    (128, 128, 11, 1001, (15, 15), 3),   # a decoder resblock's dilated conv
    (90, 64, 3, 70, (1, 1), 1),          # channels not in 64s, frames not in 32s
    (256, 32, 1, 33, (0, 0), 1),         # one tap, one block of rows
    (22, 128, 1, 300, (0, 0), 1),        # too short a sum for the AMX tiles
])
@pytest.mark.parametrize("with_residual", [False, True])
def test_scaled_conv_is_exact(c_in, c_out, k, n, pads, dilation, with_residual):
    # on AMX tiles where the OS grants them (the sums scaled as they are stored), else
    # conv_int and scale_rows: bit for bit the integer reference, then the same float ops
    rng = np.random.default_rng(c_in * n + k)
    x = rng.integers(0, 256, (c_in, n), dtype=np.uint8)
    w, w_zp = _weights(rng, (c_out, c_in, k), np.uint8)
    n_out = n + sum(pads) - dilation * (k - 1)
    bias = rng.integers(-5000, 5000, c_out).astype(np.int32)
    residual = rng.standard_normal((c_out, n_out)).astype(np.float32) if with_residual else np.zeros((0, 0), np.float32)
    weights = int_weights(w, w_zp)
    assert (weights.tiles is not None) == (amx.AMX and c_out % 32 == 0 and c_in * k >= 128)
    got = conv_int_scaled(x, 77, weights, pads, dilation, bias, np.float32(0.0123), residual)
    assert np.array_equal(got, _scaled_ref(x, 77, w, w_zp, pads, dilation, bias, np.float32(0.0123), residual))


@pytest.mark.skipif(not amx.AMX, reason="no AMX on this CPU (or the OS refused the tile state)")
def test_amx_sums_wrap_as_int32_does():
    x = np.full((256, 40), 255, np.uint8)
    w = np.zeros((32, 256, 3), np.uint8)        # w - 128 = -128 everywhere
    bias, none = np.zeros(32, np.int32), np.zeros((0, 0), np.float32)
    for x_zp in (0, 255):
        got = conv_int_scaled(x, x_zp, int_weights(w, np.uint8(255)), (1, 1), 1, bias, np.float32(1.0), none)
        assert np.array_equal(got, _scaled_ref(x, x_zp, w, np.uint8(255), (1, 1), 1, bias, np.float32(1.0), none))


@pytest.mark.parametrize("variant", sorted(OTHER_KERNELS))
def test_other_cpus_tiles_are_exact(variant):
    params = OTHER_KERNELS[variant]
    if params and params[3] and not intdot.VNNI:
        pytest.skip("LLVM cannot emit vpdpbusd for this CPU")
    if params and intdot.LANES % params[2]:
        pytest.skip("the buffers are sized for this CPU's narrower lanes")
    kernel = params and product_kernel(*params)
    rng = np.random.default_rng(7)
    x = rng.integers(0, 256, (13, 83), dtype=np.uint8)
    w, w_zp = _weights(rng, (10, 13, 3), np.uint8)
    assert np.array_equal(conv_int(x, 9, int_weights(w, w_zp), (1, 1), 2, kernel=kernel),
                          conv_int_ref(x, 9, w, w_zp, (1, 1), 2))
    a = rng.integers(0, 256, (21, 37), dtype=np.uint8)
    b, b_zp = _weights(rng, (37, 9), np.int8)
    assert np.array_equal(matmul_int(a, 200, int_weights(b, b_zp), kernel=kernel), matmul_int_ref(a, 200, b, b_zp))


@pytest.mark.skipif(not intdot.VNNI, reason="no VNNI on this CPU")
def test_the_machine_gets_vpdpbusd_where_it_has_it():
    # compiled here, not loaded from numba's disk cache, whose code numba does not disassemble
    kernel = numba.njit(**dict(intdot.PAR, cache=False))(intdot._run.py_func)
    conv_int(np.zeros((4, 40), np.uint8), 0, int_weights(np.zeros((4, 4, 3), np.uint8), np.uint8(0)), (1, 1),
             kernel=kernel)
    asm = "".join(kernel.inspect_asm().values())
    assert "vpdpbusd" in asm and ("zmm" in asm) == (intdot.LANES == 16)


def test_lstm_recurrence_matches_the_numpy_one():
    from dasllama.kernels.tts.lstm import lstm, lstm_ref, recurrent_weights
    rng = np.random.default_rng(3)
    n_dir, hidden, seq = 2, 36, 29                  # 4H = 144: not a whole number of tiles
    r = rng.integers(-128, 128, (n_dir, hidden, 4 * hidden), dtype=np.int8)
    r_zp = rng.integers(-3, 3, (n_dir, 4 * hidden), dtype=np.int8)
    gates_x = rng.standard_normal((n_dir, seq, 4 * hidden)).astype(np.float32)
    bias = rng.standard_normal((n_dir, 4 * hidden)).astype(np.float32)
    r_scale = np.array([2e-3, 3e-3], np.float32)
    h0 = rng.standard_normal((n_dir, hidden)).astype(np.float32)
    c0 = rng.standard_normal((n_dir, hidden)).astype(np.float32)
    h, c, y = h0.copy(), c0.copy(), np.empty((n_dir, seq, hidden), np.float32)
    lstm(gates_x, *recurrent_weights(r, r_zp), r_scale, bias, h, c, y)
    for d in range(n_dir):
        want = lstm_ref(gates_x[d], r[d], r_zp[d], r_scale[d], bias[d], h0[d], c0[d], reverse=d == 1)
        # exact integers every step; numba's exp and tanh may differ from numpy's in the last
        # bit (measured 1.5e-7 here, 4e-7 relative on Kokoro's LSTMs)
        assert np.abs(y[d] - want).max() < 1e-5, d
        assert np.array_equal(h[d], y[d, 0 if d else -1])

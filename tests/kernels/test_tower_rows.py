"""The towers' IR row passes (kernels/tower_rows.py) against numpy references."""
import numpy as np
import pytest
from numba import njit

from dasllama.kernels import tower_rows
from dasllama.kernels.actq import quantize_q8_0_rows, quantize_row_q8_0


def bf16_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("with_lo", [True, False])
@pytest.mark.parametrize("n", [512, 476, 33, 1])
def test_softmax_block_matches_reference(n, with_lo):
    """One key block of the online softmax: rows starting empty (max -inf) and rows with a
    running max above and below the block's, a ragged n. The exps are Cephes' expf (~1 ulp)
    split into bf16 parts: hi + lo to 2^-16 of e, hi alone to 2^-8; zeros past n."""
    run = tower_rows.softmax_block(with_lo)

    @njit
    def call(s, n, n_zero, p, m, l, o):
        run(s.ctypes.data, s.shape[1] * 4, n, n_zero, p.ctypes.data, p.shape[1] * p.shape[2] * 2,
            p.shape[2] * 2, m.ctypes.data, l.ctypes.data, o.ctypes.data, o.shape[1] * 4, o.shape[1], s.shape[0])

    rng = np.random.default_rng(n)
    rows, cols, d = 64, 512, 32
    s = (rng.standard_normal((rows, cols)) * 4).astype(np.float32)
    m = (rng.standard_normal(rows) * 4).astype(np.float32)
    m[:8] = -np.inf
    l = np.where(np.isinf(m), 0, rng.uniform(1, 5, rows)).astype(np.float32)
    o = np.where(np.isinf(m)[:, None], 0, rng.standard_normal((rows, d))).astype(np.float32)
    p = np.full((2, rows, cols), 0x3F80, np.uint16)              # ones: the zeros must be written
    n_zero = (n + 31) // 32 * 32
    m_new = np.maximum(m, s[:, :n].max(axis=1))
    alpha = np.exp(np.where(np.isinf(m), -np.inf, m - m_new).astype(np.float64))
    e = np.exp(s[:, :n].astype(np.float64) - m_new[:, None])
    l_ref, o_ref = l * alpha + e.sum(axis=1), o * alpha[:, None]
    call(s, n, n_zero, p, m, l, o)
    assert np.array_equal(m, m_new)
    np.testing.assert_allclose(l, l_ref, rtol=2e-6)
    np.testing.assert_allclose(o, o_ref, rtol=2e-6, atol=1e-30)
    got = bf16_float(p[0, :, :n]) + (bf16_float(p[1, :, :n]) if with_lo else 0)
    assert np.abs(got - e).max() <= e.max() * (2.0 ** -16 if with_lo else 2.0 ** -8)
    assert not p[0, :, n:n_zero].any() and (not with_lo or not p[1, :, n:n_zero].any())


def test_quantize_q8_0_rows_is_ggmls_to_the_bit():
    """Rows over six decades of scale, an all-zero block, ties at .5 and a lone value: the
    int8 quants and the f16-rounded scales equal actq.quantize_row_q8_0's."""
    run = quantize_q8_0_rows

    @njit
    def call(x, xq, xd):
        run(x.ctypes.data, x.strides[0], xq.ctypes.data, xq.strides[0], xd.ctypes.data, xd.strides[0],
            x.shape[1] // 32, x.shape[0])

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((40, 256)) * np.exp(rng.standard_normal((40, 1)) * 3)).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = np.arange(32) - 15.5             # x * 127 / 16.5 lands on halves
    x[2, 32:64] = 0
    x[2, 40] = -3.0
    xq, xd = np.ones(x.shape, np.int8), np.ones((40, 8), np.float32)
    ref_q, ref_d = np.zeros_like(xq), np.zeros_like(xd)
    for t in range(len(x)):
        quantize_row_q8_0(x[t], ref_q[t], ref_d[t], ref_d[t], False)
    call(x, xq, xd)
    assert np.array_equal(xq, ref_q)
    assert np.array_equal(xd.view(np.uint32), ref_d.view(np.uint32))

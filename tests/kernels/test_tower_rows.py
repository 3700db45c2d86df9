"""The towers' IR row passes (kernels/tower_rows.py) against numpy references."""
import numpy as np
import pytest
from numba import njit

from dasllama.kernels import tower_rows


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

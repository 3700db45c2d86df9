"""The media towers' AMX products against float64 references on random shapes with ragged
edges (tokens and outputs that are not multiples of a tile); skipped where the OS grants no AMX."""
import numpy as np
import pytest

from dasllama.kernels import amx_tower

needs_amx = pytest.mark.skipif(not amx_tower.INT8, reason="AMX-INT8 is not granted on this host")


def q8_0_rows(rng, n_rows, n_cols):
    """Random Q8_0 rows (uint8, n_rows x row bytes), a zero block among them."""
    q = rng.integers(-127, 128, (n_rows, n_cols // 32, 32)).astype(np.int8)
    d = rng.uniform(1e-3, 2e-2, (n_rows, n_cols // 32)).astype(np.float16)
    q[0, 0] = 0
    blocks = np.concatenate([d.view(np.uint8).reshape(n_rows, -1, 2), q.view(np.uint8)], axis=2)
    return blocks.reshape(n_rows, -1)


@needs_amx
@pytest.mark.parametrize("n_tok, n_cols, n_rows", [(1, 32, 16), (37, 96, 48), (70, 160, 100)])
def test_q8_0_amx_product_matches_reference(n_tok, n_cols, n_rows):
    """Exact block sums, folded in float32: within float32 rounding of the float64 fold."""
    rng = np.random.default_rng(n_tok)
    raw = q8_0_rows(rng, n_rows, n_cols)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    x[-1, :32] = 0                                   # an all-zero activation block
    y = amx_tower.q8_matmul(x, *amx_tower.pack_q8_0(raw.reshape(-1), n_rows, n_cols), n_rows)
    ref = amx_tower.q8_matmul_ref(x, raw, n_rows, n_cols)
    assert y.shape == (n_tok, n_rows)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.skipif(not amx_tower.BF16, reason="AMX-BF16 is not granted on this host")
@pytest.mark.parametrize("n_tok, n_cols, n_rows", [(1, 32, 16), (37, 100, 48), (70, 333, 45)])
@pytest.mark.parametrize("passes", ["F16_EXACT", "F16_PASSES"])
def test_f16_amx_product_matches_reference(n_tok, n_cols, n_rows, passes):
    """f16 = two bf16 parts exactly, so the four passes give the f16 products exactly: what is
    left is float32 summation, within 2^-20 of sum |x w| (a float32 dot's own rounding); the
    three without lo.lo are off by 2^-18 of a product more."""
    rng = np.random.default_rng(n_cols)
    rows = (rng.standard_normal((n_rows, n_cols)) * 0.05).astype(np.float16)
    x = (rng.standard_normal((n_tok, n_cols)) * 3).astype(np.float32)
    y = amx_tower.f16_matmul(x, amx_tower.pack_f16(rows), n_rows, getattr(amx_tower, passes))
    bound = 2.0 ** -20 if passes == "F16_EXACT" else 2.0 ** -18 + 2.0 ** -20
    scale = np.abs(x.astype(np.float16).astype(np.float64)) @ np.abs(rows.astype(np.float64)).T
    assert y.shape == (n_tok, n_rows)
    assert np.max(np.abs(y - amx_tower.f16_matmul_ref(x, rows)) / scale) < bound

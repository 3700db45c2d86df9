"""The media towers' AMX products against float64 references on random shapes with ragged
edges (tokens and outputs that are not multiples of a tile); skipped where the OS grants no AMX."""
import numpy as np
import pytest

from dasllama.kernels import amx_tower

needs_amx = pytest.mark.skipif(not amx_tower.AMX, reason="AMX-INT8 is not granted on this host")


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

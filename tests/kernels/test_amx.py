"""The float32-accurate product on AMX-BF16 tiles (kernels/amx.py) against float64: each
float32 is split into bf16 parts and the pass lists sum the products of the parts. Errors are
stated relative to sum_k |a_ik b_kj| (the scale of a dot's own float32 rounding): three passes
of two parts ~2^-17 a product, six of three parts float32's ~2^-24 plus the sum's rounding."""
import numpy as np
import pytest

from dasllama.kernels import amx

BOUNDS = {amx.PASSES_2: 2.0 ** -15, amx.PASSES_3: 2.0 ** -20}
SHAPES = [(1, 32, 32), (17, 40, 33), (64, 256, 96), (5, 7, 3), (33, 301, 70)]


def test_split_recovers_float32():
    """The parts sum back to x: to 2^-16 of |x| with two, exactly (to float32) with three."""
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 10.0 ** np.arange(-3, 5).repeat(512)
    x = x.astype(np.float32)
    parts = amx.bf16_float(amx.bf16_parts(x, 3))
    assert np.all(np.abs(parts[0] + parts[1] - x) <= 2.0 ** -16 * np.abs(x))
    assert np.all(parts.sum(axis=0) == x.astype(np.float64))


@pytest.mark.skipif(not amx.BF16, reason="no AMX-BF16 on this CPU (or the OS refused the tile state)")
@pytest.mark.parametrize("passes", [amx.PASSES_2, amx.PASSES_3], ids=["bf16x3", "bf16x6"])
@pytest.mark.parametrize("m, k, n", SHAPES)
def test_bf16_product_is_float32_accurate(m, k, n, passes):
    rng = np.random.default_rng(m * k + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) * 3.0).astype(np.float32)
    scale = np.abs(a).astype(np.float64) @ np.abs(b)
    got = amx.bf16_matmul(a, b, passes)
    assert got.shape == (m, n)
    assert np.max(np.abs(got - a.astype(np.float64) @ b) / scale) < BOUNDS[passes]
    # the tiles sum exactly the products of the parts, rounded only by float32 accumulation
    assert np.max(np.abs(got - amx.bf16_gemm_ref(a, b, passes)) / scale) < 2.0 ** -20

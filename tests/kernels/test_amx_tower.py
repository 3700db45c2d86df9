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
@pytest.mark.parametrize("n_tok, n_cols, n_rows", [(1, 32, 16), (37, 96, 48), (70, 160, 100), (45, 64, 96)])
def test_q8_0_amx_product_matches_reference(n_tok, n_cols, n_rows):
    """Exact block sums, folded in float32: within float32 rounding of the float64 fold. A
    width of whole 32-output strips (96) is written by the tiles themselves, bias and all, the
    others through a scratch."""
    rng = np.random.default_rng(n_tok)
    raw = q8_0_rows(rng, n_rows, n_cols)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    x[-1, :32] = 0                                   # an all-zero activation block
    bias = rng.standard_normal(n_rows).astype(np.float32)
    out = np.full((n_tok + 1, n_rows), 7, np.float32)   # a row past the tokens must stay
    y = amx_tower.q8_matmul(x, *amx_tower.pack_q8_0(raw.reshape(-1), n_rows, n_cols), n_rows, out=out[:n_tok], bias=bias)
    ref = amx_tower.q8_matmul_ref(x, raw, n_rows, n_cols) + bias
    assert (out[-1] == 7).all()
    assert y.shape == (n_tok, n_rows)
    assert np.abs(y - ref).max() <= 1e-5 * np.abs(ref).max()


@needs_amx
@pytest.mark.parametrize("n_rows", [64, 48])
def test_q8_0_epilogues_are_the_passes_they_replace(n_rows):
    """The residual and GELU epilogues give what the plain product and the pass after it
    give, to the bit, on the tiles' own stores (64 outputs) and through the scratch (48)."""
    from dasllama.kernels.tower_rows import bias_gelu_erf_rows
    rng = np.random.default_rng(n_rows)
    n_tok, n_cols = 40, 64
    packed = amx_tower.pack_q8_0(q8_0_rows(rng, n_rows, n_cols).reshape(-1), n_rows, n_cols)
    x = rng.standard_normal((n_tok, n_cols)).astype(np.float32)
    bias = rng.standard_normal(n_rows).astype(np.float32)
    y = amx_tower.q8_matmul(x, *packed, n_rows, bias=bias)
    stream = rng.standard_normal((n_tok, n_rows)).astype(np.float32)
    summed = stream.copy()
    amx_tower.q8_matmul(x, *packed, n_rows, out=summed, bias=bias, epilogue="residual")
    assert np.array_equal(summed, stream + y)
    gelu = amx_tower.q8_matmul(x, *packed, n_rows, bias=bias, epilogue="gelu_erf")
    ref = amx_tower.q8_matmul(x, *packed, n_rows)
    bias_gelu_erf_rows(ref, bias)
    assert np.array_equal(gelu, ref)


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


def attention_ref(qkv_t, n_head):
    """float64 softmax(q k^T) v per head of the transposed projections qkv_t (3 n, T)."""
    q, k, v = (part.astype(np.float64) for part in np.split(qkv_t, 3))
    d = len(q) // n_head
    out = []
    for h in range(n_head):
        rows = slice(h * d, (h + 1) * d)
        s = q[rows].T @ k[rows]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out.append(p @ v[rows].T / p.sum(axis=1, keepdims=True))
    return np.concatenate(out, axis=1)


@pytest.mark.skipif(not amx_tower.BF16, reason="AMX-BF16 is not granted on this host")
@pytest.mark.parametrize("n_tok, d, n_head", [(1, 32, 1), (100, 24, 2), (600, 72, 3)])
def test_attention_on_bf16_tiles_matches_reference(n_tok, d, n_head):
    """Ragged token counts and head widths (padded to 32 in the tiles), several key blocks for
    the online softmax; q split to 2^-17, k and v f16 (exact parts), the exps split to 2^-17:
    scores off by ~2^-17 of sum |q k|, measured 1e-6-2e-5 relative at these scales."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(n_tok)
    qkv = (rng.standard_normal((n_tok, 3 * n_head * d)) * 2).astype(np.float32)
    with ThreadPoolExecutor(2) as pool:
        y = amx_tower.attention(qkv, n_head, pool)
    qkv_t = np.ascontiguousarray(qkv.T)               # as the BLAS path takes it: q scaled, k, v f16
    qkv_t[:n_head * d] *= np.float32(1 / np.sqrt(d))
    qkv_t[n_head * d:] = qkv_t[n_head * d:].astype(np.float16)
    ref = attention_ref(qkv_t, n_head)
    assert y.shape == ref.shape
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 5e-5


@pytest.mark.parametrize("n_tok, d, n_head", [(1, 16, 2), (37, 32, 3), (100, 64, 2)])
def test_pack_head16_is_pack_head_to_the_bit(n_tok, d, n_head):
    """The IR packing of a head 16k wide writes the bits the value-by-value packing writes, an
    odd token count too (its last token's v pairs with zeros, the padding)."""
    from dasllama.kernels import amx
    pack_head, _ = amx_tower._attention_kernels(amx_tower.PV_PASSES)
    rng = np.random.default_rng(n_tok)
    qkv = (rng.standard_normal((n_tok, 3 * n_head * d)) * 3).astype(np.float32)
    t32, d32 = amx_tower.pad32(n_tok), amx_tower.pad32(d)

    def buffers():
        return (amx.zeros_aligned((2, t32 + 128, d32), np.uint16),
                amx.zeros_aligned((2, t32 // 16, d32 // 32, 16, 16, 2), np.uint16),
                amx.zeros_aligned((2, d32 // 16, t32 // 32, 16, 16, 2), np.uint16))

    for h in range(n_head):
        ref, ours = buffers(), buffers()
        pack_head(qkv, h, d, np.float32(1 / np.sqrt(d)), *ref)
        amx_tower.pack_head16(qkv, h, d, np.float32(1 / np.sqrt(d)), *ours)
        assert all(np.array_equal(a, b) for a, b in zip(ref, ours))

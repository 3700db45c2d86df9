"""The float32-accurate product on AMX-BF16 tiles (kernels/amx.py) against float64: each
float32 is split into bf16 parts and the pass lists sum the products of the parts. Errors are
stated relative to sum_k |a_ik b_kj| (the scale of a dot's own float32 rounding): three passes
of two parts ~2^-17 a product, six of three parts float32's ~2^-24 plus the sum's rounding."""
import numpy as np
import pytest
from numba import njit

from dasllama.kernels import amx
from dasllama.kernels.quants import JIT

BOUNDS = {amx.PASSES_2: 2.0 ** -15, amx.PASSES_3: 2.0 ** -20}
SHAPES = [(1, 32, 32), (17, 40, 33), (64, 256, 96), (5, 7, 3), (33, 301, 70)]


def bf16_float(parts):
    """float64 of bf16 bits."""
    return (parts.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def bf16_gemm_ref(a, b, passes):
    """float64 sum over passes (p, q) of A's part p @ B's part q: a (M, K), b (K, N) float32;
    what bf16_gemm sums, without its float32 rounding."""
    count = amx.n_parts(passes)
    ap, bp = bf16_float(amx.bf16_parts(a, count)), bf16_float(amx.bf16_parts(b, count))
    return sum(ap[p] @ bp[q] for p, q in passes)


# --- a plain matrix product on the tiles -------------------------------------------------------

MATMUL_TILES = (2, 2)       # 2 x 2 C tiles a call: the A and B tiles of one part each fit beside


def pack_rows(a, count):
    """A (M, K) float32 -> its parts (count, M padded to 32, K padded to 32) bf16 bits, zeros
    in the padding: the row-major A bf16_gemm reads."""
    m, k = a.shape
    out = amx.zeros_aligned((count, amx.pad_to(m, amx.TILE * MATMUL_TILES[0]), amx.pad_to(k, 32)), np.uint16)
    out[:, :m, :k] = amx.bf16_parts(a, count)
    return out


def pack_pairs(b, count):
    """B (K, N) float32 -> its parts (count, K padded to 32 / 2, N padded to 32, 2) bf16 bits:
    element [q, r, n, e] = part q of B[2r + e, n], the rows of pairs bf16_gemm reads."""
    k, n = b.shape
    out = np.zeros((count, amx.pad_to(k, 32), amx.pad_to(n, amx.TILE * MATMUL_TILES[1])), np.uint16)
    out[:, :k, :n] = amx.bf16_parts(b, count)
    c, kp, n_p = out.shape
    pairs = amx.empty_aligned((c, kp // 2, n_p, 2), np.uint16)
    pairs[...] = out.reshape(c, kp // 2, 2, n_p).transpose(0, 1, 3, 2)
    return pairs


_matmuls = {}


def matmul_kernel(passes):
    """run(ap, bp, c): c (M', N') float32 += the pass list's product of pack_rows' ap and
    pack_pairs' bp (M', N' their padded sizes)."""
    passes = tuple(passes)
    if passes in _matmuls:
        return _matmuls[passes]
    m_tiles, n_tiles = MATMUL_TILES
    gemm = amx.bf16_gemm(m_tiles, n_tiles, passes)
    rows, cols = amx.TILE * m_tiles, amx.TILE * n_tiles

    @njit(**JIT)
    def run(ap, bp, c):
        _, m, k = ap.shape
        n = bp.shape[2]
        a_rs, b_rs = k * 2, n * 4
        gemm(ap.ctypes.data, a_rs, 64, m * a_rs, 0, rows * a_rs,
             bp.ctypes.data, b_rs, 16 * b_rs, 64, (k // 2) * b_rs, 0, cols * 4,
             c.ctypes.data, n * 4, rows * n * 4, cols * 4, c.ctypes.data, n * 4, rows * n * 4, cols * 4,
             k // 32, 1, m // rows, n // cols)

    _matmuls[passes] = run
    return run


def bf16_matmul(a, b, passes=amx.PASSES_2):
    """a (M, K) @ b (K, N) float32 on the bf16 tiles with the given passes -> (M, N) float32."""
    count = amx.n_parts(passes)
    ap, bp = pack_rows(a, count), pack_pairs(b, count)
    c = amx.zeros_aligned((ap.shape[1], bp.shape[2]), np.float32)
    matmul_kernel(passes)(ap, bp, c)
    return c[:a.shape[0], :b.shape[1]]


def test_split_recovers_float32():
    """The parts sum back to x: to 2^-16 of |x| with two, exactly (to float32) with three."""
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 10.0 ** np.arange(-3, 5).repeat(512)
    x = x.astype(np.float32)
    parts = bf16_float(amx.bf16_parts(x, 3))
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
    got = bf16_matmul(a, b, passes)
    assert got.shape == (m, n)
    assert np.max(np.abs(got - a.astype(np.float64) @ b) / scale) < BOUNDS[passes]
    # the tiles sum exactly the products of the parts, rounded only by float32 accumulation
    assert np.max(np.abs(got - bf16_gemm_ref(a, b, passes)) / scale) < 2.0 ** -20

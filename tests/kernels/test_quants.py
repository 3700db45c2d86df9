"""Dequantisation is bit-exact with gguf.quants for every supported type."""
import numpy as np
import pytest

from dasllama.kernels import quants as Q

from .blocks import gguf_dequantize, random_weights

TYPES = [pytest.param(q, id=Q.type_name(q)) for q in Q.SUPPORTED]


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_bit_exact(qtype):
    n_rows, n_cols = 4, 768
    w = random_weights(qtype, n_rows, n_cols, seed=qtype)
    got = Q.dequantize(qtype, w, n_rows, n_cols)
    ref = gguf_dequantize(qtype, w, n_rows)
    assert got.shape == ref.shape == (n_rows, n_cols)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("qtype", TYPES)
def test_dequantize_row_picks_one_row(qtype):
    n_rows, n_cols = 5, 512
    w = random_weights(qtype, n_rows, n_cols, seed=1)
    out = np.full(n_cols, np.nan, np.float32)
    Q.dequantize_row(qtype, w, 3, n_cols, out)
    np.testing.assert_array_equal(out, gguf_dequantize(qtype, w, n_rows)[3])


def test_row_bytes_matches_gguf_block_sizes():
    assert Q.row_bytes(Q.Q8_0, 640) == 20 * 34
    assert Q.row_bytes(Q.Q4_K, 2048) == 8 * 144
    assert Q.row_bytes(Q.F16, 10) == 20


def test_q5_0_as_q8_0_keeps_every_value():
    n_rows, n_cols = 4, 768
    w = random_weights(Q.Q5_0, n_rows, n_cols, seed=2)
    copy = Q.q5_0_as_q8_0(w)
    assert copy.size == w.size // 22 * 34
    np.testing.assert_array_equal(Q.dequantize(Q.Q8_0, copy, n_rows, n_cols),
                                  Q.dequantize(Q.Q5_0, w, n_rows, n_cols))

"""Dequantisation is bit-exact with gguf.quants for every supported type, and every format
module of the registry says what it is."""
import numpy as np
import pytest
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from dasllama.kernels import dots as D
from dasllama.kernels import formats
from dasllama.kernels import quants as Q
from dasllama.kernels.actq import act_kind

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


def test_dequantize_row_for_a_set_decodes_each_of_its_formats():
    """The per-set lookup a model's step links (gemma3's formats here) gives dequantize_row's
    rows bit for bit, and leaves the row untouched for a format outside its set."""
    n_rows, n_cols = 5, 512
    row_of = Q.dequantize_row_for((Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q8_0_X16))
    for qtype in (Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K):
        w = random_weights(qtype, n_rows, n_cols, seed=2)
        out = np.full(n_cols, np.nan, np.float32)
        row_of(qtype, w, 3, n_cols, out)
        np.testing.assert_array_equal(out, gguf_dequantize(qtype, w, n_rows)[3])
    out = np.full(n_cols, np.nan, np.float32)
    row_of(Q.F16, random_weights(Q.F16, n_rows, n_cols), 3, n_cols, out)
    assert np.isnan(out).all()


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


@pytest.mark.parametrize("fmt", [pytest.param(f, id=formats.name_of(f)) for f in formats.FORMATS])
def test_each_format_module_is_its_gguf_type(fmt):
    # the layout is gguf-py's, the reference is gguf.quants' class of that type (F32/F16 have
    # none: numpy reads them), the dispatch reaches the module's own functions
    qtype = GGMLQuantizationType[formats.name_of(fmt)]
    assert fmt.ID == qtype and (fmt.BLOCK_ELEMS, fmt.BLOCK_BYTES) == GGML_QUANT_SIZES[qtype]
    assert all(0 <= off <= fmt.BLOCK_BYTES - 2 for off in fmt.F16_FIELDS)
    assert act_kind(fmt.ID) == fmt.ACT and D.fold_of(fmt.ID) == fmt.FOLD
    n_rows, n_cols = 2, 512
    w = random_weights(fmt.ID, n_rows, n_cols, seed=5)
    if fmt.REFERENCE is not None:
        assert fmt.REFERENCE.qtype == qtype
        ref = fmt.REFERENCE.dequantize(w.reshape(n_rows, -1)).astype(np.float32)
        np.testing.assert_array_equal(Q.dequantize(fmt.ID, w, n_rows, n_cols).view(np.uint32), ref.view(np.uint32))
    if hasattr(fmt, "quant"):
        assert D.quant_of(fmt.ID, w, 0, 7) == fmt.quant(w, 0, 7)

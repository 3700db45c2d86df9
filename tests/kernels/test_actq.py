"""Activation quantisers reproduce ggml's x86 quantize_row_q8_0 / q8_1 / q8_K.

The numpy references below restate ggml's formulas (AVX2 path for q8_0/q8_1, reference path
for q8_K) so that each rounding rule is visible in one line.
"""
import numpy as np
import pytest
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType

from dasllama.kernels import actq as A
from dasllama.kernels import quants as Q


def _x(n_tokens, n_cols, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n_tokens, n_cols)) * rng.uniform(0.1, 10, (n_tokens, 1))).astype(np.float32)
    x[0, 32:64] = 0  # an all-zero block
    x[0, 256:512] = 0  # and an all-zero super-block
    return x


def _run(kind, x):
    bufs = A.act_buffers(*x.shape)
    A.quantize_act(kind, x, *bufs)
    return bufs


def _np_q8_0(x):
    b = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(b).max(-1, keepdims=True)
    d = amax / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(b * inv).astype(np.int8)  # _mm256_round_ps: nearest even
    return q.reshape(x.shape), d[..., 0].astype(np.float16).astype(np.float32), q, d[..., 0]


@pytest.mark.parametrize("n_tokens", [3, 37])    # one call; PAR_ROWS-row calls on the pool, a short last
def test_q8_0_matches_ggml_avx2_formula(n_tokens):
    x = _x(n_tokens, 1024)
    xq, xd, _, _ = _run(A.ACT_Q8_0, x)
    q, d, _, _ = _np_q8_0(x)
    np.testing.assert_array_equal(xq, q)
    np.testing.assert_array_equal(xd, d)


def test_q8_0_agrees_with_gguf_reference_up_to_ties():
    # gguf (= quantize_row_q8_0_ref) rounds half away from zero with 1/d: the x86 path may
    # differ by one step on a few elements, never more.
    x = _x(2, 1024, seed=3)
    xq, xd, _, _ = _run(A.ACT_Q8_0, x)
    ref = gq.quantize(x, GGMLQuantizationType.Q8_0).reshape(-1, 34)
    ref_q = ref[:, 2:].view(np.int8).reshape(x.shape)
    np.testing.assert_array_equal(xd.reshape(-1), ref[:, :2].copy().view(np.float16)[:, 0].astype(np.float32))
    diff = np.abs(xq.astype(int) - ref_q)
    assert diff.max() <= 1 and (diff != 0).mean() < 1e-3


def test_q8_1_sums():
    x = _x(2, 512, seed=4)
    xq, xd, xa, _ = _run(A.ACT_Q8_1, x)
    q, d_h, q3, d = _np_q8_0(x)
    np.testing.assert_array_equal(xq, q)
    np.testing.assert_array_equal(xd, d_h)
    s = (d * q3.astype(np.int32).sum(-1).astype(np.float32)).astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(xa[:, :s.shape[1]], s)


@pytest.mark.parametrize("n_tokens", [3, 37])
def test_q8_k_matches_ggml_reference_formula(n_tokens):
    x = _x(n_tokens, 1024, seed=5)
    x[1, 256:512] = np.arange(256) - 127.5          # one magnitude twice (-127.5 first), and ties
    x[2, 512:768] = 0
    x[2, 600], x[2, 700] = 3.0, -3.0                  # the first of +-3 gives the scale's sign
    xq, xd, xa, _ = _run(A.ACT_Q8_K, x)
    for t in range(x.shape[0]):
        for b in range(x.shape[1] // 256):
            blk = x[t, 256 * b:256 * (b + 1)]
            i = np.argmax(np.abs(blk))  # first of the largest magnitudes, as ggml's `>` scan
            if blk[i] == 0:
                assert xd[t, b] == 0 and not xq[t, 256 * b:256 * (b + 1)].any()
                continue
            iscale = np.float32(-127) / blk[i]
            q = np.minimum(np.rint(iscale * blk), 127).astype(np.int8)  # nearest_int: nearest even
            np.testing.assert_array_equal(xq[t, 256 * b:256 * (b + 1)], q)
            assert xd[t, b] == np.float32(1) / iscale
            bsums = q.reshape(16, 16).sum(-1, dtype=np.int32)
            np.testing.assert_array_equal(xa[t, 16 * b:16 * (b + 1)], bsums)


@pytest.mark.parametrize("kind,dtype", [(A.ACT_F16, np.float16), (A.ACT_F32, np.float32)])
def test_float_kinds_round_like_numpy(kind, dtype):
    x = _x(2, 256, seed=6)
    *_, xf = _run(kind, x)
    np.testing.assert_array_equal(xf, x.astype(dtype).astype(np.float32))


def test_bf16_rounds_like_gguf():
    x = _x(2, 256, seed=7)
    *_, xf = _run(A.ACT_BF16, x)
    ref = gq.dequantize(gq.quantize(x, GGMLQuantizationType.BF16), GGMLQuantizationType.BF16)
    np.testing.assert_array_equal(xf, ref)


@pytest.mark.parametrize("qtype,kind", [(Q.Q4_0, 8), (Q.Q5_0, 8), (Q.Q8_0, 8), (Q.Q4_1, 9), (Q.Q5_1, 9),
                                        (Q.Q2_K, 15), (Q.Q3_K, 15), (Q.Q4_K, 15), (Q.Q5_K, 15),
                                        (Q.Q6_K, 15), (Q.F16, 1), (Q.BF16, 30), (Q.F32, 0)])
def test_act_kind_is_ggml_vec_dot_type(qtype, kind):
    assert A.act_kind(qtype) == kind

"""Quantised matmul: the plain reference against float64 numpy, every variant against it.

Bounds:
* against float64 dequant(W) @ dequant(quantised x): |err| <= 2e-6 * sum|w*x| per output
  (only float32 rounding of the block folds separates them);
* against float64 dequant(W) @ x (activation quantisation included): NMSE < 2e-4 for 8-bit
  activation formats, < 1e-6 for f16, < 1e-4 for bf16, < 1e-10 for f32;
* every variant is bit-identical to matmul_ref (all integer sums are exact and all share the
  ggml fold).
"""
import numba
import numpy as np
import pytest

from dasllama.kernels import actq as A
from dasllama.kernels import dots as D
from dasllama.kernels import matmul as M
from dasllama.kernels import quants as Q
from dasllama.kernels import cpu, simd, rowgroups, rowgroups_p16
from dasllama.kernels.rowgroup_template import F32_INT_BIAS

from .blocks import gguf_dequantize, random_weights

TYPES = [pytest.param(q, id=Q.type_name(q)) for q in Q.SUPPORTED]
NMSE = {A.ACT_Q8_0: 2e-4, A.ACT_Q8_1: 2e-4, A.ACT_Q8_K: 2e-4, A.ACT_F16: 1e-6, A.ACT_BF16: 1e-4,
        A.ACT_F32: 1e-10}


def _case(qtype, n_rows=24, n_cols=512, n_tokens=5, seed=0):
    w = random_weights(qtype, n_rows, n_cols, seed=seed)
    x = np.random.default_rng(seed + 1).standard_normal((n_tokens, n_cols)).astype(np.float32)
    return w, x


def _quantised(qtype, x):
    bufs = A.act_buffers(*x.shape)
    A.quantize_act(A.act_kind(qtype), x, *bufs)
    return bufs


def _dequantised_act(qtype, x, bufs):
    xq, xd, xa, xf = bufs
    kind = A.act_kind(qtype)
    if kind in (A.ACT_Q8_0, A.ACT_Q8_1):
        return xq.astype(np.float64) * np.repeat(xd, 32, axis=1)
    if kind == A.ACT_Q8_K:
        return xq.astype(np.float64) * np.repeat(xd[:, :x.shape[1] // 256], 256, axis=1)
    return xf.astype(np.float64)


def _every_variant_gives(ref, qtype, w, n_rows, x):
    """Each of the format's variants, called by name, gives `ref` bit for bit."""
    for name, _ in M.VARIANTS[qtype]:
        got = M.matmul_f32(qtype, w, n_rows, x.shape[1], x, variant=name)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), err_msg=name)


def _ref(qtype, w, x):
    n_tokens, n_cols = x.shape
    n_rows = w.size // Q.row_bytes(qtype, n_cols)
    bufs = _quantised(qtype, x)
    out = np.empty((n_tokens, n_rows), np.float32)
    M.matmul_ref(qtype, w, n_rows, n_cols, *bufs, n_tokens, out)
    return out, bufs


@pytest.mark.parametrize("qtype", TYPES)
def test_reference_matches_float64_of_the_same_quants(qtype):
    w, x = _case(qtype)
    out, bufs = _ref(qtype, w, x)
    W = gguf_dequantize(qtype, w, out.shape[1]).astype(np.float64)
    X = _dequantised_act(qtype, x, bufs)
    if A.act_kind(qtype) == A.ACT_Q8_1:
        # ggml multiplies the block min by the activation's stored f16 sum s, not by d*sum(q)
        _, _, xa, _ = bufs
        n_blocks = x.shape[1] // 32
        m = w.reshape(-1, Q.BLOCK_BYTES[qtype])[:, 2:4].copy().view(np.float16).astype(np.float64)
        m = m.reshape(W.shape[0], n_blocks)
        W = W - np.repeat(m, 32, axis=1)
        exact = X @ W.T + xa[:, :n_blocks].astype(np.float64) @ m.T
        scale = np.abs(X) @ np.abs(W).T + np.abs(xa[:, :n_blocks]) @ np.abs(m).T
    else:
        exact = X @ W.T
        scale = np.abs(X) @ np.abs(W).T
    assert np.all(np.abs(out - exact) <= 2e-6 * scale)


@pytest.mark.parametrize("qtype", TYPES)
def test_reference_nmse_against_float_weights(qtype):
    w, x = _case(qtype, seed=2)
    out, _ = _ref(qtype, w, x)
    exact = x.astype(np.float64) @ gguf_dequantize(qtype, w, out.shape[1]).astype(np.float64).T
    nmse = ((out - exact) ** 2).sum() / (exact ** 2).sum()
    assert nmse < NMSE[A.act_kind(qtype)]


@pytest.mark.parametrize("qtype", TYPES)
def test_every_variant_is_bit_identical_to_the_reference(qtype):
    # odd sizes: a row tail and a token tail for every tile shape
    n_rows, n_tokens = 19, 7
    w, x = _case(qtype, n_rows=n_rows, n_tokens=n_tokens, seed=3)
    ref, _ = _ref(qtype, w, x)
    _every_variant_gives(ref, qtype, w, n_rows, x)
    for n in (1, 2):  # decode and a short prefill take the T=1 / small-T paths
        got = M.matmul_f32(qtype, w, n_rows, x.shape[1], x[:n])
        if not np.array_equal(got, ref[:n]):
            # what a report from another machine needs: the variant in force, the CPU, the
            # threading layer, and whether the same call fails again (a race) or always
            active = {k: v for k, v in M.ACTIVE.items() if k[0] == qtype}
            again = np.array_equal(M.matmul_f32(qtype, w, n_rows, x.shape[1], x[:n]), ref[:n])
            direct = np.array_equal(M.matmul_f32(qtype, w, n_rows, x.shape[1], x[:n],
                                                 variant=active[qtype, "decode" if n == 1 else "prefill"]), ref[:n])
            info = cpu.probe()
            pytest.fail(f"matmul's dispatch, {n} token(s), active {active}, cpu {info.model} ({info.cpu_class}), "
                        f"threading {numba.threading_layer()}: got {got[0, :6]}, want {ref[0, :6]}; "
                        f"the same call again {'passes' if again else 'fails'}, the variant called directly "
                        f"{'passes' if direct else 'fails'}")


@pytest.mark.parametrize("qtype", [pytest.param(q, id=Q.type_name(q)) for q in (Q.F16, Q.BF16, Q.F32)])
@pytest.mark.parametrize("n_rows,n_cols", [(5, 32), (5, 96), (8, 48), (8, 40)])
def test_float_variants_on_both_ggml_folds(qtype, n_rows, n_cols):
    # vec_dot sums the last n_cols % 64 in double after 64-wide fma steps; tinyBLAS (T >= 2,
    # rows % 4 == 0, cols % 16 == 0) keeps one 16-lane accumulator: (8, 48) takes it
    w, x = _case(qtype, n_rows=n_rows, n_cols=n_cols, n_tokens=7, seed=4)
    ref, _ = _ref(qtype, w, x)
    _every_variant_gives(ref, qtype, w, n_rows, x)


def test_float_folds_agree_closely_across_the_switch():
    w, x = _case(Q.F16, n_rows=8, n_cols=48, n_tokens=2, seed=5)
    both = M.matmul_f32(Q.F16, w, 8, 48, x)        # tinyBLAS for the pair of tokens
    one = M.matmul_f32(Q.F16, w, 8, 48, x[:1])     # vec_dot for a single token
    np.testing.assert_allclose(both[0], one[0], rtol=1e-5, atol=1e-5)


@numba.njit
def _decode_step(qtype, w, n_rows, x, xq, xd, xa, xf, out):
    """What the model does: quantise and multiply from inside compiled code."""
    M.quantize_act(M.act_kind(qtype), x, xq, xd, xa, xf)
    M.matmul(qtype, w, n_rows, x.shape[1], xq, xd, xa, xf, x.shape[0], out)


def test_matmul_is_callable_from_njit():
    qtype = Q.Q8_0
    w, x = _case(qtype, n_tokens=1)
    bufs = A.act_buffers(4, x.shape[1])  # buffers sized for more tokens than used
    out = np.zeros((4, 24), np.float32)
    _decode_step(qtype, w, 24, x, *bufs, out)
    np.testing.assert_array_equal(out[:1], _ref(qtype, w, x)[0])


def test_set_active_switches_the_dispatched_variant():
    qtype = Q.Q5_0
    before = {ph: M.ACTIVE[qtype, ph] for ph in M.PHASES}
    try:
        mm = M.set_active(qtype, "ref", phase="prefill")
        assert M.ACTIVE[qtype, "prefill"] == "ref" and M.ACTIVE[qtype, "decode"] == before["decode"]
        assert mm is M.matmul
        with pytest.raises(KeyError):
            M.set_active(qtype, "no_such_variant")
    finally:
        for ph, name in before.items():
            M.set_active(qtype, name, phase=ph)


K_QUANTS = [pytest.param(q, id=Q.type_name(q)) for q in (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)]


@pytest.mark.parametrize("qtype", K_QUANTS)
@pytest.mark.parametrize("n_rows,n_tokens", [(24, 6), (24, 9), (19, 9)])
def test_k_quant_variants_on_llama_cpp_batch_paths(qtype, n_rows, n_tokens):
    # 24 rows: Q4_K (and Q2_K with AVX-512) repacked, the first T - T%4 tokens on the gemm's
    # fold; 19 rows: not repacked; from 9 tokens the tiled K-quant matmul takes every token
    w, x = _case(qtype, n_rows=n_rows, n_tokens=n_tokens, seed=6)
    ref, _ = _ref(qtype, w, x)
    _every_variant_gives(ref, qtype, w, n_rows, x)
    n_batch, path = D.gemm_tokens(qtype, n_rows, x.shape[1], n_tokens)
    if path != D.PATH_VEC and n_batch:   # the batch fold is not the gemv's on these tokens
        one = np.concatenate([M.matmul_f32(qtype, w, n_rows, x.shape[1], x[t:t + 1]) for t in range(n_batch)])
        assert not np.array_equal(one, ref[:n_batch])


@pytest.mark.parametrize("qtype", [pytest.param(q, id=Q.type_name(q)) for q in (Q.Q8_0, Q.Q5_0)])
@pytest.mark.parametrize("n_rows,n_tokens", [(19, 29), (8, 16)])
def test_variants_on_full_token_tiles(qtype, n_rows, n_tokens):
    # enough tokens that every tile shape (up to 12 tokens) runs full tiles and a tail
    w, x = _case(qtype, n_rows=n_rows, n_tokens=n_tokens, seed=7)
    ref, _ = _ref(qtype, w, x)
    _every_variant_gives(ref, qtype, w, n_rows, x)


@pytest.mark.parametrize("qtype", [pytest.param(q, id=Q.type_name(q)) for q in (Q.Q8_0, Q.Q5_0)])
@pytest.mark.parametrize("plan", [pytest.param(p, id=n) for n, p in simd._W_PLANS])
def test_wide_tiles_on_any_host(qtype, plan):
    # the 512-bit tiles are variants only with AVX-512 VNNI; elsewhere their vpdpbusd is
    # spelt in plain IR, which still checks the offset trick and the fold bit for bit
    w, x = _case(qtype, n_rows=19, n_tokens=29, seed=9)
    ref, bufs = _ref(qtype, w, x)
    got = np.full_like(ref, np.nan)
    kernel = simd.make_kernel(qtype, vnni=simd.HAS_VNNI, wide=True, **plan)
    kernel(w, 19, x.shape[1], *bufs, 29, got)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


def test_q5_0_copied_as_q8_0_multiplies_bit_for_bit_alike():
    w, x = _case(Q.Q5_0, n_rows=19, n_tokens=9, seed=8)
    ref, _ = _ref(Q.Q5_0, w, x)
    got, _ = _ref(Q.Q8_0, Q.q5_0_as_q8_0(w), x)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))



@pytest.mark.parametrize("vnni,width", [(False, 8), (True, 8), (True, 16)])
def test_q5_0_rows_copy_as_their_q8_0_rewrite_does(vnni, width):
    # the x8/x16 copies read Q5_0's 5-bit quants themselves, without q5_0_as_q8_0's array:
    # the same bytes, in the signed (no VNNI) and the offset form
    w, _ = _case(Q.Q5_0, n_rows=32, n_tokens=1, seed=5)
    repack, _ = rowgroups.q8_0_x8(vnni, width)
    direct = repack.of_q5_0(w, 32, 512)
    assert direct is not None
    np.testing.assert_array_equal(direct, repack(Q.q5_0_as_q8_0(w), 32, 512))

def _without_minus_128(w):
    """Q8_0 bytes with every quant of -128 made -127 (ggml's quantiser writes none)."""
    q = w.reshape(-1, 34)[:, 2:]
    q[q == 0x80] = 0x81
    return w


def _multiply_copy(qtype, w, n_rows, n_cols, bufs, n_tokens, copy, kernel=None):
    """The product through the `copy` ("x8", "x16") of w: the kernel of its layout (the
    16-row ones run anywhere, their zmm operations spelt in plain IR without AVX-512)."""
    layout = rowgroups.copy_layout(qtype, n_rows, copy)
    packed = rowgroups.make_copy(qtype, w, n_rows, n_cols, name=copy)
    assert packed.size == n_rows * Q.row_bytes(layout, n_cols)
    got = np.full((n_tokens, n_rows), np.nan, np.float32)
    (kernel or rowgroups.KERNELS[layout])(packed, n_rows, n_cols, *bufs, n_tokens, got)
    return got


# (rows, tokens) per copy: the 16-row copy's tiles take tokens two by two, then one
_COPY_CASES = {"x8": [(8, 1), (16, 5), (24, 33), (64, 130)], "x16": [(16, 1), (16, 6), (48, 33), (64, 130)]}
_Q5_0_P16_CASES = [("Q5_0", "p16", 16, 1), ("Q5_0", "p16", 48, 3), ("Q5_0", "p16", 64, 7)]


@pytest.mark.parametrize("source,copy,n_rows,n_tokens", [(s, c, r, t) for s in ("Q8_0", "Q5_0")
                                                         for c, cases in _COPY_CASES.items() for r, t in cases]
                         + _Q5_0_P16_CASES)
def test_q8_0_copies_multiply_bit_for_bit_alike(source, copy, n_rows, n_tokens):
    # the copies of model.weight_copies: 8 or 16 rows a vector, the token's bytes broadcast
    # (Q5_0's p16 copy in its own 22 bytes a row and block, folded as the Q8_0 copies)
    qtype = getattr(Q, source)
    w, x = _case(qtype, n_rows=n_rows, n_tokens=n_tokens, seed=n_rows + n_tokens)
    w = _without_minus_128(w) if qtype == Q.Q8_0 else w
    ref, bufs = _ref(qtype, w, x)
    got = _multiply_copy(qtype, w, n_rows, x.shape[1], bufs, n_tokens, copy)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("qtype", [Q.Q5_0, Q.Q8_0, Q.Q4_K, Q.Q6_K, Q.Q4_1], ids=Q.type_name)
def test_fused_decode_gives_each_matrix_its_own_product(qtype):
    # the step's q, k, v (gate, up) of one token in one region: each output as matmul's, and a
    # matrix of 0 rows neither read nor written; the file's blocks in more tokens are left to
    # matmul (False, nothing written)
    shapes = (37, 16, 21)
    ws = [random_weights(qtype, r, 512, seed=i) for i, r in enumerate(shapes)]
    x = np.random.default_rng(9).standard_normal((1, 512)).astype(np.float32)
    refs = [_ref(qtype, w, x)[0] for w in ws]
    bufs = _quantised(qtype, x)
    fused = M.fused_for((qtype,))
    for n in (3, 2):
        outs = [np.full((1, r), np.nan, np.float32) for r in shapes]
        rows = [r if i < n else 0 for i, r in enumerate(shapes)]
        assert fused(qtype, ws[0], rows[0], outs[0], ws[1], rows[1], outs[1], ws[2], rows[2], outs[2], 512, *bufs, 1)
        for i in range(3):
            if i < n:
                np.testing.assert_array_equal(outs[i].view(np.uint32), refs[i].view(np.uint32), str(i))
            else:
                assert np.isnan(outs[i]).all()
    x3 = np.random.default_rng(9).standard_normal((3, 512)).astype(np.float32)
    outs = [np.full((3, r), np.nan, np.float32) for r in shapes]
    assert not fused(qtype, ws[0], 37, outs[0], ws[1], 16, outs[1], ws[2], 21, outs[2], 512, *_quantised(qtype, x3), 3)
    assert all(np.isnan(out).all() for out in outs)


@pytest.mark.parametrize("qtype,n_tokens", [(Q.Q8_0, 1), (Q.Q8_0, 5), (Q.Q4_0, 3), (Q.Q4_K, 2), (Q.Q4_K, 6),
                                            (Q.Q6_K, 8), (Q.Q6_K, 4), (Q.Q5_0, 1), (Q.Q5_0, 5)], ids=str)
def test_fused_products_through_the_copies(qtype, n_tokens):
    # a decode step's one token and a batched step's few through the copies in one region:
    # each token's product as matmul's, Q4_K's first tokens through llama.cpp's gemm fold (its
    # batches of 4), the rest through the gemv's
    shapes = (48, 16, 32)
    ws = [random_weights(qtype, r, 512, seed=i) for i, r in enumerate(shapes)]
    ws = [_without_minus_128(w) for w in ws] if qtype == Q.Q8_0 else ws
    x = np.random.default_rng(3).standard_normal((n_tokens, 512)).astype(np.float32)
    refs = [_ref(qtype, w, x)[0] for w in ws]
    bufs = _quantised(qtype, x)
    for copy in ["x8", "x16", "p16"] if rowgroups.HAS_X16 else ["x8"]:
        layout = rowgroups.copy_layout(qtype, 16, copy)
        last = rowgroups.decode_tokens(layout) if layout in rowgroups.PACKED else n_tokens
        if layout is None or not rowgroups.min_tokens(layout) <= n_tokens <= last:
            continue
        packed = [rowgroups.make_copy(qtype, w, r, 512, name=copy) for w, r in zip(ws, shapes)]
        outs = [np.full((n_tokens, r), np.nan, np.float32) for r in shapes]
        assert M.fused_for((layout,))(layout, packed[0], 48, outs[0], packed[1], 16, outs[1], packed[2], 32,
                                      outs[2], 512, *bufs, n_tokens)
        for out, ref in zip(outs, refs):
            np.testing.assert_array_equal(out.view(np.uint32), ref.view(np.uint32), copy)


def test_the_engine_dispatches_the_copies_it_makes():
    # matmul (the forward's) runs each layout's kernel where this CPU is offered the copy
    w, x = _case(Q.Q8_0, n_rows=32, n_tokens=7, seed=2)
    ref, bufs = _ref(Q.Q8_0, _without_minus_128(w), x)
    for copy in ["x8", "x16"] if rowgroups.HAS_X16 else ["x8"]:
        got = _multiply_copy(Q.Q8_0, w, 32, x.shape[1], bufs, 7, copy, kernel=lambda *a: M.matmul(
            rowgroups.copy_layout(Q.Q8_0, 32, copy), *a))
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), copy)


@pytest.mark.parametrize("width,step,n_rows,n_tokens", [(8, 1, 8, 1), (8, 2, 24, 33), (8, 3, 16, 5),
                                                        (16, 1, 16, 5), (16, 2, 32, 33), (16, 3, 16, 7)])
def test_both_forms_of_the_q8_0_and_q4_0_copies_multiply_alike(width, step, n_rows, n_tokens):
    # the pmaddubsw forms (CPUs without VNNI) and the vpdpbusd forms are both ggml's int32
    # lanes, however many tokens share a pass over the blocks; a VNNI CPU runs both, so each
    # is held to the reference here (Q8_0_X16 has only the vpdpbusd form, spelt in plain IR
    # without VNNI)
    forms = [False, True] if simd.HAS_VNNI else [False]
    copy = f"x{width}"
    for source, n_cols in (("Q8_0", 256), ("Q4_0", 512)):
        qtype = getattr(Q, source)
        w, x = _case(qtype, n_rows=n_rows, n_cols=n_cols, n_tokens=n_tokens, seed=n_rows)
        w = _without_minus_128(w) if qtype == Q.Q8_0 else w
        ref, bufs = _ref(qtype, w, x)
        for vnni in forms:
            if qtype == Q.Q8_0:
                repack, kernel = rowgroups.q8_0_x8(vnni, width, step)
                packed = repack(w, n_rows, n_cols)
            else:
                kernel = rowgroups.q4_0_x8_kernel(vnni, width, step)
                packed = rowgroups.make_copy(qtype, w, n_rows, n_cols, name=copy)
            got = np.full_like(ref, np.nan)
            kernel(packed, n_rows, n_cols, *bufs, n_tokens, got)
            np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), f"{source} vnni={vnni}")


# (format, columns, (rows, tokens) per copy): Q4_K's first T - T % 4 tokens (T >= 4) fold as
# llama.cpp's repacked gemm, the rest as its gemv; Q6_K_X* spell only the tiled fold (T >= 8),
# Q6_K_P16 only the vec dot's (T < 8), Q4_K_P16 the gemm's and the gemv's of T < 8
_K_COPIES = [("Q4_0", 512, {"x8": [(8, 1), (16, 5), (24, 33), (64, 130)], "x16": [(16, 1), (32, 5), (64, 33)]}),
             ("Q4_K", 1024, {"x8": [(8, 1), (8, 3), (16, 4), (24, 5), (64, 13), (32, 130)],
                             "x16": [(16, 3), (16, 4), (32, 13), (32, 130)],
                             "p16": [(16, 1), (48, 3), (16, 4), (32, 5), (48, 7)]}),
             ("Q6_K", 1024, {"x8": [(8, 8), (16, 9), (24, 13), (64, 130)], "x16": [(16, 8), (32, 9), (48, 13)],
                             "p16": [(16, 1), (32, 3), (48, 7)]})]


@pytest.mark.parametrize("source,n_cols,copy,n_rows,n_tokens",
                         [(q, c, cp, r, t) for q, c, by_copy in _K_COPIES for cp, cases in by_copy.items()
                          for r, t in cases])
def test_copies_of_repacked_folds_multiply_bit_for_bit_alike(source, n_cols, copy, n_rows, n_tokens):
    qtype = getattr(Q, source)
    w, x = _case(qtype, n_rows=n_rows, n_cols=n_cols, n_tokens=n_tokens, seed=n_rows + n_tokens)
    ref, bufs = _ref(qtype, w, x)
    got = _multiply_copy(qtype, w, n_rows, n_cols, bufs, n_tokens, copy)
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))


@pytest.mark.parametrize("source", ["Q8_0", "Q4_K"])
def test_a_long_batch_multiplies_alike_in_panels_and_chunks(source):
    # 4096 columns: chunks of 32 tokens (the third holds Q4_K's switch from its gemm's tokens
    # to its gemv's, at 68) and panels of a few groups, so each thread's share of the 7
    # groups takes more than one panel, on one thread and on two
    qtype = getattr(Q, source)
    w, x = _case(qtype, n_rows=112, n_cols=4096, n_tokens=70, seed=11)
    w = _without_minus_128(w) if qtype == Q.Q8_0 else w
    ref, bufs = _ref(qtype, w, x)
    threads = numba.get_num_threads()
    try:
        for n in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(n)
            got = _multiply_copy(qtype, w, 112, 4096, bufs, 70, "x16")
            np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), f"{n} threads")
    finally:
        numba.set_num_threads(threads)


@pytest.mark.parametrize("step", [1, 3])
def test_k_quant_copies_fold_alike_however_many_tokens_share_a_pass(step):
    # Q4_K's tile passes its gemm tokens `step` at a time, its gemv tokens one at a time
    w, x = _case(Q.Q4_K, n_rows=16, n_cols=512, n_tokens=14, seed=3)
    ref, bufs = _ref(Q.Q4_K, w, x)
    for width in (8, 16):
        got = _multiply_copy(Q.Q4_K, w, 16, 512, bufs, 14, f"x{width}", kernel=rowgroups.q4_k_x8_kernel(width, step))
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), f"x{width}")
    if rowgroups.HAS_X16:       # the p16 copy's gemm tile likewise, in a batched step's 4-7 tokens
        for n_tokens in (4, 7):
            ref, bufs = _ref(Q.Q4_K, w, x[:n_tokens])
            got = _multiply_copy(Q.Q4_K, w, 16, 512, bufs, n_tokens, "p16", kernel=rowgroups_p16.q4_k_p16(step)[2])
            np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32), f"p16 T={n_tokens}")


def test_which_batches_a_copy_folds_as_the_file_does():
    assert rowgroups.min_tokens(Q.Q6_K_X8) == rowgroups.min_tokens(Q.Q6_K_X16) == 8
    assert rowgroups.min_tokens(Q.Q4_K_X8) == rowgroups.min_tokens(Q.Q4_K_X16) == 2
    assert rowgroups.min_tokens(Q.Q8_0_X8) == rowgroups.min_tokens(Q.Q4_0_X8) == rowgroups.min_tokens(Q.Q8_0_X16) == 1
    assert rowgroups.min_tokens(Q.Q8_0) == 2            # the plain Q8_0 copy of Q5_0 rows that do not group
    assert rowgroups.copy_layout(Q.Q5_0, 16) == Q.Q8_0_X8 and rowgroups.copy_layout(Q.Q5_0, 12) == Q.Q8_0
    assert rowgroups.copy_layout(Q.Q5_0, 32, "x16") == Q.Q8_0_X16 and rowgroups.copy_layout(Q.Q5_0, 24, "x16") == Q.Q8_0
    assert rowgroups.copy_layout(Q.Q4_K, 12) is None and rowgroups.copy_layout(Q.Q4_1, 16) is None
    assert rowgroups.copy_layout(Q.Q6_K, 24, "x16") is None and rowgroups.copy_layout(Q.Q6_K, 24) == Q.Q6_K_X8
    # K-quant copies serve batches only; the 16-row ones only where this CPU runs them
    assert rowgroups.layout_choices(Q.Q4_K, "decode") == ("file",) + ("p16",) * rowgroups.HAS_X16
    assert rowgroups.layout_choices(Q.Q4_K, "prefill") == ("file", "x8") + ("x16",) * rowgroups.HAS_X16
    assert rowgroups.layout_choices(Q.Q5_0, "decode") == ("file", "x8") + ("x16", "p16") * rowgroups.HAS_X16
    # the packed copies serve decode (and a batched step's few tokens), never prefill
    assert rowgroups.layout_choices(Q.Q6_K, "decode") == ("file",) + ("p16",) * rowgroups.HAS_X16
    assert "p16" not in rowgroups.layout_choices(Q.Q6_K, "prefill")
    assert rowgroups.decode_tokens(Q.Q6_K_P16) == rowgroups.decode_tokens(Q.Q4_K_P16) == 7
    assert rowgroups.decode_tokens(Q.Q8_0_X16) == 1


def test_q8_0_x8_takes_a_minus_128_only_offset_and_declines_partial_groups():
    # -128 would wrap when the weights take the token's sign (psign, without VNNI): such a
    # matrix keeps its layout; stored as w + 128 (VNNI) it is a quant like any other
    w = _without_minus_128(random_weights(Q.Q8_0, 16, 64, seed=4))
    assert rowgroups.COPIES[Q.Q8_0, "x8"][1](w, 16, 64) is not None
    w.reshape(-1, 34)[5, 9] = 0x80
    w.reshape(-1, 34)[17, 2:] = 0x80
    x = np.random.default_rng(5).standard_normal((3, 64)).astype(np.float32)
    ref, bufs = _ref(Q.Q8_0, w, x)
    if not simd.HAS_VNNI:
        assert rowgroups.COPIES[Q.Q8_0, "x8"][1](w, 16, 64) is None
    else:
        got = np.full_like(ref, np.nan)
        M.matmul(Q.Q8_0_X8, rowgroups.COPIES[Q.Q8_0, "x8"][1](w, 16, 64), 16, 64, *bufs, 3, got)
        np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    got = _multiply_copy(Q.Q8_0, w, 16, 64, bufs, 3, "x16")   # the 16-row copy is always offset
    np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32))
    assert rowgroups.COPIES[Q.Q8_0, "x8"][1](random_weights(Q.Q8_0, 12, 64, seed=4), 12, 64) is None
    assert rowgroups.COPIES[Q.Q4_K, "x8"][1](random_weights(Q.Q4_K, 12, 256, seed=4), 12, 256) is None
    assert rowgroups.COPIES[Q.Q6_K, "x8"][1](random_weights(Q.Q6_K, 12, 256, seed=4), 12, 256) is None
    assert rowgroups.COPIES[Q.Q4_0, "x8"][1](random_weights(Q.Q4_0, 12, 64, seed=4), 12, 64) is None


def test_abs_quants():
    xq = np.array([[-127, -1, 0, 1, 127, -64]], np.int8)
    out = np.zeros((1, 6), np.uint8)
    rowgroups.abs_quants(xq, 1, 6, out)
    assert out.tolist() == [[127, 1, 0, 1, 127, 64]]


def aux_rows(f, n_tokens, width, dtype, *args):
    """The aux rows f writes into an out of its own (n_tokens, width)."""
    out = np.zeros((n_tokens, width), dtype)
    f(*args, out)
    return out


@pytest.mark.parametrize("n_cols", [32, 96, 640])
def test_lane_offsets_are_group_sums(n_cols):
    """The IR lane sums (64 quants a vpdpbusd, a 32-quant tail) equal group_sums' loop."""
    from dasllama.kernels.rowgroup_template import lane_offsets
    xq = np.random.default_rng(n_cols).integers(-127, 128, (5, n_cols)).astype(np.int8)
    for bias in (0, F32_INT_BIAS):
        assert np.array_equal(aux_rows(lane_offsets, 5, n_cols // 4, np.int32, xq, 5, n_cols, bias),
                              aux_rows(rowgroups.group_sums, 5, n_cols // 4, np.int32, xq, 5, n_cols, 4, -128) + bias)


def test_group_sums():
    xq = np.array([[-127, -127, -127, -127, 127, 1, 0, -3]], np.int8)
    assert aux_rows(rowgroups.group_sums, 1, 2, np.int32, xq, 1, 8, 4, -128).tolist() == [[128 * 508, -128 * 125]]
    assert aux_rows(rowgroups.group_sums, 1, 1, np.int32, xq, 1, 8, 8, 8).tolist() == [[8 * (-508 + 125)]]
    # the offset tiles' lane sums start biased, so their int32 bits are a float (lane_f32)
    from dasllama.kernels.rowgroup_template import lane_offsets
    biased = aux_rows(lane_offsets, 1, 8, np.int32, np.pad(xq, ((0, 0), (0, 24))), 1, 32, F32_INT_BIAS)[:, :2]
    assert (biased.view(np.float32) - np.float32(1.5 * 2 ** 23)).tolist() == [[128 * 508, -128 * 125]]


@pytest.mark.parametrize("offset", [8, 16])
def test_offset_sums_are_each_tokens_pair_sums_times_the_offset(offset):
    """The unsigned Q4_0/Q5_0 dots take offset * (x[2i] + x[2i+1]) out of pmaddubsw's pairs;
    at the int8 extremes too (16 * -254 must not wrap in int16)."""
    xq = np.random.default_rng(3).integers(-127, 128, (3, 64), dtype=np.int8)
    xq[0], xq[1] = -127, 127
    out = np.full((3, 64), np.nan, np.float32)        # the kernels hand over their f32 buffer
    simd.offset_sums(xq, 3, 64, offset, out)
    want = offset * (xq[:, 0::2].astype(np.int32) + xq[:, 1::2])
    assert np.array_equal(out.view(np.int16)[:, :32], want)


@pytest.mark.parametrize("offset", [16])
def test_offset_quad_sums_are_minus_the_offset_times_each_tokens_sums_of_four(offset):
    """The VNNI Q5_0 dot starts vpdpbusd of its unsigned quants from these."""
    xq = np.random.default_rng(4).integers(-127, 128, (3, 64), dtype=np.int8)
    xq[0], xq[1] = -127, 127
    out = np.full((3, 64), np.nan, np.float32)
    simd.offset_quad_sums(xq, 3, 64, offset, out)
    want = -offset * xq.astype(np.int32).reshape(3, 16, 4).sum(axis=2)
    assert np.array_equal(out.view(np.int32)[:, :16], want)


@pytest.mark.parametrize("qtype", TYPES)
def test_variants_are_named_after_the_tile_their_phase_runs(qtype):
    # a decode variant after its rows x 1 tile, a prefill one after its rows x tokens tile;
    # the default decode variant is the default prefill kernel (one compile for both)
    from dasllama.kernels import sidecar
    for name, params in M.VARIANTS[qtype]:
        if params["engine"] == "simd":
            (phase,) = params["phases"]
            rows, tokens = (params["rows1"], 1) if phase == "decode" else (params["rows"], params["tokens"])
            assert f"r{rows}t{tokens}" in name, name
    defaults = [sidecar.offered(M.VARIANTS[qtype], phase)[0] for phase in M.PHASES]
    assert M.build_kernel(qtype, defaults[0]) is M.build_kernel(qtype, defaults[1])

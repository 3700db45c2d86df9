"""kernels/ops.py against the float64 references of kernels/ops_ref.py."""
import numpy as np
import pytest
from numba import njit

from dasllama.kernels import attention as attn, fa_tiles, ops
from dasllama.kernels.ops_ref import attention_ref, gelu_ref, rms_norm_ref, rope_ref, silu_ref


def rope_tensor(x, positions, n_heads, head_dim, n_rot, freq_base, mode):
    """RoPE of one tensor as the forward runs it: the base's tables, then the rotation."""
    angles = np.empty((x.shape[0], 2, n_rot // 2), np.float32)
    ops.rope_angles(np.asarray(positions, np.int64), n_rot, freq_base, angles)
    ops.rope_apply(x, angles, n_heads, head_dim, n_rot, mode)


def nmse(a, ref):
    ref = np.asarray(ref, np.float64)
    return float(np.sum((np.asarray(a, np.float64) - ref) ** 2) / max(np.sum(ref ** 2), 1e-30))


rng = np.random.default_rng(7)


def attention(q, qpos, kc, vc, kpos, n_head, n_head_kv, hd, hdv, scale, softcap, n_swa, causal, out, n_threads=1):
    """attn.attention with its jobs' scratch made here (a model makes it once)."""
    attn.attention(q, qpos, kc, vc, kpos, n_head, n_head_kv, hd, hdv, scale, softcap, n_swa, causal, out,
                   n_threads, attn.attention_work(n_head, n_head_kv, hd, hdv))


def test_rms_norm():
    x = rng.standard_normal((5, 640)).astype(np.float32) * 3
    w = rng.standard_normal(640).astype(np.float32)
    out = np.empty_like(x)
    ops.rms_norm(x, w, 1e-6, out)
    np.testing.assert_allclose(out, rms_norm_ref(x, w, 1e-6), rtol=1e-5, atol=1e-6)


def test_rms_norm_heads_in_place():
    x = rng.standard_normal((3, 4 * 64)).astype(np.float32)
    w = rng.standard_normal(64).astype(np.float32)
    ref = rms_norm_ref(x.reshape(3, 4, 64), w, 1e-6).reshape(3, 256)
    ops.rms_norm_heads(x, w, 1e-6, 4, 64)
    np.testing.assert_allclose(x, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", [ops.ROPE_NORM, ops.ROPE_NEOX])
@pytest.mark.parametrize("n_rot", [64, 32])
def test_rope(mode, n_rot):
    T, heads, hd = 6, 3, 64
    x = rng.standard_normal((T, heads * hd)).astype(np.float32)
    positions = np.array([0, 1, 2, 17, 100, 511], np.int64)
    ref = rope_ref(x, positions, heads, hd, n_rot, 10000.0, mode == ops.ROPE_NEOX)
    rope_tensor(x, positions, heads, hd, n_rot, 10000.0, mode)
    # f32 angles iterated like ggml drift from the float64 powers by ~1e-6 relative per step
    assert nmse(x, ref) < 1e-9


def test_row_ops_batch_equals_rows():
    """From ops.PAR_ROWS rows on the row-wise ops (and the activation quantiser) split rows
    over the thread pool; every row must come out bit for bit as it does alone."""
    from dasllama.kernels.actq import act_buffers, quantize_act
    T = ops.PAR_ROWS + 5            # rms_norm's jobs of four rows, and a tail of one
    x = rng.standard_normal((T, 256)).astype(np.float32) * 3
    w = rng.standard_normal(256).astype(np.float32)
    up = rng.standard_normal((T, 256)).astype(np.float32)
    positions = np.arange(40, 40 + T, dtype=np.int64)
    tab = ops.gelu_table()

    def both(fn):
        """fn's result on all rows at once and row by row."""
        return fn(slice(0, T)), np.concatenate([fn(slice(t, t + 1)) for t in range(T)])

    def norm(s):
        out = np.empty_like(x[s])
        ops.rms_norm(x[s], w, 1e-6, out)
        return out

    def norm_in_place(s):      # the post-norms: out is x
        y = x[s].copy()
        ops.rms_norm(y, w, 1e-6, y)
        return y

    def norm_heads(s):
        y = x[s].copy()
        ops.rms_norm_heads(y, w[:64], 1e-6, 4, 64)
        return y

    def rope(s):
        y = x[s].copy()
        rope_tensor(y, positions[s], 4, 64, 64, 10000.0, ops.ROPE_NEOX)
        return y

    def glu(kind):
        def run(s):
            out = np.empty_like(x[s])
            if kind == "geglu":
                ops.geglu(x[s], up[s], tab, out)
            else:
                ops.swiglu(x[s], up[s], out)
            return out
        return run

    def quant(kind):
        def run(s):
            n = s.stop - s.start
            bufs = act_buffers(n, 256)
            quantize_act(kind, x[s], *bufs)
            return np.concatenate([b.reshape(n, -1).view(np.uint8) for b in bufs], axis=1)
        return run

    for fn in (norm, norm_in_place, norm_heads, rope, glu("geglu"), glu("swiglu"), quant(8), quant(9), quant(15)):
        batch, rows = both(fn)
        np.testing.assert_array_equal(batch, rows)


def test_gelu_table_and_geglu():
    gate = rng.standard_normal((4, 300)).astype(np.float32) * 4
    gate[0, :3] = (-11.0, 11.0, 0.0)
    up = rng.standard_normal((4, 300)).astype(np.float32)
    out = np.empty_like(gate)
    ops.geglu(gate, up, ops.gelu_table(), out)
    # the f16 table rounds gelu(x) at x rounded to half: ~1e-3 relative
    np.testing.assert_allclose(out, gelu_ref(gate) * up, rtol=4e-3, atol=2e-3)


def test_geglu_lanes_equal_the_scalar_rows():
    """geglu runs 16 lanes a step (a gather from the table; from PAR_ROWS rows on the thread
    pool) and each row's tail alone: bit for bit the scalar row's, at the +-10 edges, beyond
    them, NaN and inf, in a decode step's few rows as in a batch's many."""
    T, n = ops.PAR_ROWS + 3, 300     # 18 vectors and a tail of 12 a row
    gate = rng.standard_normal((T, n)).astype(np.float32) * 6
    gate[0, :8] = (-10.0, 10.0, -11.0, 11.0, np.nan, np.inf, -np.inf, -0.0)
    gate[1, 290:] = (-10.0, 10.0, -11.0, 11.0, np.nan, np.inf, -np.inf, -0.0, 9.99, -9.99)
    up = rng.standard_normal((T, n)).astype(np.float32)
    tab = ops.gelu_table()
    rows = np.empty_like(gate)
    for t in range(T):
        ops._geglu_row(gate[t], up[t], tab, rows[t])
    batch = np.empty_like(gate)
    ops.geglu(gate, up, tab, batch)
    np.testing.assert_array_equal(batch.view(np.uint32), rows.view(np.uint32))
    few = np.empty_like(gate[:4])
    ops.geglu(gate[:4], up[:4], tab, few)
    np.testing.assert_array_equal(few.view(np.uint32), rows[:4].view(np.uint32))



@pytest.mark.skipif(not ops.GATHER16, reason="the fused GeGLU quantiser takes AVX-512's gather")
def test_geglu_q8_0_is_geglu_then_its_quantisation():
    # a batch's GeGLU quantised for the down projection in registers: the Q8_0 bits of
    # quantize_act over geglu's floats (a ragged last job of rows, +-10 edges, a zero block)
    from dasllama.kernels import actq
    from dasllama.kernels.matmul import quantize_act
    T, n = 2 * ops.PAR_ROWS + 5, 320
    gate = (rng.standard_normal((T, n)) * 6).astype(np.float32)
    gate[0, :6] = (-10.0, 10.0, -11.0, 11.0, 9.99, -0.0)
    gate[3, 32:64] = -20.0                       # a block of zeros: scale 0
    up = rng.standard_normal((T, n)).astype(np.float32)
    tab = ops.gelu_table()
    hid = np.empty_like(gate)
    ops.geglu(gate, up, tab, hid)
    want = actq.act_buffers(T, n)
    quantize_act(actq.ACT_Q8_0, hid, *want)
    xq, xd = np.zeros((T, n), np.int8), np.zeros((T, n // 32), np.float32)
    ops.geglu_q8_0(gate, up, tab, xq, xd)
    np.testing.assert_array_equal(xq, want[0])
    np.testing.assert_array_equal(xd.view(np.uint32), want[1].view(np.uint32))

def test_swiglu():
    gate = rng.standard_normal((4, 300)).astype(np.float32) * 4
    up = rng.standard_normal((4, 300)).astype(np.float32)
    out = np.empty_like(gate)
    ops.swiglu(gate, up, out)
    np.testing.assert_allclose(out, silu_ref(gate) * up, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("T, pos0, n_swa, softcap", [
    (1, 40, 0, 0.0),        # decode: f16 accumulator
    (7, 0, 0, 0.0),         # short prefill
    (70, 3, 0, 0.0),        # tiled prefill: f32 accumulator
    (9, 20, 8, 0.0),        # sliding window
    (5, 10, 0, 50.0),       # logit softcap (gemma2)
    (70, 2, 0, 50.0),       # tiled with softcap
    (80, 0, 30, 0.0),       # tiled with a sliding window
])
def test_attention(T, pos0, n_swa, softcap):
    n_head, n_head_kv, hd = 4, 2, 64
    n = pos0 + T
    q = rng.standard_normal((T, n_head * hd)).astype(np.float32)
    k = rng.standard_normal((n, n_head_kv * hd)).astype(np.float32)
    v = rng.standard_normal((n, n_head_kv * hd)).astype(np.float32)
    kc = np.zeros((n + 4, n_head_kv * hd), np.uint16)
    vc = np.zeros_like(kc)
    attn.store_kv(k, kc, np.arange(n))
    attn.store_kv(v, vc, np.arange(n))
    np.testing.assert_array_equal(kc[:n], k.astype(np.float16).view(np.uint16))
    out = np.empty((T, n_head * hd), np.float32)
    scale = 1 / np.sqrt(hd)
    kpos = np.full(n + 4, -1, np.int64)
    kpos[:n] = np.arange(n)
    attention(q, pos0 + np.arange(T), kc, vc, kpos, n_head, n_head_kv, hd, hd, scale, softcap,
                   n_swa, True, out)
    ref = attention_ref(q, k.astype(np.float16), v.astype(np.float16), pos0, n_head, n_head_kv,
                        scale, softcap, n_swa)
    # f16 queries and the f16 accumulator of ggml's one-chunk path cost ~1e-6 NMSE
    assert nmse(out, ref) < 1e-5


@pytest.mark.parametrize("T, pos0, n_swa, causal", [
    (1, 600, 0, True),      # decode over a wrapped cache: split-KV over cells in ring order
    (5, 90, 32, True),      # one-chunk path, sliding window over a ring
    (70, 60, 48, True),     # tiled path over a ring
    (70, 10, 0, False),     # tiled, not causal (an image's tokens see each other)
    (6, 3, 0, False),       # one-chunk, not causal
])
def test_attention_over_cells_in_any_order(T, pos0, n_swa, causal):
    # keys live in cells in llama.cpp's order, not position order, with empty cells between:
    # the result is the attention over the positions the mask admits, whatever the cells
    n_head, n_head_kv, hd = 4, 2, 64
    n = pos0 + T
    n_cells = n + 40
    q = rng.standard_normal((T, n_head * hd)).astype(np.float32)
    k = rng.standard_normal((n, n_head_kv * hd)).astype(np.float32)
    v = rng.standard_normal((n, n_head_kv * hd)).astype(np.float32)
    cells = rng.permutation(n_cells)[:n]
    kc = np.zeros((n_cells, n_head_kv * hd), np.uint16)
    vc = np.zeros_like(kc)
    attn.store_kv(k, kc, cells)
    attn.store_kv(v, vc, cells)
    kpos = np.full(n_cells, -1, np.int64)
    kpos[cells] = np.arange(n)
    out = np.empty((T, n_head * hd), np.float32)
    attention(q, pos0 + np.arange(T), kc, vc, kpos, n_head, n_head_kv, hd, hd, 0.125, 0.0,
                   n_swa, causal, out, 2)
    ref = attention_ref(q, k.astype(np.float16), v.astype(np.float16), pos0, n_head, n_head_kv,
                        0.125, 0.0, n_swa, causal)
    assert nmse(out, ref) < 1e-5


@pytest.mark.parametrize("n_swa", [0, 40])
def test_tiled_attention_rows_do_not_depend_on_their_block(n_swa):
    # the tiled path runs query rows in blocks of FA_ROWS that share key and value chunks;
    # a row's bits must not depend on which block (or which call) it falls in
    n_head, n_head_kv, hd, T, skip = 4, 2, 96, 100, 27
    q = rng.standard_normal((T, n_head * hd)).astype(np.float32)
    kc = np.zeros((T, n_head_kv * hd), np.uint16)
    vc = np.zeros_like(kc)
    attn.store_kv(rng.standard_normal((T, n_head_kv * hd)).astype(np.float32), kc, np.arange(T))
    attn.store_kv(rng.standard_normal((T, n_head_kv * hd)).astype(np.float32), vc, np.arange(T))
    whole = np.empty((T, n_head * hd), np.float32)
    pos = np.arange(T)
    attention(q, pos, kc, vc, pos, n_head, n_head_kv, hd, hd, 0.1, 0.0, n_swa, True, whole)
    part = np.empty((T - skip, n_head * hd), np.float32)
    assert T - skip >= attn.FA_TILE_Q and skip % attn.FA_ROWS
    attention(q[skip:], pos[skip:], kc, vc, pos, n_head, n_head_kv, hd, hd, 0.1, 0.0, n_swa, True, part)
    np.testing.assert_array_equal(part.view(np.uint32), whole[skip:].view(np.uint32))


@pytest.mark.parametrize("hd, softcap, n_swa, n_threads", [
    (256, 0.0, 0, 2),       # gemma3's heads: the accumulator all half lanes (AVX512-FP16)
    (160, 50.0, 0, 1),      # half lanes, then f32 lanes; softcap
    (72, 0.0, 20, 16),      # f32 lanes and a tail; a window; more threads than jobs (heads split)
])
def test_batched_rows_attention_is_each_row_alone(hd, softcap, n_swa, n_threads):
    # attention_rows runs a row's query heads of one KV head together (one pass over its
    # keys and values): each row's bits are those of `attention` over its own cache alone
    n_head, n_head_kv, n_cells, lengths = 8, 2, 64, (37, 9, 60)
    B = len(lengths)
    kb = np.zeros((B, 1, n_cells, n_head_kv * hd), np.uint16)
    vb = np.zeros_like(kb)
    kpos = np.full((B, n_cells), -1, np.int64)
    for b, n in enumerate(lengths):
        attn.store_kv(rng.standard_normal((n, n_head_kv * hd)).astype(np.float32), kb[b, 0], np.arange(n))
        attn.store_kv(rng.standard_normal((n, n_head_kv * hd)).astype(np.float32), vb[b, 0], np.arange(n))
        kpos[b, :n] = np.arange(n)
    q = (rng.standard_normal((B, n_head * hd)) * 3).astype(np.float32)
    qpos = np.array(lengths) - 1
    seqs = np.array([2, 0, 1])           # row t attends over sequence seqs[t]
    got = np.empty((B, n_head * hd), np.float32)
    attn.attention_rows(q, qpos[seqs], kb, vb, 0, kpos, seqs, np.empty(B, np.int64), n_head, n_head_kv, hd,
                        hd, 0.1, softcap, n_swa, got, n_threads, attn.attention_work(n_head, n_head_kv, hd, hd))
    for t, s in enumerate(seqs):
        alone = np.empty((1, n_head * hd), np.float32)
        attention(q[t:t + 1], qpos[s:s + 1], kb[s, 0], vb[s, 0], kpos[s], n_head, n_head_kv, hd, hd,
                       0.1, softcap, n_swa, True, alone, n_threads)
        np.testing.assert_array_equal(got[t].view(np.uint32), alone[0].view(np.uint32))


@pytest.mark.skipif(not attn.F16_HALF_STEP, reason="the half-precision V accumulator is ggml's on AVX512-FP16 CPUs only")
def test_fma_f16_rounds_once_as_avx512_fp16_does():
    from numba import njit
    from dasllama.kernels.ir import fma_f16

    @njit
    def run(a, b, c, out):
        for i in range(a.size):
            out[i] = fma_f16(a[i], b[i], c[i])

    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal(20000).astype(np.float16) * s for s in (4, 1, 8))
    b[:200] = np.float16(2.0) ** -rng.integers(1, 24, 200)          # softmax factors down to subnormal
    out = np.empty(a.size, np.uint16)
    run(a.view(np.uint16), b.view(np.uint16), c.view(np.uint16), out)
    # the product of two halves and the sum with a third are exact in float64 at these ranges,
    # and numpy rounds float64 to half once
    want = (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(out, want.view(np.uint16))


@pytest.mark.parametrize("mode", [fa_tiles.MAD, fa_tiles.SCALE, fa_tiles.MAD_HALVES,
                                  fa_tiles.SCALE_HALVES])
def test_the_f16_accumulator_lanes_round_as_the_scalar_loops(mode):
    # the one-chunk attention's value accumulator in vector lanes: each element as ggml's loop
    # computes it (f32 fma or product rounded to half; the half fma rounded once), here in
    # float64, exact before its one rounding to f32 or half; the _HALVES modes hold it as halves
    halves = mode in (fa_tiles.MAD_HALVES, fa_tiles.SCALE_HALVES)
    if halves and not attn.F16_HALF_STEP:
        pytest.skip("half lanes run where the CPU has AVX512-FP16")
    lanes, n = attn.F16_LANES, 4 * attn.F16_LANES
    acc = rng.standard_normal(n).astype(np.float16).astype(np.float32)
    v = (rng.standard_normal(n) * 3).astype(np.float16)
    factor = np.float32(0.7317)
    got = acc.astype(np.float16).view(np.uint16) if halves else acc.copy()
    if mode in (fa_tiles.MAD_HALVES, fa_tiles.SCALE_HALVES):
        factor = np.float32(np.float16(factor))
        bits = int(np.float16(factor).view(np.uint16))
    else:
        bits = int(factor.view(np.uint32))
    op = fa_tiles.f16_round_lanes(lanes, mode)
    njit(lambda a, b, c, d: op(a, b, c, d))(got.ctypes.data, bits, v.ctypes.data, n // lanes)
    a64, v64, f64 = acc.astype(np.float64), v.astype(np.float64), np.float64(factor)
    if mode in (fa_tiles.SCALE, fa_tiles.SCALE_HALVES):
        want = (a64 * f64).astype(np.float32).astype(np.float16)
    elif mode == fa_tiles.MAD:
        want = (v64 * f64 + a64).astype(np.float32).astype(np.float16)
    else:
        want = (v64 * f64 + a64).astype(np.float16)
    if halves:
        got = got.view(np.float16)
    np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize("pos0, n_swa", [(0, 0), (200, 40)])
def test_tiled_attention_bits_do_not_depend_on_cells_no_row_sees(pos0, n_swa):
    # the tiled path skips a key tile no row of a block sees (cells after the block's last
    # query, out of its window, empty) and masks the cells of a tile it sees: a cache that
    # holds such cells, or not, gives the same bits; and causal rows on a tile's diagonal
    # give the bits of the same rows whose tile holds no later cells (the branch-free mask)
    n_head, n_head_kv, hd, T = 4, 1, 64, 130
    n_cells = pos0 + T + 170
    q = rng.standard_normal((T, n_head * hd)).astype(np.float32)
    kc = np.zeros((n_cells, n_head_kv * hd), np.uint16)
    vc = np.zeros_like(kc)
    attn.store_kv(rng.standard_normal((n_cells, n_head_kv * hd)).astype(np.float32), kc, np.arange(n_cells))
    attn.store_kv(rng.standard_normal((n_cells, n_head_kv * hd)).astype(np.float32), vc, np.arange(n_cells))
    pos = pos0 + np.arange(T)
    full = np.arange(n_cells)                      # later positions in the cells after the batch
    bare = np.where(full < pos0 + T, full, -1)     # those cells empty
    if n_swa:
        bare[:pos0 - n_swa + 1] = -1               # and the cells out of every row's window
    outs = []
    for kpos in (full, bare):
        out = np.empty((T, n_head * hd), np.float32)
        attention(q, pos, kc, vc, kpos, n_head, n_head_kv, hd, hd, 0.125, 0.0, n_swa, True, out)
        outs.append(out)
    np.testing.assert_array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    ref = attention_ref(q, kc[:pos0 + T].view(np.float16), vc[:pos0 + T].view(np.float16), pos0,
                        n_head, n_head_kv, 0.125, 0.0, n_swa)
    assert nmse(outs[0], ref) < 1e-10


@njit
def _softmax_row_scalar(row, kpos, lo, hi, scale, masked, m_old):
    """A key tile's row as ggml's tiled softmax runs it, element by element: scale, mask, max,
    ggml_v_expf (ops.v_expf), the sum per 16 lanes (_mm512_reduce_add_ps) added in double."""
    for k in range(row.size):
        seen = not masked or (lo <= kpos[k] <= hi)
        row[k] = row[k] * scale if seen else np.float32(-np.inf)
    tile_max = row.max()
    m = max(m_old, tile_max)
    total = 0.0
    for c in range(0, row.size, 16):
        for k in range(c, c + 16):
            row[k] = ops.v_expf(row[k] - m)
        total += np.float64(attn._reduce16(row[c:c + 16]))
    return tile_max, total


@pytest.mark.skipif(ops.EXP_LANES != 16, reason="the IR softmax row is ggml's AVX-512 form")
@pytest.mark.parametrize("masked", [False, True])
def test_softmax_row_equals_the_scalar_loops(masked):
    # the tiled attention's softmax of a row in 16-lane IR (_mm512_scalef_ps) gives the bits of
    # ggml_v_expf lane by lane, over exp's whole range: results down to subnormal and to zero
    # (arguments below -87 and -192 * ln 2), masked cells, a running max above the tile's
    op = fa_tiles.softmax_row(64, masked)
    run = njit(lambda *a: op(*a))
    for trial in range(40):
        row = (rng.uniform(-160, 4, 64) * rng.choice([0.3, 1.0, 3.0])).astype(np.float32)
        row[rng.integers(0, 64, 3)] = -np.inf
        kpos = rng.permutation(200)[:64].astype(np.int64)
        lo, hi = 20 + trial, 150
        scale = np.float32(rng.choice([0.0625, 1.0, 0.37]))
        m_old = np.float32(-np.inf if trial % 3 == 0 else rng.uniform(-5, 30))
        want = row.copy()
        want_max, want_sum = _softmax_row_scalar(want, kpos, lo, hi, scale, masked, m_old)
        got, res = row.copy(), np.empty(2)
        run(got.ctypes.data, kpos.ctypes.data, lo, hi, int(scale.view(np.uint32)), int(m_old.view(np.uint32)),
            res.ctypes.data)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert res[0] == want_max and res[1] == want_sum

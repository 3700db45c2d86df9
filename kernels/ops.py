"""Transformer element-wise ops: RMSNorm, RoPE, GELU/SiLU gating, ggml's exp; attention is in
kernels/attention.py.

Each op writes into arrays the caller owns and follows ggml-cpu's arithmetic where it shapes the
result (f64 norm sums, iterated f32 RoPE angles, the f16 GELU table, f16 KV cache and the f16
attention accumulator of ggml's one-chunk flash attention), so greedy tokens match llama.cpp.
The plain numpy references sit in `ops_ref.py`.
"""
import math

import numpy as np
from llvmlite import ir
from numba import njit, prange
from numba.extending import intrinsic

from .actq import PAR_ROWS, emit_q8_0_rows
from .quants import JIT
from .cpu import probe
from .ir import (F32T, HALF, I8, I16, I32, I64, Gen, add_u32, bits_f32, f32_bits, f32_to_f16, fma_f32, i64_call,
                 max_f32, shl_u32, sub_u32, vec)
from .simd import _loop

ROPE_NORM = 0     # rotate adjacent pairs (x[2i], x[2i+1]): llama
ROPE_NEOX = 2     # rotate halves (x[i], x[i + n_rot/2]): qwen, gemma, phi3

# ggml's float vector loops (ggml_v_expf, SwiGLU, soft_max) run 16 lanes wide with AVX-512
# F and DQ, 8 (AVX2) otherwise
EXP_LANES = 16 if {"avx512f", "avx512dq"} <= set(probe().features) else 8
# geglu's table lookups by one 16-lane gather (AVX-512F's vgatherdps)
GATHER16 = "avx512f" in probe().features


@njit(**JIT, fastmath={"nnan", "nsz"})
def row_max(row, a, b):
    """max(row[a:b]) (b > a), for attention scores: flash attention's tiles here, the Whisper
    encoder's softmax (kernels.speech). A max does not depend on its order (scores are never
    NaN, and -0 against +0 changes nothing downstream), so the loop may vectorise (max_f32:
    numba's max stayed a scalar chain, a third of a softmax row)."""
    m = row[a]
    for j in range(a + 1, b):
        m = max_f32(m, row[j])
    return m


# Batches of PAR_ROWS rows and more (actq's threshold, shared) run the row-wise ops below on
# the thread pool; fewer (a decode step) stay on the calling thread, where a parallel region
# would cost more than the work (each row is independent, so the split never changes a result).


@njit(cache=True, boundscheck=False, inline="always")
def _rms_scale(s, n, eps):
    """1 / sqrt(mean + eps) of a row's f64 sum of squares s over n values, as ggml rounds it."""
    mean = np.float32(s / n)
    return np.float32(1.0) / np.float32(math.sqrt(mean + np.float32(eps)))


@njit(cache=True, boundscheck=False)
def _rms_norm_row(x, w, eps, out):
    n = x.shape[0]
    s = 0.0
    for i in range(n):
        v = x[i] * x[i]
        s += np.float64(v)
    scale = _rms_scale(s, n, eps)
    for i in range(n):
        out[i] = (x[i] * scale) * w[i]


@njit(cache=True, boundscheck=False, inline="always")
def _rms_norm4(x0, x1, x2, x3, w, eps, o0, o1, o2, o3):
    """_rms_norm_row of four rows (or heads of rows: w has their n weights) at once, each a 1-D
    view, their f64 sums side by side: each is the same serial chain (ggml's order), but one
    chain alone waits on the add's latency every element (512 x 640 sums: 0.17 ms on one
    thread, four at a time 0.12). Views, not (row, column) indices: an index numba cannot
    prove non-negative gets a wraparound test every access, which kept the loops scalar
    (gemma3's q heads, 512 x 4 x 256, one thread: 0.52 ms, as views 0.25). out may be x."""
    n = x0.shape[0]
    s0 = s1 = s2 = s3 = 0.0
    for i in range(n):
        s0 += np.float64(x0[i] * x0[i])
        s1 += np.float64(x1[i] * x1[i])
        s2 += np.float64(x2[i] * x2[i])
        s3 += np.float64(x3[i] * x3[i])
    c0, c1, c2, c3 = _rms_scale(s0, n, eps), _rms_scale(s1, n, eps), _rms_scale(s2, n, eps), _rms_scale(s3, n, eps)
    for i in range(n):
        o0[i] = (x0[i] * c0) * w[i]
    for i in range(n):
        o1[i] = (x1[i] * c1) * w[i]
    for i in range(n):
        o2[i] = (x2[i] * c2) * w[i]
    for i in range(n):
        o3[i] = (x3[i] * c3) * w[i]


@njit(cache=True, boundscheck=False, parallel=True)
def rms_norm(x, w, eps, out):
    """out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w.  x, out: (T, n); w: (n,); out may be x.
    From PAR_ROWS rows on the thread pool, four rows a job (_rms_norm_rows4)."""
    T = x.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _rms_norm_row(x[t], w, eps, out[t])
    else:
        for g in prange((T + 3) // 4):
            if 4 * g + 4 <= T:
                _rms_norm_rows4(x, w, eps, out, 4 * g, 1, x.shape[1])
            else:
                for t in range(4 * g, T):
                    _rms_norm_row(x[t], w, eps, out[t])


@njit(cache=True, boundscheck=False)
def _rms_norm_heads_row(x, w, eps, n_heads, head_dim):
    for h in range(n_heads):
        xh = x[h * head_dim:(h + 1) * head_dim]
        _rms_norm_row(xh, w, eps, xh)


@njit(cache=True, boundscheck=False)
def _rms_norm_rows4(x, w, eps, out, t, n_heads, head_dim):
    """Rows t..t+3 of x (T, n_heads * head_dim) normalised into out (may be x), each head by
    itself (rms_norm: one head the row's width), their (row, head) pairs four at a time in
    order (_rms_norm4): a row's heads where it has four (gemma3's q), else heads of several
    rows. One function for both ops (a compile each cost the cold start)."""
    for p in range(0, 4 * n_heads, 4):
        _rms_norm4(_head(x, t, p, n_heads, head_dim), _head(x, t, p + 1, n_heads, head_dim),
                   _head(x, t, p + 2, n_heads, head_dim), _head(x, t, p + 3, n_heads, head_dim), w, eps,
                   _head(out, t, p, n_heads, head_dim), _head(out, t, p + 1, n_heads, head_dim),
                   _head(out, t, p + 2, n_heads, head_dim), _head(out, t, p + 3, n_heads, head_dim))


@njit(cache=True, boundscheck=False, inline="always")
def _head(x, t, pair, n_heads, head_dim):
    """Pair `pair` of rows t.. (row t + pair // n_heads, its head pair % n_heads) as a view."""
    base = (pair % n_heads) * head_dim
    return x[t + pair // n_heads, base:base + head_dim]


@njit(cache=True, boundscheck=False, parallel=True)
def rms_norm_heads(x, w, eps, n_heads, head_dim):
    """In-place RMSNorm of each head of x (T, n_heads*head_dim) with w (head_dim,) (QK-norm);
    from PAR_ROWS rows on the thread pool, four rows a job (_rms_norm_rows4)."""
    T = x.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _rms_norm_heads_row(x[t], w, eps, n_heads, head_dim)
    else:
        for g in prange((T + 3) // 4):
            if 4 * g + 4 <= T:
                _rms_norm_rows4(x, w, eps, x, 4 * g, n_heads, head_dim)
            else:
                for t in range(4 * g, T):
                    _rms_norm_heads_row(x[t], w, eps, n_heads, head_dim)


@njit(cache=True, boundscheck=False)
def _rope_angles_row(pos, theta_scale, cos_t, sin_t):
    """cos and sin of pos * theta_scale^i, the angle iterated in f32 (theta *= theta_scale)
    as ggml's rope cache does, not powed."""
    theta = np.float32(pos)
    for i in range(cos_t.shape[0]):
        cos_t[i] = math.cos(theta)
        sin_t[i] = math.sin(theta)
        theta = np.float32(theta * theta_scale)


@njit(cache=True, boundscheck=False, inline="always")
def _rotate(a, b, cos_t, sin_t):
    """Rotate the pairs (a[i], b[i]) by the angles of cos_t[i], sin_t[i], in place."""
    for i in range(a.shape[0]):
        x0 = a[i]
        x1 = b[i]
        a[i] = fma_f32(x0, cos_t[i], -(x1 * sin_t[i]))
        b[i] = fma_f32(x0, sin_t[i], x1 * cos_t[i])


@njit(cache=True, boundscheck=False)
def _rope_row(x, n_heads, head_dim, n_rot, mode, cos_t, sin_t):
    """A row's heads rotated, each pair through views (_rotate): indices numba cannot prove
    non-negative (base + i) cost a wraparound test every access and kept the loop scalar."""
    half = n_rot // 2
    for h in range(n_heads):
        xh = x[h * head_dim:(h + 1) * head_dim]
        if mode == ROPE_NEOX:
            _rotate(xh[:half], xh[half:2 * half], cos_t, sin_t)
        else:
            _rotate(xh[0:2 * half:2], xh[1:2 * half:2], cos_t, sin_t)


@njit(cache=True, boundscheck=False, parallel=True)
def rope_angles(positions, n_rot, freq_base, out):
    """out (T, 2, n_rot/2): each position's cos and sin table for freq_base. The queries and
    keys of every layer with that base share it (the trigonometry was most of RoPE's time)."""
    T = positions.shape[0]
    theta_scale = np.float32(freq_base) ** np.float32(-2.0 / n_rot)
    if T < PAR_ROWS:
        for t in range(T):
            _rope_angles_row(positions[t], theta_scale, out[t, 0], out[t, 1])
    else:
        for t in prange(T):
            _rope_angles_row(positions[t], theta_scale, out[t, 0], out[t, 1])


@njit(cache=True, boundscheck=False, parallel=True)
def rope_apply(x, angles, n_heads, head_dim, n_rot, mode):
    """Rotate the first n_rot dims of every head of x (T, n_heads*head_dim) in place by the
    tables of rope_angles.

    The rotation is contracted as gcc compiles ggml's rotate_pairs (-ffp-contract=fast):
    x0*cos - x1*sin = fma(x0, cos, -(x1*sin)), x0*sin + x1*cos = fma(x0, sin, x1*cos).
    """
    T = x.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _rope_row(x[t], n_heads, head_dim, n_rot, mode, angles[t, 0], angles[t, 1])
    else:
        for t in prange(T):
            _rope_row(x[t], n_heads, head_dim, n_rot, mode, angles[t, 0], angles[t, 1])



def gelu_table():
    """ggml's GELU lookup: tanh-GELU of every half value, rounded to half (as float32).

    Matches the table ggml builds when compiled natively (gcc contracts 1 + a*x*x into an FMA;
    tanhf is the correctly rounded value): all 65536 entries equal, where numpy's float32
    tanh alone misses 234 of them, enough to move greedy tokens.
    """
    f32 = np.float32
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    with np.errstate(all="ignore"):
        ax = f32(0.044715) * x
        fma = (ax.astype(np.float64) * x + 1.0).astype(np.float32)
        inner = (f32(0.79788456080286535587989211986876) * x) * fma
        t = np.tanh(inner.astype(np.float64)).astype(np.float32)
        g = (f32(0.5) * x) * (f32(1.0) + t)
    return g.astype(np.float16).astype(np.float32)


@njit(cache=True, boundscheck=False)
def _geglu_row(gate, up, table, out):
    for i in range(gate.shape[0]):
        g = gate[i]
        if g <= np.float32(-10.0):
            out[i] = np.float32(0.0)
        elif g >= np.float32(10.0):
            out[i] = g * up[i]
        else:
            out[i] = table[f32_to_f16(g)] * up[i]


def _geglu_lanes(g, x, y, table):
    """16 lanes of _geglu_row: gelu(x) by the f16 table (one gather), times y."""
    b = g.b
    v16f, v16i, v16h = vec(F32T, 16), vec(I32, 16), vec(HALF, 16)
    zero = g.c(v16f, 0.0)
    idx = b.zext(b.bitcast(b.fptrunc(x, v16h), vec(I16, 16)), v16i)
    looked = g.intr("llvm.x86.avx512.mask.gather.dps.512", v16f,
                    [zero, table, idx, g.c(vec(ir.IntType(1), 16), 1), g.c(I32, 4)])
    r = b.select(b.fcmp_ordered(">=", x, g.c(v16f, 10.0)), b.fmul(x, y), b.fmul(looked, y))
    return b.select(b.fcmp_ordered("<=", x, g.c(v16f, -10.0)), zero, r)


def _emit_geglu(b, args):
    """The body of geglu_rows' function: per row, n16 vectors of 16 lanes."""
    g = Gen(b)
    gate, g_rs, up, u_rs, out, o_rs, table, n16, n_rows = args
    g_p, u_p, o_p, tab = (b.inttoptr(v, I8.as_pointer()) for v in (gate, up, out, table))
    v16f = vec(F32T, 16)

    def row(t, acc):
        g_row, u_row, o_row = (g.at(p, b.mul(t, rs)) for p, rs in ((g_p, g_rs), (u_p, u_rs), (o_p, o_rs)))

        def vector(i, acc):
            off = b.mul(i, g.c(I64, 64))
            r = _geglu_lanes(g, g.load(g_row, off, v16f), g.load(u_row, off, v16f), tab)
            b.store(r, b.bitcast(g.at(o_row, off), v16f.as_pointer())).align = 4
            return acc

        _loop(g, g.c(I64, 0), n16, [g.c(I64, 0)], vector)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


def _emit_geglu_q8_0(b, args):
    """The body of geglu_q8_0_rows' function: per row, n_kb blocks of two 16-lane vectors."""
    g = Gen(b)
    gate, g_rs, up, u_rs, xq, q_rs, xd, d_rs, table, n_kb, n_rows = args
    g_p, u_p, q_p, d_p, tab = (b.inttoptr(v, I8.as_pointer()) for v in (gate, up, xq, xd, table))
    v16f = vec(F32T, 16)
    emit_q8_0_rows(g, [(g_p, g_rs), (u_p, u_rs)], q_p, q_rs, d_p, d_rs, n_kb, n_rows,
                   lambda ins, offs: [_geglu_lanes(g, g.load(ins[0], o, v16f), g.load(ins[1], o, v16f), tab)
                                      for o in offs])


@intrinsic
def geglu_q8_0_rows(typingctx, gate, g_rs, up, u_rs, xq, q_rs, xd, d_rs, table, n_kb, n_rows):
    """run(gate, g_rs, up, u_rs, xq, q_rs, xd, d_rs, table, n_kb, n_rows) at int64 addresses and
    byte strides: n_rows rows of geglu_rows (32 n_kb values) quantised as quantize_q8_0_rows
    quantises them, block by block in registers, never stored as floats."""
    return i64_call(11, "dasllama_geglu_q8_0_rows", _emit_geglu_q8_0)


geglu_q8_0_rows._set_uuid("dasllama.ops.geglu_q8_0_rows")     # a stable disk-cache key


@njit(cache=True, boundscheck=False, parallel=True)
def geglu_q8_0(gate, up, table, xq, xd):
    """xq, xd (T, n) int8 and (T, n // 32) = ggml's Q8_0 quantisation (quantize_row_q8_0) of
    geglu(gate, up, table): the down projection's activations of a batch without its float
    rows (a pass over 4 MB written and read again, per gemma3 layer at pp512, saved). n a
    multiple of 32, GATHER16, PAR_ROWS rows a job."""
    T = gate.shape[0]
    for j in prange((T + PAR_ROWS - 1) // PAR_ROWS):
        t0 = j * PAR_ROWS
        geglu_q8_0_rows(gate[t0:].ctypes.data, gate.strides[0], up[t0:].ctypes.data, up.strides[0],
                        xq[t0:].ctypes.data, xq.strides[0], xd[t0:].ctypes.data, xd.strides[0],
                        table.ctypes.data, gate.shape[1] // 32, min(PAR_ROWS, T - t0))


@intrinsic
def geglu_rows(typingctx, gate, g_rs, up, u_rs, out, o_rs, table, n16, n_rows):
    """run(gate, g_rs, up, u_rs, out, o_rs, table, n16, n_rows) at int64 addresses and byte
    strides: _geglu_row of the first 16 n16 values of n_rows rows, 16 lanes a step, the
    table's values by one gather (the numba loop stays scalar: ~2 cycles a value)."""
    return i64_call(9, "dasllama_geglu_rows", _emit_geglu)


geglu_rows._set_uuid("dasllama.ops.geglu_rows")     # a stable disk-cache key


@njit(cache=True, boundscheck=False)
def _geglu_rows(gate, up, table, out, t0, n_rows):
    """geglu of rows t0 .. t0 + n_rows: the IR lanes where AVX-512 has its gather, then each
    row's tail (n % 16 values) one by one."""
    n = gate.shape[1]
    n16 = n // 16 if GATHER16 else 0
    if n16 > 0:
        geglu_rows(gate[t0:].ctypes.data, gate.strides[0], up[t0:].ctypes.data, up.strides[0],
                   out[t0:].ctypes.data, out.strides[0], table.ctypes.data, n16, n_rows)
    for t in range(t0, t0 + n_rows):
        _geglu_row(gate[t, 16 * n16:], up[t, 16 * n16:], table, out[t, 16 * n16:])


@njit(cache=True, boundscheck=False, parallel=True)
def geglu(gate, up, table, out):
    """out = gelu(gate) * up, gelu through the f16 table (ggml_vec_geglu_f32). (T, n); table:
    gelu_table(), contiguous."""
    T = gate.shape[0]
    if T < PAR_ROWS:
        _geglu_rows(gate, up, table, out, 0, T)      # a decode step's rows: the lanes, one thread
    else:
        for t0 in prange((T + PAR_ROWS - 1) // PAR_ROWS):
            _geglu_rows(gate, up, table, out, t0 * PAR_ROWS, min(PAR_ROWS, T - t0 * PAR_ROWS))


# ggml_v_expf's constants (vec.h), exact as float32
_EXP_SHIFT = float.fromhex("0x1.8p23")
_EXP_LOG2E = float.fromhex("0x1.715476p+0")
_EXP_LN2_HI = float.fromhex("0x1.62e4p-1")
_EXP_LN2_LO = float.fromhex("0x1.7f7d1cp-20")
_EXP_C5, _EXP_C4, _EXP_C3, _EXP_C2, _EXP_C1 = (float.fromhex(h) for h in (
    "0x1.0e4020p-7", "0x1.573e2ep-5", "0x1.555e66p-3", "0x1.fffdb6p-2", "0x1.ffffecp-1"))


@njit(cache=True, boundscheck=False, inline="always")
def _pow2(e):
    """2^e as float32 for integer-valued e in [-126, 127] (its exponent bits)."""
    return bits_f32(np.uint32(np.int32(e) + np.int32(127)) << np.uint32(23))


@njit(cache=True, boundscheck=False, inline="always")
def v_expf(x):
    """ggml_v_expf (vec.h), one lane, as this CPU's build of ggml computes it: the AVX-512
    form with 16-lane vectors (_v_expf_avx512), the AVX2 form otherwise (_v_expf_avx2)."""
    if EXP_LANES == 16:
        return _v_expf_avx512(x)
    return _v_expf_avx2(x)


@njit(cache=True, boundscheck=False, inline="always")
def _exp_poly_arg(x):
    """(z, n, b): x = n ln2 + b, n integral (rounded by the 1.5 * 2^23 shift into z), as ggml
    splits it."""
    r = np.float32(_EXP_SHIFT)
    z = fma_f32(x, np.float32(_EXP_LOG2E), r)
    n = z - r
    b = fma_f32(-n, np.float32(_EXP_LN2_LO), fma_f32(-n, np.float32(_EXP_LN2_HI), x))
    return z, n, b


@njit(cache=True, boundscheck=False, inline="always")
def _v_expf_avx512(x):
    """The AVX-512 ggml_v_expf: a degree-5 polynomial in b with its constant 1, scaled by 2^n
    (_mm512_scalef_ps); 0 / inf once |n| > 192. Branch-free, so loops over it vectorise:
    j * 2^n is one rounding of the exact product either way, through 2^(n+100) * 2^-100
    (2^(n-100) * 2^100) where 2^n is below (above) float32's normals."""
    z, n, b = _exp_poly_arg(x)
    u = b * b
    j = fma_f32(fma_f32(fma_f32(np.float32(_EXP_C5), b, np.float32(_EXP_C4)), u,
                        fma_f32(np.float32(_EXP_C3), b, np.float32(_EXP_C2))), u,
                fma_f32(np.float32(_EXP_C1), b, np.float32(1.0)))
    nc = min(max(n, np.float32(-192.0)), np.float32(192.0))
    normal = j * _pow2(min(max(nc, np.float32(-126.0)), np.float32(127.0)))
    tiny = (j * _pow2(min(nc + np.float32(100.0), np.float32(127.0)))) * _pow2(np.float32(-100.0))
    huge = (j * _pow2(max(nc - np.float32(100.0), np.float32(-126.0)))) * _pow2(np.float32(100.0))
    y = tiny if nc < np.float32(-126.0) else (huge if nc > np.float32(127.0) else normal)
    big = np.float32(0.0) if n <= np.float32(0.0) else np.float32(np.inf)
    return big if abs(n) > np.float32(192.0) else y


def emit_v_expf16(g, x):
    """ggml_v_expf's AVX-512 form on a <16 x float> in IR, as ggml writes it: the polynomial j
    scaled by _mm512_scalef_ps (one rounding of j * 2^n, subnormal results included), 0 or inf
    once |n| > 192. The same bits as _v_expf_avx512 lane by lane, in a quarter of its operations."""
    b = g.b
    v16 = vec(F32T, 16)
    c = lambda v: g.c(v16, v)
    r = c(_EXP_SHIFT)
    z = g.fma(x, c(_EXP_LOG2E), r)
    n = b.fsub(z, r)
    neg_n = b.fneg(n)
    bb = g.fma(neg_n, c(_EXP_LN2_LO), g.fma(neg_n, c(_EXP_LN2_HI), x))
    u = b.fmul(bb, bb)
    j = g.fma(g.fma(g.fma(c(_EXP_C5), bb, c(_EXP_C4)), u, g.fma(c(_EXP_C3), bb, c(_EXP_C2))), u,
              g.fma(c(_EXP_C1), bb, c(1.0)))
    scaled = g.intr("llvm.x86.avx512.mask.scalef.ps.512", v16,
                    [j, n, c(0.0), g.c(I16, -1), g.c(I32, 4)])    # 4: the current rounding mode
    wide = b.fcmp_ordered(">", g.intr("llvm.fabs.v16f32", v16, [n]), c(192.0))
    big = b.select(b.fcmp_ordered("<=", n, c(0.0)), c(0.0), c(float("inf")))
    return b.select(wide, big, scaled)


@njit(cache=True, boundscheck=False, inline="always")
def _v_expf_avx2(x):
    """The AVX2 ggml_v_expf: the polynomial without its constant (j), then k + j k with one
    rounding, k = 2^n from z's low bits; for 126 < |n| <= 192 the scale split in two,
    (s2 + j s2) * s1; beyond, s1 * s1 (0 or inf)."""
    z, n, b = _exp_poly_arg(x)
    u = b * b
    j = fma_f32(fma_f32(fma_f32(np.float32(_EXP_C5), b, np.float32(_EXP_C4)), u,
                        fma_f32(np.float32(_EXP_C3), b, np.float32(_EXP_C2))), u,
                np.float32(_EXP_C1) * b)
    e = shl_u32(f32_bits(z), np.uint32(23))
    k = bits_f32(add_u32(e, np.uint32(0x3F800000)))
    g = np.uint32(0x82000000) if n <= np.float32(0.0) else np.uint32(0)
    s1 = bits_f32(add_u32(g, np.uint32(0x7F000000)))
    s2 = bits_f32(sub_u32(e, g))
    an = abs(n)
    mid = fma_f32(s2, j, s2) * s1
    y = mid if an > np.float32(126.0) else fma_f32(j, k, k)
    return s1 * s1 if an > np.float32(192.0) else y


@njit(cache=True, boundscheck=False, error_model="numpy")
def _swiglu_row(gate, up, out):
    n = gate.shape[0]
    n_vec = n - n % EXP_LANES
    for i in range(n_vec):
        g = gate[i]
        out[i] = (g / (np.float32(1.0) + v_expf(np.float32(0.0) - g))) * up[i]
    for i in range(n_vec, n):
        g = gate[i]
        out[i] = (g / (np.float32(1.0) + np.float32(math.exp(-g)))) * up[i]


# error_model="numpy": python's model checks each division for zero, which kept the loop
# scalar (4x slower)
@njit(cache=True, boundscheck=False, error_model="numpy", parallel=True)
def swiglu(gate, up, out):
    """out = silu(gate) * up, as ggml_vec_swiglu_f32: lanes of EXP_LANES through ggml_v_silu
    (x / (1 + ggml_v_expf(-x))), the tail of n % EXP_LANES through expf. (T, n)."""
    T = gate.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _swiglu_row(gate[t], up[t], out[t])
    else:
        for t in prange(T):
            _swiglu_row(gate[t], up[t], out[t])

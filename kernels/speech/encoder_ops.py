"""The steps of a Whisper-style or ViT encoder (Whisper's, SigLIP's), in place over rows: layer
norm, bias + tanh-GELU or erf-GELU, a kernel-3 convolution's input windows, the softmax of attention scores, and the non-causal attention in tiles. numpy takes five to eight passes over a (T, n)
activation for each; these take one or two. They run on the calling thread without the GIL,
so the caller shares rows out over its own threads: the encoder's pool, which runs its BLAS
too, so numba's workers stay out of the encoder (see core.runtime.threads.DECODE_LAYERS). Their exp is
Cephes' expf written so LLVM vectorises it (numba has no SVML here, and a libm call per
element is slower than numpy's own vector loops).
"""

import numpy as np
from numba import njit

from ..ir import bits_f32
from ..ops import row_max
from ..quants import JIT

_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)          # ln 2 split so n * _LN2_HI is exact
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_MIN = np.float32(-87.33)              # below this e^x is under float32's smallest normal
_P0, _P1, _P2, _P3, _P4, _P5 = (np.float32(c) for c in (
    1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
    5.0000001201e-1))
_ONE, _HALF, _TWO = np.float32(1.0), np.float32(0.5), np.float32(2.0)
_GELU_C = np.float32(np.sqrt(2 / np.pi))
_GELU_A = np.float32(0.044715)


@njit(**JIT, inline="always")
def exp_nonpositive(x):
    """e^x for x <= 0 to ~1 ulp (Cephes expf); x below _EXP_MIN gives e^_EXP_MIN, ~1e-38."""
    x = max(x, _EXP_MIN)
    n = np.floor(x * _LOG2E + _HALF)
    r = x - n * _LN2_HI - n * _LN2_LO
    p = ((((_P0 * r + _P1) * r + _P2) * r + _P3) * r + _P4) * r + _P5
    y = p * r * r + r + _ONE
    return y * bits_f32(np.uint32((np.int32(n) + np.int32(127)) << np.int32(23)))


@njit(**JIT, inline="always")
def gelu_one(x):
    """0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), with 1 + tanh(u) written as
    2 / (1 + e^-2u): no cancellation, and e^-2u only for u >= 0 (else x e^2u / (1 + e^2u))."""
    u = _GELU_C * (x + _GELU_A * x * x * x)
    e = exp_nonpositive(-_TWO * abs(u))
    if u >= 0:
        return x / (_ONE + e)
    return x * e / (_ONE + e)


@njit(**JIT, fastmath={"contract"})
def bias_gelu(x, bias):
    """x (T, n) <- gelu(x + bias), in place; bias (n,)."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        row = x[t]
        for j in range(n_cols):
            row[j] = gelu_one(row[j] + bias[j])


_SQRT_2_INV = np.float32(0.70710678118654752440)
# erf in float32 without a libm call per element, so the loop vectorises: erf(x) = x P(x^2) for
# |x| < 1, 1 - e^Q(|x|) on [1, 4) (with x's sign), 1 past it. P, Q are least-squares fits made
# here (numpy polyfit against math.erf: 20001 points of [0, 1] for P, degree 6 in x^2; 40001 of
# [1, 4] for Q, degree 10, to log(1 - erf)): 2.6 ulp at most against the correctly rounded erf.
_ERF_P = tuple(np.float32(c) for c in (
    8.006874122656882e-05, -0.0008053751080296934, 0.005192957818508148, -0.0268560703843832,
    0.11283634603023529, -0.3761262893676758, 1.128379225730896))
_ERF_Q = tuple(np.float32(c) for c in (
    -3.9548130104094525e-08, 9.176613389172417e-07, -7.687256584176794e-06, 8.47202682052739e-06,
    0.00039395084604620934, -0.00425896979868412, 0.02559252828359604, -0.1091732531785965,
    -0.6324532628059387, -1.129986047744751, 0.0002779481583274901))
_P0_, _P1_, _P2_, _P3_, _P4_, _P5_, _P6_ = _ERF_P
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6, _Q7, _Q8, _Q9, _Q10 = _ERF_Q
_FOUR = np.float32(4.0)


@njit(**JIT, inline="always", fastmath={"contract"})
def erf_f32(x):
    """erf(x) to 2.6 ulp, branch-free (both fits computed, one selected): see _ERF_P."""
    s = x * x
    near = x * ((((((_P0_ * s + _P1_) * s + _P2_) * s + _P3_) * s + _P4_) * s + _P5_) * s + _P6_)
    t = min(abs(x), _FOUR)
    q = ((((((((((_Q0 * t + _Q1) * t + _Q2) * t + _Q3) * t + _Q4) * t + _Q5) * t + _Q6) * t + _Q7) * t
           + _Q8) * t + _Q9) * t + _Q10)
    far = _ONE - exp_nonpositive(min(q, np.float32(0.0)))
    far = far if x >= 0 else -far
    return near if abs(x) < _ONE else far


@njit(**JIT, fastmath={"contract"})
def bias_gelu_erf(x, bias):
    """x (T, n) <- 0.5 x (1 + erf(x / sqrt 2)) of x + bias, in place; bias (n,). ggml's
    gelu_erf on f32 (erff per element, no table), which llama.cpp's Whisper-style audio
    towers use; erf here is erf_f32 (2.6 ulp), which vectorises: libm's per element took 11 ns
    a value, a quarter of the qwen2a tower's CPU time (2026-12-06)."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        row = x[t]
        for j in range(n_cols):
            v = row[j] + bias[j]
            row[j] = _HALF * v * (_ONE + erf_f32(v * _SQRT_2_INV))


def bias_gelu_erf_ref(x, bias):
    """The numpy reference of bias_gelu_erf (returns a new array), in float64."""
    from math import erf
    y = (x + bias).astype(np.float64)
    return (0.5 * y * (1 + np.vectorize(erf)(y / np.sqrt(2)))).astype(np.float32)


def conv3_windows(x, stride):
    """The input rows of a kernel-3, padding-1 conv1d (ggml's im2col), in numpy: the reference
    conv3_windows_rows is held to. x (C_in, T) ->
    (T_out, C_in * 3), T_out = (T - 1) // stride + 1, each row (channel, tap) as a weight
    (C_out, C_in, 3) flattens, so the conv is one product with that weight's rows."""
    c_in, T = x.shape
    xp = np.zeros((c_in, T + 2), np.float32)                                     # (C_in, T + 2)
    xp[:, 1:-1] = x
    n_out = (T + 2 - 3) // stride + 1
    cs, ts = xp.strides
    win = np.lib.stride_tricks.as_strided(xp, (n_out, c_in, 3), (stride * ts, cs, ts))
    return np.ascontiguousarray(win).reshape(n_out, c_in * 3)


@njit(**JIT)
def conv3_windows_rows(x, stride):
    """conv3_windows of x's transpose, from x (T, C_in) as the products leave it: (T_out,
    C_in * 3), row t (channel, tap) = x[stride t + tap - 1, channel], zero past the ends; one
    pass, without the transpose and the padded copy (15 ms of the qwen2a tower's 500, loaded)."""
    n, c_in = x.shape
    n_out = (n - 1) // stride + 1
    out = np.zeros((n_out, c_in * 3), np.float32)
    for t in range(n_out):
        dst = out[t]
        for k in range(3):
            src = stride * t + k - 1
            if 0 <= src < n:
                row = x[src]
                for c in range(c_in):
                    dst[3 * c + k] = row[c]
    return out


@njit(**JIT, fastmath={"reassoc", "contract"})
def layer_norm(x, w, b, eps, out):
    """out (T, n) <- (x - mean) / sqrt(var + eps) * w + b per row of x (T, n); f32 sums."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        row = x[t]
        acc = np.float32(0.0)
        for j in range(n_cols):
            acc += row[j]
        mean = acc / np.float32(n_cols)
        acc = np.float32(0.0)
        for j in range(n_cols):
            c = row[j] - mean
            acc += c * c
        inv = _ONE / np.sqrt(acc / np.float32(n_cols) + np.float32(eps))
        dst = out[t]
        for j in range(n_cols):
            dst[j] = (row[j] - mean) * inv * w[j] + b[j]


@njit(**JIT, inline="always")
def exp_shifted(row):
    """row <- e^(row - max(row)) in place; returns the sum (the softmax's denominator)."""
    m = row_max(row, 0, row.size)
    total = np.float32(0.0)
    for j in range(row.size):
        e = exp_nonpositive(row[j] - m)
        row[j] = e
        total += e
    return total


@njit(**JIT, fastmath={"reassoc", "contract"})
def softmax_rows(s, sums):
    """s (T, S) <- e^(s - rowmax) in place, sums (T,) <- each row's sum: the unnormalised
    softmax, in two passes instead of numpy's four. Single-threaded and without the GIL, for
    attention tiles that run on a thread pool beside their single-threaded BLAS."""
    for t in range(s.shape[0]):
        sums[t] = exp_shifted(s[t])


@njit(**JIT, fastmath={"reassoc", "contract"})
def logsumexp(x):
    """log(sum e^x) of a row x (n,) f32 as f64: max, then the sum of e^(x - max) in f64 of f32
    exps. -inf entries add nothing."""
    m = x[0]
    for j in range(1, x.size):
        m = max(m, x[j])
    acc = 0.0
    for j in range(x.size):
        acc += np.float64(exp_nonpositive(x[j] - m))
    return np.float64(m) + np.log(acc)


@njit(**JIT, fastmath={"reassoc", "contract"})
def log_softmax(x):
    """log-softmax of a logits row x (n,) f32 as a new f64 row, x - logsumexp(x) (numpy: five
    passes, all in f64). -inf stays -inf."""
    norm = logsumexp(x)
    out = np.empty(x.size, np.float64)
    for j in range(x.size):
        out[j] = np.float64(x[j]) - norm
    return out


def bias_gelu_ref(x, bias):
    """The numpy reference of bias_gelu (returns a new array)."""
    y = (x + bias).astype(np.float64)
    return (0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))).astype(np.float32)


def layer_norm_ref(x, w, b, eps):
    """The numpy reference of layer_norm, in float64."""
    x = x.astype(np.float64)
    xc = x - x.mean(-1, keepdims=True)
    return (xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * w + b).astype(np.float32)


def encoder_attention(qkv_t, n_head, pool=None, q_chunk=256):
    """Non-causal multi-head softmax(q k^T) v on transposed projections, q scaled already.

    qkv_t (3 n, T): rows q | k | v, each n = n_head * d rows, head h at rows h*d:(h+1)*d;
    returns o (T, n). Every operand is a contiguous block or its transpose, so BLAS reads
    them in place. The work goes in tiles of (head, q_chunk queries), each with
    single-threaded BLAS, on `pool` (anything with map: a RowPool, a ThreadPoolExecutor) when given: a tile's scores (q_chunk, T) stay in cache,
    and many small tiles keep both threads busy when a core is shared (a thread per head
    would wait for the slowest).
    """
    n3, T = qkv_t.shape
    n = n3 // 3
    d = n // n_head
    out = np.empty((T, n), np.float32)

    def tile(job):
        h, t0 = job
        t1 = min(T, t0 + q_chunk)
        q_t, k_t, v_t = (qkv_t[part * n + h * d:part * n + (h + 1) * d] for part in range(3))
        s = q_t[:, t0:t1].T @ k_t                                            # (tc, T)
        sums = np.empty(t1 - t0, np.float32)
        softmax_rows(s, sums)
        o = s @ v_t.T                                                        # (tc, d)
        o /= sums[:, None]
        out[t0:t1, h * d:(h + 1) * d] = o

    jobs = [(h, t0) for h in range(n_head) for t0 in range(0, T, q_chunk)]
    if pool is None:
        for job in jobs:
            tile(job)
    else:
        list(pool.map(tile, jobs))
    return out

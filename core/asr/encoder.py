"""The Whisper encoder's row-parallel steps: layer norm, bias + GELU, the two convolutions and
non-causal attention, each shared out over the model's own thread pool (linear.RowPool)."""
import numpy as np

from dasllama.kernels.speech.encoder_ops import bias_gelu, layer_norm as layer_norm_kernel, softmax_rows

from .linear import on_pool, over_rows, rows_matmul

LN_EPS = 1e-5


def layer_norm(x, w, b, pool=None):
    """Layer norm of each row of x (T, n) into a new array (a numba kernel, one pass), rows
    shared out over `pool`."""
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    over_rows(pool, len(x), lambda r0, r1: layer_norm_kernel(x[r0:r1], w, b, LN_EPS, out[r0:r1]))
    return out


def bias_gelu_rows(x, bias, pool=None):
    """x (T, n) <- gelu(x + bias) in place, rows shared out over `pool`."""
    over_rows(pool, len(x), lambda r0, r1: bias_gelu(x[r0:r1], bias))


def encoder_attention(qkv_t, n_head, pool=None, q_chunk=256):
    """Non-causal multi-head softmax(q k^T) v on transposed projections, q scaled already.

    qkv_t (3 n, T): rows q | k | v, each n = n_head * d rows, head h at rows h*d:(h+1)*d;
    returns o (T, n). Every operand is a contiguous block or its transpose, so BLAS reads
    them in place. The work goes in tiles of (head, q_chunk queries), each with
    single-threaded BLAS, on `pool` when given: a tile's scores (q_chunk, T) stay in cache,
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

    on_pool(pool, tile, [(h, t0) for h in range(n_head) for t0 in range(0, T, q_chunk)])
    return out


def conv_weight(w):
    """A conv kernel (C_out, C_in, 3) as the (C_out, 3 * C_in) matrix conv1d multiplies by."""
    return np.ascontiguousarray(w.transpose(0, 2, 1).reshape(w.shape[0], -1), np.float32)


def conv1d(x, w, stride, pool=None):
    """Conv1d, kernel 3, padding 1, no bias: x (T, C_in) -> (T_out, C_out), T_out = T/stride;
    w from conv_weight. One product (rows_matmul on `pool`) on the (T_out, 3 * C_in) windows
    of x."""
    T, c_in = x.shape
    xp = np.pad(x, ((1, 1), (0, 0)))                                          # (T + 2, C_in)
    n_out = (T + 2 - 3) // stride + 1
    rows = xp.strides[0]
    cols = np.lib.stride_tricks.as_strided(xp, (n_out, 3, c_in), (stride * rows, rows, 4))
    return rows_matmul(cols.reshape(n_out, 3 * c_in), w.T, pool)              # (T_out, C_out)

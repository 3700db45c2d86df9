"""The Whisper encoder's row-parallel steps: layer norm, bias + GELU, the two convolutions and
non-causal attention, each shared out over the model's own thread pool (linear.RowPool)."""
import numpy as np

from dasllama.kernels.speech.encoder_ops import bias_gelu, layer_norm as layer_norm_kernel

from .linear import over_rows, rows_matmul

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

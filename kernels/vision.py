"""The vision towers' row ops: patches of an image as rows, the gemma3 projector's average pool
and its RMS norm, qwen2vl's quick GELU and its 2D rotary embedding. Plain numpy references
beside the numba kernels (tests compare them)."""
import numpy as np
from numba import njit, prange

from .actq import round_f16
from .quants import JIT
from .speech.encoder_ops import gelu_one


def patch_rows(image, patch):
    """float32 (3, S, S) -> (n_patches, 3 * patch * patch): patches in row-major order, each
    flattened (channel, y, x) as a conv2d weight (n_embd, 3, patch, patch) is."""
    c, h, w = image.shape
    ny, nx = h // patch, w // patch
    x = image[:, :ny * patch, :nx * patch].reshape(c, ny, patch, nx, patch)
    return np.ascontiguousarray(x.transpose(1, 3, 0, 2, 4).reshape(ny * nx, c * patch * patch))


@njit(parallel=True, **JIT)
def avg_pool_tokens(x, side, k, out):
    """out (side/k * side/k, n) <- means of k x k squares of the (side, side) grid of rows of
    x (side * side, n); summed in the grid's row order, then divided, as ggml's pool_2d."""
    n = x.shape[1]
    n_out = side // k
    inv = np.float32(1.0) / np.float32(k * k)
    for t in prange(n_out * n_out):
        ty, tx = t // n_out, t % n_out
        for j in range(n):
            acc = np.float32(0.0)
            for dy in range(k):
                row = (ty * k + dy) * side + tx * k
                for dx in range(k):
                    acc += x[row + dx, j]
            out[t, j] = acc * inv


@njit(parallel=True, fastmath={"reassoc", "contract"}, **JIT)
def rms_norm_rows(x, w, eps, out):
    """out (T, n) <- x / sqrt(mean(x^2) + eps) * w per row of x (T, n); f32 sums."""
    n_rows, n = x.shape
    for t in prange(n_rows):
        acc = np.float32(0.0)
        for j in range(n):
            acc += x[t, j] * x[t, j]
        inv = np.float32(1.0) / np.sqrt(acc / np.float32(n) + np.float32(eps))
        for j in range(n):
            out[t, j] = x[t, j] * inv * w[j]


@njit(**JIT, fastmath={"contract"})
def bias_gelu_f16(x, bias):
    """x (T, n) <- gelu(x + bias) in place, as ggml's CPU gives it (GGML_GELU_FP16, which
    SigLIP's towers run through): 0 at or below -10, the value itself at or above 10, and
    between, its f16 table: the tanh GELU of the value rounded to f16, rounded to f16."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        row = x[t]
        for j in range(n_cols):
            v = row[j] + bias[j]
            if v <= np.float32(-10.0):
                row[j] = np.float32(0.0)
            elif v >= np.float32(10.0):
                row[j] = v
            else:
                row[j] = round_f16(gelu_one(round_f16(v)))


@njit(**JIT)
def round_rows_f16(x):
    """x (T, n) <- x rounded to the nearest f16 (ties to even), in place, as ggml_cast to F16."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        for j in range(n_cols):
            x[t, j] = round_f16(x[t, j])


def bias_gelu_f16_ref(x, bias):
    y = x + bias
    h = y.astype(np.float16).astype(np.float64)
    g = 0.5 * h * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * h * (1.0 + 0.044715 * h * h)))
    g = g.astype(np.float32).astype(np.float16).astype(np.float32)
    return np.where(y <= -10, np.float32(0), np.where(y >= 10, y, g)).astype(np.float32)


def avg_pool_tokens_ref(x, side, k):
    n = x.shape[1]
    g = x.astype(np.float64).reshape(side // k, k, side // k, k, n)
    return g.mean(axis=(1, 3)).reshape(-1, n).astype(np.float32)


def rms_norm_rows_ref(x, w, eps):
    x = x.astype(np.float64)
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w).astype(np.float32)


@njit(**JIT)
def bias_gelu_quick(x, bias):
    """x (T, n) <- gelu_quick(x + bias) = y / (1 + e^(-1.702 y)), in place; bias (n,). The
    exponent is clamped where e^-1.702y would overflow float32 (the result is 0 there anyway)."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        row = x[t]
        for j in range(n_cols):
            y = row[j] + bias[j]
            row[j] = y / (np.float32(1.0) + np.exp(min(np.float32(-1.702) * y, np.float32(80.0))))


def bias_gelu_quick_ref(x, bias):
    y = (x + bias).astype(np.float64)
    return (y / (1.0 + np.exp(-1.702 * y))).astype(np.float32)


def rope_vision(x, pos_y, pos_x, n_head, base=10000.0):
    """x (T, n_head * d) rotated in place as ggml_rope_multi's GGML_ROPE_TYPE_VISION with
    qwen2vl's sections (d/4 each): pair (i, i + d/2) turns by pos_y * base^(-4i/d) for i < d/4,
    by pos_x * base^(-4(i - d/4)/d) above; each angle grown by repeated float32 products, as
    ggml's cache init grows it."""
    d = x.shape[1] // n_head
    half, quarter = d // 2, d // 4
    scale = np.float32(np.power(np.float32(base), np.float32(-2.0) / np.float32(half)))
    cos = np.empty((len(x), half), np.float32)
    sin = np.empty_like(cos)
    for start, pos in ((0, pos_y), (quarter, pos_x)):
        theta = pos.astype(np.float32)
        for i in range(start, start + quarter):
            cos[:, i], sin[:, i] = np.cos(theta), np.sin(theta)
            theta = theta * scale
    heads = x.reshape(len(x), n_head, d)
    x0, x1 = heads[:, :, :half].copy(), heads[:, :, half:].copy()
    c, s = cos[:, None, :], sin[:, None, :]
    heads[:, :, :half] = x0 * c - x1 * s
    heads[:, :, half:] = x0 * s + x1 * c

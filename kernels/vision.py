"""The vision towers' row ops: patches of an image as rows, the gemma3 projector's average pool
and its RMS norm. Plain numpy references beside the numba kernels (tests compare them)."""
import numpy as np
from numba import njit, prange

from .quants import JIT


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


def avg_pool_tokens_ref(x, side, k):
    n = x.shape[1]
    g = x.astype(np.float64).reshape(side // k, k, side // k, k, n)
    return g.mean(axis=(1, 3)).reshape(-1, n).astype(np.float32)


def rms_norm_rows_ref(x, w, eps):
    x = x.astype(np.float64)
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w).astype(np.float32)

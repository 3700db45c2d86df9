"""Linear layers over float32 weights (BLAS) or ggml-typed ones (dasllama's matmul kernels), for
the Whisper encoder and decoder.

Float products run as single-threaded sgemms, one per block of rows, on the caller's thread
pool (`rows_matmul`), never on OpenBLAS's own threads: those spin for a while after each call,
and on 2 cores the spinning thread takes a core from whatever runs next (the attention tiles on
the pool, numba's threads), which cost a third of the encoder's attention time."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from gguf.quants import quantize

from dasllama.kernels.matmul import matmul_f32
from dasllama.kernels.quants import F16


MIN_ROWS = 32        # rows per pool job below which one sgemm on the calling thread is faster


class RowPool(ThreadPoolExecutor):
    """The threads that share out float products and attention tiles, n_threads of them."""

    def __init__(self, n_threads):
        super().__init__(n_threads)
        self.n_threads = n_threads


def on_pool(pool, fn, jobs):
    """fn(job) for each of `jobs`, on `pool` (a RowPool) or, without one, on this thread."""
    if pool is None:
        for job in jobs:
            fn(job)
    else:
        list(pool.map(fn, jobs))


def over_rows(pool, n_rows, fn):
    """fn(r0, r1) over contiguous blocks of n_rows rows, one per thread of `pool` (a RowPool;
    None, or too few rows to share: one call on this thread)."""
    n_jobs = 1 if pool is None else min(pool.n_threads, n_rows // MIN_ROWS)
    if n_jobs <= 1:
        fn(0, n_rows)
        return
    bounds = np.linspace(0, n_rows, n_jobs + 1).astype(int)
    on_pool(pool, lambda i: fn(bounds[i], bounds[i + 1]), range(n_jobs))


def rows_matmul(a, b, pool=None):
    """a @ b as sgemms over blocks of a's rows on `pool`, each into its slice of one output.
    Run it with BLAS limited to one thread."""
    out = np.empty((len(a), b.shape[1]), np.result_type(a, b))
    over_rows(pool, len(a), lambda r0, r1: np.matmul(a[r0:r1], b, out=out[r0:r1]))
    return out


class Linear:
    """y = x W^T + b, W (n_rows, n_cols) held as float32 for BLAS; products over `pool`
    (rows_matmul) when given."""

    def __init__(self, w, bias=None, pool=None):
        self.w = np.ascontiguousarray(w, np.float32)
        self.bias = None if bias is None else np.asarray(bias, np.float32)
        self.pool = pool

    def product(self, x):                                # (T, n_cols) -> (T, n_rows)
        """x W^T without the bias."""
        return rows_matmul(x, self.w.T, self.pool)

    def __call__(self, x):                               # (T, n_cols) -> (T, n_rows)
        y = self.product(x)
        if self.bias is not None:
            y += self.bias
        return y

    def transposed(self, x):                             # (T, n_cols) -> (n_rows, T)
        """(x W^T + b)^T, computed as W x^T: rows of the result are output features, so a
        head's slice of them is contiguous (no split copies for attention)."""
        y = rows_matmul(self.w, x.T, self.pool)
        if self.bias is not None:
            y += self.bias[:, None]
        return y


class KernelLinear(Linear):
    """y = x W^T + b for W in a ggml type, through dasllama's matmul kernels (numba threads)."""

    def __init__(self, qtype, w, n_rows, n_cols, bias=None):
        self.qtype, self.n_rows, self.n_cols = int(qtype), n_rows, n_cols
        self.w = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
        self.bias = None if bias is None else np.asarray(bias, np.float32)

    @classmethod
    def quantized(cls, linear, qtype):
        """A float Linear with its weight quantized to `qtype` (gguf's reference quantizer)."""
        return cls(qtype, quantize(linear.w, qtype), *linear.w.shape, bias=linear.bias)

    def product(self, x):                                # (T, n_cols) -> (T, n_rows)
        """x W^T without the bias."""
        return matmul_f32(self.qtype, self.w, self.n_rows, self.n_cols, x)

    def transposed(self, x):                             # (T, n_cols) -> (n_rows, T)
        return np.ascontiguousarray(self(x).T)


def f16_linear(linear):
    """A float Linear as f16 for the matmul kernels (per-token products: half the bytes)."""
    return KernelLinear(F16, linear.w.astype(np.float16), *linear.w.shape, bias=linear.bias)

"""Linear layers over float32 weights (BLAS) or ggml-typed ones (dasllama's matmul kernels), for
the Whisper encoder and decoder."""
import numpy as np
from gguf.quants import quantize

from dasllama.kernels.matmul import matmul_f32
from dasllama.kernels.quants import F16


class Linear:
    """y = x W^T + b, W (n_rows, n_cols) held as float32 for BLAS."""

    def __init__(self, w, bias=None):
        self.w = np.ascontiguousarray(w, np.float32)
        self.bias = None if bias is None else np.asarray(bias, np.float32)

    def product(self, x):                                # (T, n_cols) -> (T, n_rows)
        """x W^T without the bias."""
        return x @ self.w.T

    def __call__(self, x):                               # (T, n_cols) -> (T, n_rows)
        y = self.product(x)
        if self.bias is not None:
            y += self.bias
        return y

    def transposed(self, x):                             # (T, n_cols) -> (n_rows, T)
        """(x W^T + b)^T, computed as W x^T: rows of the result are output features, so a
        head's slice of them is contiguous (no split copies for attention)."""
        y = self.w @ x.T
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

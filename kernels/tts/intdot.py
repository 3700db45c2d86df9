"""Exact integer matrix products for ONNX Runtime's dynamic int8 graphs (MatMulInteger,
ConvInteger, DynamicQuantizeLSTM): uint8 activations x int8 (or uint8) weights, both with
zero points, summed in int32 as ONNX Runtime does, so the float result that follows is
the reference's to the last bit of the integer part.

numba, not an LLVM-IR tile: the sum must be an exact int32, and numba's loop of widened
products (u8 -> i16 -> i32, LLVM vectorises it to vpmaddwd) is exact by construction. The
weights are stored transposed once at load, (N, K) rows contiguous, zero point already
subtracted (int16), so the inner loop is one contiguous dot per output.
"""
import numpy as np
from numba import njit, prange

from ..quants import JIT

PAR = dict(JIT, parallel=True)


def weight_rows(b, b_zero_point):
    """B (K, N) int8/uint8 and its zero point (scalar or (N,)) -> (N, K) int16, b - zp."""
    zp = np.asarray(b_zero_point, np.int16).reshape(-1)
    return np.ascontiguousarray((b.astype(np.int16) - (zp if zp.size > 1 else zp[0])).T)


@njit(**PAR)
def _matmul_rows(a, a_zp, wt, out):
    """out (M, N) int32 = (a (M, K) u8 - a_zp) @ wt.T, wt (N, K) int16."""
    m, k = a.shape
    n = wt.shape[0]
    for i in prange(m):
        row = np.empty(k, np.int16)
        for j in range(k):
            row[j] = np.int16(a[i, j]) - a_zp
        for c in range(n):
            acc = np.int32(0)
            for j in range(k):
                acc += np.int32(row[j]) * np.int32(wt[c, j])
            out[i, c] = acc


@njit(**PAR)
def _matmul_cols(a, a_zp, wt, out):
    """The same product split over the output columns, for few rows (an LSTM step)."""
    m, k = a.shape
    n = wt.shape[0]
    rows = np.empty((m, k), np.int16)
    for i in range(m):
        for j in range(k):
            rows[i, j] = np.int16(a[i, j]) - a_zp
    for c in prange(n):
        for i in range(m):
            acc = np.int32(0)
            for j in range(k):
                acc += np.int32(rows[i, j]) * np.int32(wt[c, j])
            out[i, c] = acc


def matmul_int(a, a_zero_point, wt):
    """(a (M, K) uint8 - a_zero_point) @ (wt (N, K) int16).T -> (M, N) int32, exact."""
    a = np.ascontiguousarray(a, np.uint8)
    out = np.empty((a.shape[0], wt.shape[0]), np.int32)
    kernel = _matmul_rows if a.shape[0] >= 8 else _matmul_cols
    kernel(a, np.int16(a_zero_point), wt, out)
    return out


def matmul_int_ref(a, a_zero_point, b, b_zero_point):
    """The plain reference: int64 numpy, (M, K) x (K, N)."""
    return ((a.astype(np.int64) - int(a_zero_point)) @
            (b.astype(np.int64) - np.asarray(b_zero_point, np.int64))).astype(np.int32)

"""Attention of a few queries over keys and values held as f16, for a decoder step.

A Whisper decode step attends one query per head over the window's 1500 cross-attention keys
and values in every layer: as float32 they are 4.6 MB a layer for base, read on every token,
so their bytes set the time. Held as IEEE half (what whisper.cpp keeps them as, in its
kv_cross and kv_self caches) they are half that, and this kernel reads each exactly once:
scores, softmax and the weighted sum of values in one pass per (query, head), in parallel over
them, with no numpy temporaries between.
"""
import numba
import numpy as np
from numba import njit

from .encoder_ops import exp_shifted
from ..ir import f16_to_f32, f32_to_f16
from ..quants import JIT


@njit(**JIT, parallel=True, fastmath={"reassoc", "contract"})
def attend_f16(q, k_t, v_t, n_keys, n_head, first, out):
    """out (T, n) <- softmax(q k^T) v per head, q (T, n) f32 scaled already; k_t and v_t
    (n, S_max) uint16 IEEE-half bits, transposed (feature rows, key columns; the first n_keys
    columns valid), head h in rows h*d:(h+1)*d. Query t sees keys 0..first+t (causal, `first`
    = position of q[0]), or all n_keys when first < 0. Transposed operands keep every inner
    loop a contiguous run over keys: scores accumulate as vectors of keys, one feature row at a
    time, and each output feature is one dot over the keys."""
    n_tok, n = q.shape
    d = n // n_head
    for job in numba.prange(n_tok * n_head):
        t, h = job // n_head, job % n_head
        c0 = h * d
        nk = n_keys if first < 0 else min(n_keys, first + t + 1)
        s = np.zeros(nk, np.float32)
        for i in range(d):
            qi = q[t, c0 + i]
            row = k_t[c0 + i, :nk]
            for j in range(nk):
                s[j] += qi * f16_to_f32(row[j])
        inv = np.float32(1.0) / exp_shifted(s)
        for i in range(d):
            row = v_t[c0 + i, :nk]
            acc = np.float32(0.0)
            for j in range(nk):
                acc += s[j] * f16_to_f32(row[j])
            out[t, c0 + i] = acc * inv


@njit(**JIT)
def to_f16_bits(x, out):
    """out (n, T) uint16 <- x (T, n) f32 transposed, rounded to IEEE half (nearest even)."""
    n_rows, n_cols = x.shape
    for t in range(n_rows):
        for j in range(n_cols):
            out[j, t] = f32_to_f16(x[t, j])


@njit(**JIT)
def bias_f16_bits(y, bias, out):
    """out (R, S) uint16 <- y (R, S) + bias[:, None] rounded to IEEE half (nearest even): the
    float32 sum, then one rounding, as numpy's y += b and to_f16_bits give; rows and columns
    in place, so the conversion vectorises."""
    for r in range(y.shape[0]):
        b = bias[r]
        for t in range(y.shape[1]):
            out[r, t] = f32_to_f16(y[r, t] + b)


def attend_ref(q, k_t, v_t, n_keys, n_head, first):
    """The float64 numpy reference of attend_f16."""
    k = k_t[:, :n_keys].view(np.float16).astype(np.float64).T
    v = v_t[:, :n_keys].view(np.float16).astype(np.float64).T
    n_tok, n = q.shape
    d = n // n_head
    out = np.empty((n_tok, n), np.float64)
    for t in range(n_tok):
        n_keys = len(k) if first < 0 else min(len(k), first + t + 1)
        for h in range(n_head):
            cols = slice(h * d, (h + 1) * d)
            s = k[:n_keys, cols] @ q[t, cols].astype(np.float64)
            p = np.exp(s - s.max())
            out[t, cols] = p @ v[:n_keys, cols] / p.sum()
    return out

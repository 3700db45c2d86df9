"""Whisper's decoder layers as one compiled call: a decode step of tiny.en runs some 60 kernels
(norms, f16 products, attention), and dispatching each from Python cost about 1 ms a step, a
third of it. Each step here is the same kernel the Python loop called, in the same order, so
the result is the same bits.

Weights come stacked by layer: every linear as f16 bits (n_layer, rows * cols * 2) uint8 with
its bias (n_layer, rows), the three layer norms as norms (n_layer, 6, n_state) rows attn_ln w,
b, cross_attn_ln w, b, mlp_ln w, b. Keys and values are f16 bits, transposed, as
kernels.speech.attend reads them.
"""
import numpy as np
from numba import njit

from ..actq import ACT_F16, quantize_act
from .attend import attend_f16, to_f16_bits
from .encoder_ops import bias_gelu, layer_norm
from ..matmul import matmul_for
from ..quants import F16, JIT

LN_ATTN, LN_CROSS, LN_MLP = 0, 2, 4     # rows of norms: w at i, b at i + 1
# the dispatch over F16 alone: the all-formats `matmul` made the step compile every format's
# kernels (79 compiles, ~100 of a cold transcribe's 156 compile seconds, for one format)
_matmul_f16 = matmul_for((F16,))


@njit(**JIT)
def _product(w, x, n_rows):
    """x (T, cols) W^T as a new (T, n_rows), W f16 bits; x rounded to f16 as ggml does."""
    n_tok, n_cols = x.shape
    xf = np.empty((n_tok, n_cols), np.float32)
    unused_q, unused_d = np.empty((n_tok, 32), np.int8), np.empty((n_tok, 1), np.float32)
    quantize_act(ACT_F16, x, unused_q, unused_d, unused_d, xf)
    y = np.empty((n_tok, n_rows), np.float32)
    _matmul_f16(F16, w, n_rows, n_cols, unused_q, unused_d, unused_d, xf, n_tok, y)
    return y


@njit(**JIT)
def _linear(w, b, x, n_rows):
    """x W^T + b (the bias added after the product, as numpy's y += b)."""
    y = _product(w, x, n_rows)
    for t in range(y.shape[0]):
        for r in range(n_rows):
            y[t, r] += b[r]
    return y


@njit(**JIT)
def _add(x, y):
    for t in range(x.shape[0]):
        for i in range(x.shape[1]):
            x[t, i] += y[t, i]


@njit(**JIT)
def _norm(x, norms, il, row, eps):
    h = np.empty_like(x)
    layer_norm(x, norms[il, row], norms[il, row + 1], eps, h)
    return h


@njit(**JIT)
def _scaled(q, scale):
    out = np.empty_like(q)
    for t in range(q.shape[0]):
        for i in range(q.shape[1]):
            out[t, i] = q[t, i] * scale
    return out


@njit(**JIT)
def decoder_layers(x, pos0, n_head, scale, eps, k_cache, v_cache, cross_k, cross_v, norms,
                   w_qkv, b_qkv, w_out, b_out, w_cq, b_cq, w_co, b_co, w_up, b_up, w_down,
                   b_down):
    """x (T, n_state) <- the decoder layers applied to the embedded tokens at positions
    pos0.., in place; their keys and values go into k_cache/v_cache (n_layer, n_state, n_ctx)
    at those positions. cross_k/cross_v (n_layer, n_state, n_audio_ctx); scale = d^-1/2."""
    n_tok, n = x.shape
    n_ff = b_up.shape[1]
    o = np.empty((n_tok, n), np.float32)
    for il in range(k_cache.shape[0]):
        qkv = _linear(w_qkv[il], b_qkv[il], _norm(x, norms, il, LN_ATTN, eps), 3 * n)
        to_f16_bits(qkv[:, n:2 * n], k_cache[il, :, pos0:pos0 + n_tok])
        to_f16_bits(qkv[:, 2 * n:], v_cache[il, :, pos0:pos0 + n_tok])
        attend_f16(_scaled(qkv[:, :n], scale), k_cache[il], v_cache[il], pos0 + n_tok, n_head,
                   pos0, o)
        _add(x, _linear(w_out[il], b_out[il], o, n))
        q = _linear(w_cq[il], b_cq[il], _norm(x, norms, il, LN_CROSS, eps), n)
        attend_f16(_scaled(q, scale), cross_k[il], cross_v[il], cross_k.shape[2], n_head, -1, o)
        _add(x, _linear(w_co[il], b_co[il], o, n))
        up = _product(w_up[il], _norm(x, norms, il, LN_MLP, eps), n_ff)
        bias_gelu(up, b_up[il])
        _add(x, _linear(w_down[il], b_down[il], up, n))

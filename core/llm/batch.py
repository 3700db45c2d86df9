"""One decode step of several sequences at once: B tokens, each at its own position in its own
KV cache, through every layer as one B-row batch, so each weight is read once per step
instead of once per sequence (what a server's parallel sequences gain from the batch tiles).

The layer is forward.py's, built from the same steps (_qkv, _ffn, _output); only the
positions, the caches and attention are per row (each row attends over its own sequence's
cache, through the one-query path a decode step takes). No trace, and every row's logits
are kept.
"""
import numpy as np
from numba import njit

from dasllama.kernels.attention import attention, store_kv
from dasllama.kernels.ops import rms_norm

from .forward import (F_ATTN_NORM, F_ATTN_POST_NORM, F_FFN_NORM, H_HEAD_DIM, H_HEAD_DIM_V, H_N_EMBD,
                      H_N_HEAD, H_N_HEAD_KV, H_N_LAYER, H_N_ROT, H_N_SWA, HF_ATTN_SOFTCAP,
                      HF_EMBD_SCALE, HF_EPS, HF_FINAL_SOFTCAP, HF_KQ_SCALE, HF_Q_SCALE, W_O,
                      _add_residual, _embed, _ffn, _fvec, _linear, _output, _qkv, _rope_tables, _scale,
                      _scratch_views, _view)


@njit(cache=True)
def forward_batch(tokens, positions, slots, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, hpf, layer_swa,
                  layer_freq_base, kcaches, vcaches, scratch, acts, gelu_tab, logits, n_threads):
    """Run tokens (B,) at positions (B,) of sequences slots (B,) through the model; write
    every row's logits into logits[:B].

    kcaches, vcaches: (n_seq, n_layer, n_ctx, kv_dim) uint16, one cache per sequence; the
    other arguments as forward.forward's."""
    n_layer, n_embd = hp[H_N_LAYER], hp[H_N_EMBD]
    n_head, n_head_kv = hp[H_N_HEAD], hp[H_N_HEAD_KV]
    hd, hdv = hp[H_HEAD_DIM], hp[H_HEAD_DIM_V]
    eps = hpf[HF_EPS]
    B = tokens.shape[0]
    gl = n_layer
    sx, sxn, sq, sk, sv, satt, sao, sgate, sup, shid = scratch
    x, xn, q, k, v, att, ao, gate, up, hid = _scratch_views(scratch, B, hp)
    no_acts = np.int64(-1)
    angles, layer_tab = _rope_tables(positions, hp[H_N_ROT], layer_freq_base)
    _embed(tokens, wbuf, wtab, gl, hpf[HF_EMBD_SCALE], x)

    for il in range(n_layer):
        rms_norm(x, _fvec(fbuf, ftab[il, F_ATTN_NORM]), eps, xn)
        _qkv(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, sgate, angles[layer_tab[il]], q, k, v)
        if hpf[HF_Q_SCALE] != 1.0:
            _scale(q, np.float32(hpf[HF_Q_SCALE]))
        n_swa = hp[H_N_SWA] if layer_swa[il] else 0
        for t in range(B):
            kc, vc = kcaches[slots[t], il], vcaches[slots[t], il]
            store_kv(k[t:t + 1], kc, positions[t])
            store_kv(v[t:t + 1], vc, positions[t])
            attention(q[t:t + 1], kc, vc, positions[t], n_head, n_head_kv, hd, hdv,
                      hpf[HF_KQ_SCALE], hpf[HF_ATTN_SOFTCAP], n_swa, att[t:t + 1], n_threads)
        _linear(wbuf, wtab[il, W_O], cbuf, ctab[il, W_O], att, acts, ao, no_acts)
        if ftab[il, F_ATTN_POST_NORM, 1] > 0:
            rms_norm(ao, _fvec(fbuf, ftab[il, F_ATTN_POST_NORM]), eps, ao)
        _add_residual(ao, x)

        rms_norm(x, _fvec(fbuf, ftab[il, F_FFN_NORM]), eps, xn)
        _ffn(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, gelu_tab, shid, gate, up, hid, ao)
        _add_residual(ao, x)

    _output(x, wbuf, wtab, cbuf, ctab, fbuf, ftab, gl, eps, hpf[HF_FINAL_SOFTCAP], acts, _view(sxn, B, n_embd),
            logits[:B])

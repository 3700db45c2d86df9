"""One decode step of several sequences at once: B tokens, each at its own position in its own
KV cache, through every layer as one B-row batch, so each weight is read once per step
instead of once per sequence (what a server's parallel sequences gain from the batch tiles).

The layer is forward.py's, row for row; only the positions, the caches and attention are per
row (each row attends over its own sequence's cache, through the one-query path a decode
step takes). No trace, and every row's logits are kept.
"""
import numpy as np
from numba import njit

from dasllama.kernels.attention import attention, store_kv
from dasllama.kernels.matmul import dequantize_row
from dasllama.kernels.ops import geglu, rms_norm, rms_norm_heads, rope_angles, rope_apply, swiglu

from .forward import (ACT_GELU, F_ATTN_NORM, F_ATTN_POST_NORM, F_BK, F_BQ, F_BQKV, F_BV,
                      F_FFN_NORM, F_FFN_POST_NORM, F_K_NORM, F_OUT_NORM, F_Q_NORM, H_ACT,
                      H_HEAD_DIM, H_HEAD_DIM_V, H_N_EMBD, H_N_FF, H_N_HEAD, H_N_HEAD_KV, H_N_LAYER,
                      H_N_ROT, H_N_SWA, H_N_VOCAB, H_ROPE_MODE, HF_ATTN_SOFTCAP, HF_EMBD_SCALE,
                      HF_EPS, HF_FINAL_SOFTCAP, HF_KQ_SCALE, HF_Q_SCALE, W_DOWN, W_EMBD, W_GATE,
                      W_K, W_O, W_OUT, W_Q, W_QKV, W_UP, W_V, _add_bias, _add_residual, _fvec,
                      _linear, _view)


@njit(cache=True)
def forward_batch(tokens, positions, slots, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, hpf, layer_swa,
                  layer_freq_base, kcaches, vcaches, scratch, acts, gelu_tab, logits, n_threads):
    """Run tokens (B,) at positions (B,) of sequences slots (B,) through the model; write
    every row's logits into logits[:B].

    kcaches, vcaches: (n_seq, n_layer, n_ctx, kv_dim) uint16, one cache per sequence; the
    other arguments as forward.forward's."""
    n_layer, n_embd = hp[H_N_LAYER], hp[H_N_EMBD]
    n_head, n_head_kv = hp[H_N_HEAD], hp[H_N_HEAD_KV]
    hd, hdv, n_ff, n_vocab = hp[H_HEAD_DIM], hp[H_HEAD_DIM_V], hp[H_N_FF], hp[H_N_VOCAB]
    eps = hpf[HF_EPS]
    B = tokens.shape[0]
    gl = n_layer
    sx, sxn, sq, sk, sv, satt, sao, sgate, sup, shid = scratch
    x = _view(sx, B, n_embd)
    xn = _view(sxn, B, n_embd)
    q = _view(sq, B, n_head * hd)
    k = _view(sk, B, n_head_kv * hd)
    v = _view(sv, B, n_head_kv * hdv)
    att = _view(satt, B, n_head * hdv)
    ao = _view(sao, B, n_embd)
    gate = _view(sgate, B, n_ff)
    up = _view(sup, B, n_ff)
    hid = _view(shid, B, n_ff)
    no_acts = np.int64(-1)
    n_rot = hp[H_N_ROT]
    bases = np.empty(n_layer, np.float64)
    layer_tab = np.empty(n_layer, np.int64)
    n_bases = 0
    for il in range(n_layer):
        j = 0
        while j < n_bases and bases[j] != layer_freq_base[il]:
            j += 1
        if j == n_bases:
            bases[j] = layer_freq_base[il]
            n_bases += 1
        layer_tab[il] = j
    angles = np.empty((n_bases, B, 2, n_rot // 2), np.float32)
    for j in range(n_bases):
        rope_angles(positions, n_rot, bases[j], angles[j])

    e_off, e_qt, e_cols = wtab[gl, W_EMBD, 0], wtab[gl, W_EMBD, 1], wtab[gl, W_EMBD, 3]
    for t in range(B):
        dequantize_row(e_qt, wbuf[e_off:], tokens[t], e_cols, x[t])
    if hpf[HF_EMBD_SCALE] != 1.0:
        s = np.float32(hpf[HF_EMBD_SCALE])
        for t in range(B):
            for i in range(n_embd):
                x[t, i] = x[t, i] * s

    for il in range(n_layer):
        rms_norm(x, _fvec(fbuf, ftab[il, F_ATTN_NORM]), eps, xn)
        if wtab[il, W_QKV, 1] >= 0:
            qkv = _view(sgate, B, n_head * hd + n_head_kv * (hd + hdv))
            _linear(wbuf, wtab[il, W_QKV], cbuf, ctab[il, W_QKV], xn, acts, qkv, no_acts)
            _add_bias(fbuf, ftab[il, F_BQKV], qkv)
            for t in range(B):
                q[t, :] = qkv[t, :n_head * hd]
                k[t, :] = qkv[t, n_head * hd:n_head * hd + n_head_kv * hd]
                v[t, :] = qkv[t, n_head * hd + n_head_kv * hd:]
        else:
            have = _linear(wbuf, wtab[il, W_Q], cbuf, ctab[il, W_Q], xn, acts, q, no_acts)
            have = _linear(wbuf, wtab[il, W_K], cbuf, ctab[il, W_K], xn, acts, k, have)
            _linear(wbuf, wtab[il, W_V], cbuf, ctab[il, W_V], xn, acts, v, have)
            _add_bias(fbuf, ftab[il, F_BQ], q)
            _add_bias(fbuf, ftab[il, F_BK], k)
            _add_bias(fbuf, ftab[il, F_BV], v)
        if ftab[il, F_Q_NORM, 1] > 0:
            rms_norm_heads(q, _fvec(fbuf, ftab[il, F_Q_NORM]), eps, n_head, hd)
            rms_norm_heads(k, _fvec(fbuf, ftab[il, F_K_NORM]), eps, n_head_kv, hd)
        rope_apply(q, angles[layer_tab[il]], n_head, hd, n_rot, hp[H_ROPE_MODE])
        rope_apply(k, angles[layer_tab[il]], n_head_kv, hd, n_rot, hp[H_ROPE_MODE])
        if hpf[HF_Q_SCALE] != 1.0:
            s = np.float32(hpf[HF_Q_SCALE])
            for t in range(B):
                for i in range(n_head * hd):
                    q[t, i] = q[t, i] * s
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
        if wtab[il, W_GATE, 1] >= 0:
            have = _linear(wbuf, wtab[il, W_GATE], cbuf, ctab[il, W_GATE], xn, acts, gate, no_acts)
            _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, up, have)
        else:
            gu = _view(shid, B, 2 * n_ff)     # phi3: ffn_up holds [gate; up]
            _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, gu, no_acts)
            for t in range(B):
                gate[t, :] = gu[t, :n_ff]
                up[t, :] = gu[t, n_ff:]
        if hp[H_ACT] == ACT_GELU:
            geglu(gate, up, gelu_tab, hid)
        else:
            swiglu(gate, up, hid)
        _linear(wbuf, wtab[il, W_DOWN], cbuf, ctab[il, W_DOWN], hid, acts, ao, no_acts)
        if ftab[il, F_FFN_POST_NORM, 1] > 0:
            rms_norm(ao, _fvec(fbuf, ftab[il, F_FFN_POST_NORM]), eps, ao)
        _add_residual(ao, x)

    xo = _view(sxn, B, n_embd)
    rms_norm(x, _fvec(fbuf, ftab[gl, F_OUT_NORM]), eps, xo)
    out = logits[:B]
    _linear(wbuf, wtab[gl, W_OUT], cbuf, ctab[gl, W_OUT], xo, acts, out, no_acts)
    cap = hpf[HF_FINAL_SOFTCAP]
    if cap != 0.0:
        c = np.float32(cap)
        inv = np.float32(1.0) / c
        for t in range(B):
            for i in range(n_vocab):
                out[t, i] = np.float32(np.tanh(out[t, i] * inv)) * c

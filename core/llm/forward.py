"""The transformer forward pass shared by every family, as one compiled function.

A family file (core/llm/families/*.py) describes its model as tables: weight slots per layer
(offset, quant type, rows, cols into the memory-mapped file), small f32 tensors (norms,
biases), integer and float hyper-parameters and per-layer flags. `forward` runs T tokens
through all layers without returning to Python, so a decode step costs one dispatch, not one
per layer. Named intermediates can be recorded into a trace array for `verify`.
"""
import numpy as np
from numba import njit

from dasllama.kernels.matmul import act_kind, dequantize_row, matmul, quantize_act
from dasllama.kernels.attention import attention, store_kv
from dasllama.kernels.ops import geglu, rms_norm, rms_norm_heads, rope_angles, rope_apply, swiglu

# weight slots (wtab[layer, slot] = offset, qtype, rows, cols; qtype -1 = absent)
W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_QKV = range(8)
N_WSLOTS = 8
# global weights live in row n_layer of wtab
W_EMBD, W_OUT = 0, 1

# small f32 tensors (ftab[layer, slot] = offset into fbuf, length; length 0 = absent)
(F_ATTN_NORM, F_Q_NORM, F_K_NORM, F_ATTN_POST_NORM, F_FFN_NORM, F_FFN_POST_NORM,
 F_BQ, F_BK, F_BV, F_BQKV) = range(10)
N_FSLOTS = 10
F_OUT_NORM = 0     # in row n_layer

# integer hyper-parameters (hp)
(H_N_LAYER, H_N_EMBD, H_N_HEAD, H_N_HEAD_KV, H_HEAD_DIM, H_HEAD_DIM_V, H_N_FF, H_N_VOCAB,
 H_N_ROT, H_ROPE_MODE, H_ACT, H_N_SWA) = range(12)
N_HP = 12
# float hyper-parameters (hpf)
(HF_EPS, HF_EMBD_SCALE, HF_Q_SCALE, HF_KQ_SCALE, HF_ATTN_SOFTCAP, HF_FINAL_SOFTCAP) = range(6)
N_HPF = 6

ACT_SILU, ACT_GELU = 0, 1

# names recorded by the trace, in llama.cpp's callback names (cb(cur, "attn_norm", il))
TRACE_NAMES = ("attn_norm", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp",
               "ffn_norm", "ffn_out", "l_out")


@njit(cache=True)
def _view(buf, rows, cols):
    return buf[:rows * cols].reshape(rows, cols)


@njit(cache=True)
def _fvec(fbuf, frow):
    """The f32 tensor whose ftab row (offset, length) is frow."""
    return fbuf[frow[0]:frow[0] + frow[1]]


@njit(cache=True)
def _linear(wbuf, wrow, cbuf, prow, x, acts, out, have):
    """out (T, rows) = x (T, cols) @ W^T, quantizing x the way the weight's format wants;
    wrow, prow: the weight's wtab row (offset, qtype, rows, cols) and ctab entries (the same
    of each copy, then the batch sizes min..max it serves: model.weight_copies). A copy
    serves the batches it was made for (same result, faster kernel).
    have: the activation kind `acts` already holds for this same x (from the previous
    product on it; -1 when none), which is then not quantised again; returns the kind
    `acts` holds.
    Every call passes the same argument types: a literal slot number or an omitted `have`
    would make numba compile (and link the whole matmul dispatch into) one copy per call."""
    T = x.shape[0]
    for c in range(prow.shape[0]):
        if prow[c, 1] >= 0 and prow[c, 4] <= T <= prow[c, 5]:
            wrow, wbuf = prow[c], cbuf
            break
    off, qtype, rows, cols = wrow[0], wrow[1], wrow[2], wrow[3]
    xq, xd, xa, xf = acts
    kind = act_kind(qtype)
    xq2 = _view(xq, T, cols)
    xd2 = _view(xd, T, cols // 32)
    xa2 = _view(xa, T, cols // 16)
    xf2 = _view(xf, T, cols)
    if kind != have:
        quantize_act(kind, x, xq2, xd2, xa2, xf2)
    matmul(qtype, wbuf[off:], rows, cols, xq2, xd2, xa2, xf2, T, out)
    return kind


@njit(cache=True)
def _add_bias(fbuf, frow, y):
    if frow[1] > 0:
        b = _fvec(fbuf, frow)
        for t in range(y.shape[0]):
            for i in range(y.shape[1]):
                y[t, i] += b[i]


@njit(cache=True)
def _add_residual(y, x):
    """x += y, as ggml_add(y, x) rounds it (T, n_embd)."""
    for t in range(x.shape[0]):
        for i in range(x.shape[1]):
            x[t, i] = y[t, i] + x[t, i]


@njit(cache=True)
def _trace(trace, name, layer, y):
    """Record y (rows, n) as the last `rows` tokens of the trace (fewer in the last layer)."""
    if trace.shape[0] > 0:
        rows, n = y.shape
        t0 = trace.shape[2] - rows
        for t in range(rows):
            for i in range(n):
                trace[name, layer, t0 + t, i] = y[t, i]


@njit(cache=True)
def forward(tokens, pos0, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, hpf, layer_swa, layer_freq_base,
            kcache, vcache, scratch, acts, gelu_tab, n_out, logits, trace, n_threads):
    """Run tokens (T,) at positions pos0.. through the model; write logits of the last n_out.

    cbuf, ctab: copies of some weights (Q5_0 as Q8_0), laid out as wbuf, wtab, up to two a
    weight, each with the batch sizes it serves (layout -1: none; model.weight_copies);
    kcache, vcache: (n_layer, n_ctx, n_head_kv*head_dim) uint16 f16 bits, filled at pos0..
    scratch: flat f32 buffers (x, xn, q, k, v, att, ao, gate, up, hid); acts: (xq, xd, xa, xf);
    logits: (>= n_out, n_vocab); trace: (len(TRACE_NAMES), n_layer, T, width) or empty;
    n_threads: the thread count, which shapes llama.cpp's split-KV decode attention.
    """
    n_layer, n_embd = hp[H_N_LAYER], hp[H_N_EMBD]
    n_head, n_head_kv = hp[H_N_HEAD], hp[H_N_HEAD_KV]
    hd, hdv, n_ff, n_vocab = hp[H_HEAD_DIM], hp[H_HEAD_DIM_V], hp[H_N_FF], hp[H_N_VOCAB]
    eps = hpf[HF_EPS]
    T = tokens.shape[0]
    gl = n_layer
    sx, sxn, sq, sk, sv, satt, sao, sgate, sup, shid = scratch
    x = _view(sx, T, n_embd)
    xn = _view(sxn, T, n_embd)
    q = _view(sq, T, n_head * hd)
    k = _view(sk, T, n_head_kv * hd)
    v = _view(sv, T, n_head_kv * hdv)
    att = _view(satt, T, n_head * hdv)
    ao = _view(sao, T, n_embd)
    gate = _view(sgate, T, n_ff)
    up = _view(sup, T, n_ff)
    hid = _view(shid, T, n_ff)
    no_acts = np.int64(-1)   # `acts` holds no kind yet; typed, not a literal (see _linear)
    positions = np.empty(T, np.int64)
    for t in range(T):
        positions[t] = pos0 + t
    # RoPE's cos/sin tables, one per distinct frequency base (gemma3: local and global layers)
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
    angles = np.empty((n_bases, T, 2, n_rot // 2), np.float32)
    for j in range(n_bases):
        rope_angles(positions, n_rot, bases[j], angles[j])

    e_off, e_qt, e_cols = wtab[gl, W_EMBD, 0], wtab[gl, W_EMBD, 1], wtab[gl, W_EMBD, 3]
    for t in range(T):
        dequantize_row(e_qt, wbuf[e_off:], tokens[t], e_cols, x[t])
    if hpf[HF_EMBD_SCALE] != 1.0:
        s = np.float32(hpf[HF_EMBD_SCALE])
        for t in range(T):
            for i in range(n_embd):
                x[t, i] = x[t, i] * s

    for il in range(n_layer):
        rms_norm(x, _fvec(fbuf, ftab[il, F_ATTN_NORM]), eps, xn)
        _trace(trace, 0, il, xn)
        if wtab[il, W_QKV, 1] >= 0:
            qkv = _view(sgate, T, n_head * hd + n_head_kv * (hd + hdv))
            _linear(wbuf, wtab[il, W_QKV], cbuf, ctab[il, W_QKV], xn, acts, qkv, no_acts)
            _add_bias(fbuf, ftab[il, F_BQKV], qkv)
            for t in range(T):
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
        _trace(trace, 1, il, q)          # llama.cpp's "Qcur": after RoPE, before the query scale
        if hpf[HF_Q_SCALE] != 1.0:
            s = np.float32(hpf[HF_Q_SCALE])
            for t in range(T):
                for i in range(n_head * hd):
                    q[t, i] = q[t, i] * s
        _trace(trace, 2, il, k)
        _trace(trace, 3, il, v)
        store_kv(k, kcache[il], pos0)
        store_kv(v, vcache[il], pos0)
        n_swa = hp[H_N_SWA] if layer_swa[il] else 0
        attention(q, kcache[il], vcache[il], pos0, n_head, n_head_kv, hd, hdv,
                  hpf[HF_KQ_SCALE], hpf[HF_ATTN_SOFTCAP], n_swa, att, n_threads)
        _trace(trace, 4, il, att)
        _linear(wbuf, wtab[il, W_O], cbuf, ctab[il, W_O], att, acts, ao, no_acts)
        if ftab[il, F_ATTN_POST_NORM, 1] > 0:
            rms_norm(ao, _fvec(fbuf, ftab[il, F_ATTN_POST_NORM]), eps, ao)
        _trace(trace, 5, il, ao)
        if il == n_layer - 1 and n_out < T:
            # llama.cpp keeps only the output rows from here on (ggml_get_rows of
            # inp_out_ids): the last FFN then takes the matmul path of n_out tokens
            x = x[T - n_out:]
            ao = ao[T - n_out:]
            xn = _view(sxn, n_out, n_embd)
            gate = _view(sgate, n_out, n_ff)
            up = _view(sup, n_out, n_ff)
            hid = _view(shid, n_out, n_ff)
            T = n_out
        _add_residual(ao, x)
        _trace(trace, 6, il, x)

        rms_norm(x, _fvec(fbuf, ftab[il, F_FFN_NORM]), eps, xn)
        _trace(trace, 7, il, xn)
        if wtab[il, W_GATE, 1] >= 0:
            have = _linear(wbuf, wtab[il, W_GATE], cbuf, ctab[il, W_GATE], xn, acts, gate, no_acts)
            _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, up, have)
        else:
            gu = _view(shid, T, 2 * n_ff)     # phi3: ffn_up holds [gate; up]
            _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, gu, no_acts)
            for t in range(T):
                gate[t, :] = gu[t, :n_ff]
                up[t, :] = gu[t, n_ff:]
        if hp[H_ACT] == ACT_GELU:
            geglu(gate, up, gelu_tab, hid)
        else:
            swiglu(gate, up, hid)
        _linear(wbuf, wtab[il, W_DOWN], cbuf, ctab[il, W_DOWN], hid, acts, ao, no_acts)
        if ftab[il, F_FFN_POST_NORM, 1] > 0:
            rms_norm(ao, _fvec(fbuf, ftab[il, F_FFN_POST_NORM]), eps, ao)
        _trace(trace, 8, il, ao)
        _add_residual(ao, x)
        _trace(trace, 9, il, x)

    last = x[T - n_out:]
    xo = _view(sxn, n_out, n_embd)
    rms_norm(last, _fvec(fbuf, ftab[gl, F_OUT_NORM]), eps, xo)
    out = logits[:n_out]
    _linear(wbuf, wtab[gl, W_OUT], cbuf, ctab[gl, W_OUT], xo, acts, out, no_acts)
    cap = hpf[HF_FINAL_SOFTCAP]
    if cap != 0.0:
        c = np.float32(cap)
        inv = np.float32(1.0) / c     # ggml_scale by 1/cap, tanh, scale by cap
        for t in range(n_out):
            for i in range(n_vocab):
                out[t, i] = np.float32(np.tanh(out[t, i] * inv)) * c

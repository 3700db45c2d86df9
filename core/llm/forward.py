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
def _scratch_views(scratch, n, hp):
    """The step's arrays for n tokens, as views of the flat scratch buffers: x, xn (n, n_embd),
    q, k, v, att (n, heads * head dim), ao (n, n_embd), gate, up, hid (n, n_ff)."""
    sx, sxn, sq, sk, sv, satt, sao, sgate, sup, shid = scratch
    n_embd, n_ff = hp[H_N_EMBD], hp[H_N_FF]
    n_head, n_head_kv, hd, hdv = hp[H_N_HEAD], hp[H_N_HEAD_KV], hp[H_HEAD_DIM], hp[H_HEAD_DIM_V]
    return (_view(sx, n, n_embd), _view(sxn, n, n_embd), _view(sq, n, n_head * hd),
            _view(sk, n, n_head_kv * hd), _view(sv, n, n_head_kv * hdv), _view(satt, n, n_head * hdv),
            _view(sao, n, n_embd), _view(sgate, n, n_ff), _view(sup, n, n_ff), _view(shid, n, n_ff))


@njit(cache=True)
def _scale(y, s):
    """y *= s, row by row (T, n)."""
    for t in range(y.shape[0]):
        for i in range(y.shape[1]):
            y[t, i] = y[t, i] * s


@njit(cache=True)
def _rope_tables(positions, n_rot, layer_freq_base):
    """RoPE's cos/sin tables at `positions`, one per distinct frequency base (gemma3: local
    and global layers): (angles (n_bases, T, 2, n_rot // 2), each layer's table index)."""
    n_layer = layer_freq_base.shape[0]
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
    angles = np.empty((n_bases, positions.shape[0], 2, n_rot // 2), np.float32)
    for j in range(n_bases):
        rope_angles(positions, n_rot, bases[j], angles[j])
    return angles, layer_tab


@njit(cache=True)
def _embed(tokens, wbuf, wtab, gl, embd_scale, x):
    """x (T, n_embd) = the tokens' embedding rows, scaled where the family scales them."""
    e_off, e_qt, e_cols = wtab[gl, W_EMBD, 0], wtab[gl, W_EMBD, 1], wtab[gl, W_EMBD, 3]
    for t in range(tokens.shape[0]):
        dequantize_row(e_qt, wbuf[e_off:], tokens[t], e_cols, x[t])
    if embd_scale != 1.0:
        _scale(x, np.float32(embd_scale))


@njit(cache=True)
def _qkv(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, sfused, angles, q, k, v):
    """Layer il's q, k, v of xn (T, n_embd): the projections (one fused QKV weight or three)
    with their biases, QK-norm where the family has it, then RoPE (angles: the layer's table).
    sfused: a scratch buffer for the fused product."""
    n_head, n_head_kv, hd, hdv = hp[H_N_HEAD], hp[H_N_HEAD_KV], hp[H_HEAD_DIM], hp[H_HEAD_DIM_V]
    no_acts = np.int64(-1)
    if wtab[il, W_QKV, 1] >= 0:
        qkv = _view(sfused, xn.shape[0], n_head * hd + n_head_kv * (hd + hdv))
        _linear(wbuf, wtab[il, W_QKV], cbuf, ctab[il, W_QKV], xn, acts, qkv, no_acts)
        _add_bias(fbuf, ftab[il, F_BQKV], qkv)
        for t in range(xn.shape[0]):
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
    rope_apply(q, angles, n_head, hd, hp[H_N_ROT], hp[H_ROPE_MODE])
    rope_apply(k, angles, n_head_kv, hd, hp[H_N_ROT], hp[H_ROPE_MODE])


@njit(cache=True)
def _ffn(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, gelu_tab, sfused, gate, up, hid, out):
    """out (T, n_embd) = layer il's feed-forward of xn (T, n_embd): gate and up (two weights, or
    phi3's one [gate; up] through sfused), GeGLU or SwiGLU, down, and the post-norm where the
    family has one."""
    n_ff = hp[H_N_FF]
    no_acts = np.int64(-1)
    if wtab[il, W_GATE, 1] >= 0:
        have = _linear(wbuf, wtab[il, W_GATE], cbuf, ctab[il, W_GATE], xn, acts, gate, no_acts)
        _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, up, have)
    else:
        gu = _view(sfused, xn.shape[0], 2 * n_ff)     # phi3: ffn_up holds [gate; up]
        _linear(wbuf, wtab[il, W_UP], cbuf, ctab[il, W_UP], xn, acts, gu, no_acts)
        for t in range(xn.shape[0]):
            gate[t, :] = gu[t, :n_ff]
            up[t, :] = gu[t, n_ff:]
    if hp[H_ACT] == ACT_GELU:
        geglu(gate, up, gelu_tab, hid)
    else:
        swiglu(gate, up, hid)
    _linear(wbuf, wtab[il, W_DOWN], cbuf, ctab[il, W_DOWN], hid, acts, out, no_acts)
    if ftab[il, F_FFN_POST_NORM, 1] > 0:
        rms_norm(out, _fvec(fbuf, ftab[il, F_FFN_POST_NORM]), eps, out)


@njit(cache=True)
def _output(x, wbuf, wtab, cbuf, ctab, fbuf, ftab, gl, eps, final_softcap, acts, xo, out):
    """out (T, n_vocab) = the logits of x (T, n_embd): output norm into xo, the output matrix,
    and the final soft-cap where the family has one (ggml_scale by 1/cap, tanh, scale by cap)."""
    rms_norm(x, _fvec(fbuf, ftab[gl, F_OUT_NORM]), eps, xo)
    _linear(wbuf, wtab[gl, W_OUT], cbuf, ctab[gl, W_OUT], xo, acts, out, np.int64(-1))
    if final_softcap != 0.0:
        c = np.float32(final_softcap)
        inv = np.float32(1.0) / c
        for t in range(out.shape[0]):
            for i in range(out.shape[1]):
                out[t, i] = np.float32(np.tanh(out[t, i] * inv)) * c


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
    hd, hdv, n_ff = hp[H_HEAD_DIM], hp[H_HEAD_DIM_V], hp[H_N_FF]
    eps = hpf[HF_EPS]
    T = tokens.shape[0]
    gl = n_layer
    sx, sxn, sq, sk, sv, satt, sao, sgate, sup, shid = scratch
    x, xn, q, k, v, att, ao, gate, up, hid = _scratch_views(scratch, T, hp)
    no_acts = np.int64(-1)   # `acts` holds no kind yet; typed, not a literal (see _linear)
    positions = np.empty(T, np.int64)
    for t in range(T):
        positions[t] = pos0 + t
    angles, layer_tab = _rope_tables(positions, hp[H_N_ROT], layer_freq_base)
    _embed(tokens, wbuf, wtab, gl, hpf[HF_EMBD_SCALE], x)

    for il in range(n_layer):
        rms_norm(x, _fvec(fbuf, ftab[il, F_ATTN_NORM]), eps, xn)
        _trace(trace, 0, il, xn)
        _qkv(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, sgate, angles[layer_tab[il]], q, k, v)
        _trace(trace, 1, il, q)          # llama.cpp's "Qcur": after RoPE, before the query scale
        if hpf[HF_Q_SCALE] != 1.0:
            _scale(q, np.float32(hpf[HF_Q_SCALE]))
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
        _ffn(il, wbuf, wtab, cbuf, ctab, fbuf, ftab, hp, eps, xn, acts, gelu_tab, shid, gate, up, hid, ao)
        _trace(trace, 8, il, ao)
        _add_residual(ao, x)
        _trace(trace, 9, il, x)

    _output(x[T - n_out:], wbuf, wtab, cbuf, ctab, fbuf, ftab, gl, eps, hpf[HF_FINAL_SOFTCAP], acts,
            _view(sxn, n_out, n_embd), logits[:n_out])

"""The transformer forward pass shared by every family, as one compiled function.

A family file (core/llm/families/*.py) describes its model as tables: weight slots per layer
(offset, quant type, rows, cols into the memory-mapped file), small f32 tensors (norms,
biases), integer and float hyper-parameters and per-layer flags. `forward` runs T tokens
through all layers without returning to Python, so a decode step costs one dispatch, not one
per layer. Named intermediates can be recorded into a trace array for `verify`.

The functions that reach the matmul dispatch (`_linear` and everything that calls it, marked
@per_formats) are compiled once per set of weight formats, by step.step_for, against the
dispatch over that set: a model's first run then compiles its own formats' kernels, not the
registry's thirteen. The rest are compiled once for all.
"""
from collections import namedtuple

import numpy as np
from numba import njit, prange

from dasllama.kernels.actq import ACT_Q8_0, PAR_ROWS
from dasllama.kernels.matmul import act_kind, quantize_act
from dasllama.kernels.attention import attention, store_kv
from dasllama.kernels.ops import (GATHER16, geglu, geglu_q8_0, rms_norm, rms_norm_heads, rope_angles, rope_apply,
                                   swiglu)

from .kvcache import GLOBAL, WINDOW, place

# How the loader lays out the weights (families/base.py build_tables): wtab[layer, slot] =
# (offset, quant type, rows, cols), quant type -1 where the layer has no such weight; the
# global weights in row n_layer. ftab[layer, slot] = (offset into fbuf, length), length 0 =
# absent. The forward reads them through the named views of `Net` (net.w.q[il], ...).
W_Q, W_K, W_V, W_O, W_GATE, W_UP, W_DOWN, W_QKV = range(8)
N_WSLOTS = 8
W_EMBD, W_OUT = 0, 1        # in row n_layer
(F_ATTN_NORM, F_Q_NORM, F_K_NORM, F_ATTN_POST_NORM, F_FFN_NORM, F_FFN_POST_NORM,
 F_BQ, F_BK, F_BV, F_BQKV) = range(10)
N_FSLOTS = 10
F_OUT_NORM = 0              # in row n_layer

ACT_SILU, ACT_GELU = 0, 1

# The model's sizes and constants (floats hold the f32 value the family computed).
Shape = namedtuple("Shape", "n_layer n_embd n_head n_head_kv head_dim head_dim_v n_ff n_vocab "
                            "n_rot rope_mode act n_swa eps embd_scale q_scale kq_scale "
                            "attn_softcap final_softcap")
# One view per weight slot of a (n_layer, ...) table: wtab's rows, or ctab's copies.
Slots = namedtuple("Slots", "q k v o gate up down qkv")
Norms = namedtuple("Norms", "attn q k attn_post ffn ffn_post bq bk bv bqkv")
# Everything the forward reads and never writes: the file's bytes (wbuf) and the tables into
# them, the weights' copies (cbuf, copies: model.weight_copies), the small f32 tensors,
# the shape, per-layer sliding-window flags and RoPE bases, and the GELU table.
Net = namedtuple("Net", "wbuf w embd out cbuf copies out_copies fbuf norms out_norm shape "
                        "layer_swa layer_freq_base gelu_tab")
# The step's flat f32 buffers (each of n_batch rows), its Work, and the activations' quantized
# forms (whose f32 rows xf also hold the row-group copies' aux rows).
Scratch = namedtuple("Scratch", "x xn q k v att ao gate up hid work")
# The step's small arrays, made once with the model (model._alloc) so that a step allocates
# nothing: the batch's positions, cells in both caches and used-cell counts (n_batch,) int64;
# RoPE's tables (_rope_tables: angles flat, for every distinct base and n_batch tokens; the
# bases (n_layer,) f64 and each layer's table (n_layer,) int64); attention's jobs' rows, one a
# thread (kernels.attention.attention_work).
Work = namedtuple("Work", "positions cells cells_swa n_used angles bases layer_tab attn")
Acts = namedtuple("Acts", "xq xd xa xf")


def _slot_major(tab):
    """tab (n_layer + 1, slots, ...) as one contiguous array (slots, n_layer + 1, ...): a layer's
    row of a slot (net.w.q[il]) and a global row (net.out) are then one array type, so the
    functions taking either (_linear, _fvec) compile once, not once per kind of row. A layer
    view of the (layer, slot) table is strided ('A'), a global row contiguous ('C'): the second
    _linear it made cost ~5 s of a cold start."""
    return np.ascontiguousarray(np.moveaxis(tab, 1, 0))


def net_of(wbuf, wtab, cbuf, ctab, fbuf, ftab, shape, layer_swa, layer_freq_base, gelu_tab):
    """The Net of a loaded model's tables: the weights' bytes are views, the small tables
    slot-major copies (_slot_major)."""
    L = wtab.shape[0] - 1
    wt, ct, ft = _slot_major(wtab), _slot_major(ctab), _slot_major(ftab)
    return Net(wbuf, Slots(*(wt[s, :L] for s in range(N_WSLOTS))), wt[W_EMBD, L], wt[W_OUT, L],
               cbuf, Slots(*(ct[s, :L] for s in range(N_WSLOTS))), ct[W_OUT, L], fbuf,
               Norms(*(ft[s, :L] for s in range(N_FSLOTS))), ft[F_OUT_NORM, L], shape,
               layer_swa, layer_freq_base, gelu_tab)


PER_FORMATS = []    # (function, njit options) of the step's functions that reach `matmul`


def per_formats(**options):
    """Mark a function of the step that reaches `matmul` (a global it does not import: step.py
    gives each set of formats its own): left plain Python here, compiled with `options` per
    set by step.step_for."""
    def mark(f):
        PER_FORMATS.append((f, options))
        return f
    return mark


# ONCE: the step's parts called from one place only (_qkv, _ffn, _attn_out, _output) are
# inlined into `forward` rather than compiled apart: each function that takes the Net costs
# ~5 s of a cold start on its own (typing and lowering that large a tuple of arrays), and
# these four were ~22 of its ~120 s.

# A decode step's one token and a batched step's few (core/llm/batch.py) multiply q, k, v and
# gate, up in one parallel region each (_linear3): a region's dispatch and barrier are a
# visible part of so short a step. Longer batches take one region a matrix, whose tiles then
# run long enough to hide it.
FUSED_MAX_TOKENS = 8

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
def _weight(wbuf, wrow, cbuf, prow, n_tokens):
    """(bytes, row): where _linear multiplies a weight of wtab row `wrow` for n_tokens tokens
    from: the copy (cbuf, its ctab entry) that serves that batch, else the file's (wbuf, wrow)."""
    for c in range(prow.shape[0]):
        if prow[c, 1] >= 0 and prow[c, 4] <= n_tokens <= prow[c, 5]:
            return cbuf, prow[c]
    return wbuf, wrow


@per_formats()
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
    wbuf, wrow = _weight(wbuf, wrow, cbuf, prow, T)
    off, qtype, rows, cols = wrow[0], wrow[1], wrow[2], wrow[3]
    xq, xd, xa, xf = acts
    kind = act_kind(qtype)
    xq2 = _view(xq, T, cols)
    xd2 = _view(xd, T, cols // 32)
    xa2 = _view(xa, T, cols // 16)
    xf2 = _view(xf, T, cols)
    if kind != have:
        quantize_act(kind, x, xq2, xd2, xa2, xf2)
    matmul(qtype, wbuf[off:], rows, cols, xq2, xd2, xa2, xf2, T, out)  # noqa: F821  (step.py's)
    return kind


@per_formats()
def _linear3(wbuf, cbuf, wa, pa, oa, wb, pb, ob, wc, pc, oc, n, x, acts):
    """oa, ob, oc (T, rows of each) = x (T, cols), a few tokens, times n (2 or 3) weights of the
    same cols (wtab rows wa, wb, wc and their ctab entries pa, pb, pc; with n = 2, c is unused),
    as _linear does each: those that multiply in a's format (after copies) in one parallel
    region (fused_matmul), the others one by one, and all of them one by one where the fused
    dispatch leaves them (a file format's weights in more than one token). x is quantised once
    a kind."""
    T = x.shape[0]
    ba, ra = _weight(wbuf, wa, cbuf, pa, T)
    bb, rb = _weight(wbuf, wb, cbuf, pb, T)
    bc, rc = _weight(wbuf, wc, cbuf, pc, T)
    qtype, cols = ra[1], ra[3]
    xq, xd, xa, xf = acts
    xq2, xd2, xa2, xf2 = _view(xq, T, cols), _view(xd, T, cols // 32), _view(xa, T, cols // 16), _view(xf, T, cols)
    kind = act_kind(qtype)
    quantize_act(kind, x, xq2, xd2, xa2, xf2)
    with_b = rb[1] == qtype
    with_c = n == 3 and rc[1] == qtype
    done = fused_matmul(qtype, ba[ra[0]:], ra[2], oa, bb[rb[0]:], rb[2] if with_b else 0, ob,  # noqa: F821  (step.py's)
                        bc[rc[0]:] if with_c else ba[ra[0]:], rc[2] if with_c else 0, oc, cols, xq2, xd2,
                        xa2, xf2, T)
    have = kind
    if not done:
        have = _linear(wbuf, wa, cbuf, pa, x, acts, oa, have)  # noqa: F821  (step.py's)
    if not (done and with_b):
        have = _linear(wbuf, wb, cbuf, pb, x, acts, ob, have)  # noqa: F821  (step.py's)
    if n == 3 and not (done and with_c):
        _linear(wbuf, wc, cbuf, pc, x, acts, oc, have)  # noqa: F821  (step.py's)


@njit(cache=True)
def _split_cols(src, dst, c0):
    """dst (T, n) = src[:, c0:c0 + n], element by element: a slice assignment (dst[t, :] =
    src[t, a:b]) links numba's shape-mismatch error path, whose message formatting (str,
    repr, join of tuples) was ~80 helper compiles and ~10 % of a cold start's numba seconds."""
    for t in range(dst.shape[0]):
        for i in range(dst.shape[1]):
            dst[t, i] = src[t, c0 + i]


@njit(cache=True)
def _add_bias(fbuf, frow, y):
    if frow[1] > 0:
        b = _fvec(fbuf, frow)
        for t in range(y.shape[0]):
            for i in range(y.shape[1]):
                y[t, i] += b[i]


@njit(cache=True, inline="always")
def _add_row(y, x):
    for i in range(x.shape[0]):
        x[i] = y[i] + x[i]


@njit(cache=True, parallel=True)
def _add_residual(y, x):
    """x += y, as ggml_add(y, x) rounds it (T, n_embd); on the thread pool from PAR_ROWS rows
    (as kernels.ops' row ops: a serial gap between two parallel regions idles the others)."""
    T = x.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _add_row(y[t], x[t])
    else:
        for t in prange(T):
            _add_row(y[t], x[t])


@njit(cache=True)
def _scratch_views(scratch, n, shape):
    """The step's arrays for n tokens, as views of the flat scratch buffers: x, xn (n, n_embd),
    q, k, v, att (n, heads * head dim), ao (n, n_embd), gate, up, hid (n, n_ff); and its Work."""
    sh = shape
    return Scratch(_view(scratch.x, n, sh.n_embd), _view(scratch.xn, n, sh.n_embd),
                   _view(scratch.q, n, sh.n_head * sh.head_dim),
                   _view(scratch.k, n, sh.n_head_kv * sh.head_dim),
                   _view(scratch.v, n, sh.n_head_kv * sh.head_dim_v),
                   _view(scratch.att, n, sh.n_head * sh.head_dim_v), _view(scratch.ao, n, sh.n_embd),
                   _view(scratch.gate, n, sh.n_ff), _view(scratch.up, n, sh.n_ff),
                   _view(scratch.hid, n, sh.n_ff), scratch.work)


@njit(cache=True, inline="always")
def _scale_row(y, s):
    for i in range(y.shape[0]):
        y[i] = y[i] * s


@njit(cache=True, parallel=True)
def _scale(y, s):
    """y *= s, row by row (T, n), on the thread pool from PAR_ROWS rows."""
    T = y.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _scale_row(y[t], s)
    else:
        for t in prange(T):
            _scale_row(y[t], s)


@njit(cache=True)
def _rope_tables(positions, n_rot, layer_freq_base, work):
    """RoPE's cos/sin tables at `positions`, one per distinct frequency base (gemma3: local
    and global layers), in the step's Work: (angles (n_bases, T, 2, n_rot // 2), each layer's
    table index)."""
    n_layer = layer_freq_base.shape[0]
    bases, layer_tab = work.bases, work.layer_tab
    n_bases = 0
    for il in range(n_layer):
        j = 0
        while j < n_bases and bases[j] != layer_freq_base[il]:
            j += 1
        if j == n_bases:
            bases[j] = layer_freq_base[il]
            n_bases += 1
        layer_tab[il] = j
    half = n_rot // 2
    T = positions.shape[0]
    angles = work.angles[:n_bases * T * 2 * half].reshape((n_bases, T, 2, half))
    for j in range(n_bases):
        rope_angles(positions, n_rot, bases[j], angles[j])
    return angles, layer_tab


@per_formats(inline="always")   # called once: see ONCE
def _embed(tokens, net, x):
    """x (T, n_embd) = the tokens' embedding rows, scaled where the family scales them
    (dequantize_row: step.py's, over the set's formats only)."""
    e_off, e_qt, e_cols = net.embd[0], net.embd[1], net.embd[3]
    for t in range(tokens.shape[0]):
        dequantize_row(e_qt, net.wbuf[e_off:], tokens[t], e_cols, x[t])  # noqa: F821  (step.py's)
    if net.shape.embd_scale != 1.0:
        _scale(x, np.float32(net.shape.embd_scale))


@per_formats(inline="always")   # called once: see ONCE
def _qkv(il, net, xn, acts, sfused, angles, q, k, v):
    """Layer il's q, k, v of xn (T, n_embd): the projections (one fused QKV weight or three)
    with their biases, QK-norm where the family has it, then RoPE (angles: the layer's table).
    sfused: a scratch buffer for the fused product."""
    sh, w, c, nm, fb = net.shape, net.w, net.copies, net.norms, net.fbuf
    no_acts = np.int64(-1)
    if w.qkv[il, 1] >= 0:
        qkv = _view(sfused, xn.shape[0], sh.n_head * sh.head_dim + sh.n_head_kv * (sh.head_dim + sh.head_dim_v))
        _linear(net.wbuf, w.qkv[il], net.cbuf, c.qkv[il], xn, acts, qkv, no_acts)
        _add_bias(fb, nm.bqkv[il], qkv)
        nq, nk = sh.n_head * sh.head_dim, sh.n_head_kv * sh.head_dim
        _split_cols(qkv, q, np.int64(0))
        _split_cols(qkv, k, nq)
        _split_cols(qkv, v, nq + nk)
    elif xn.shape[0] <= FUSED_MAX_TOKENS:     # q, k, v in one region where they share a format
        _linear3(net.wbuf, net.cbuf, w.q[il], c.q[il], q, w.k[il], c.k[il], k, w.v[il], c.v[il], v, np.int64(3), xn, acts)
        _add_bias(fb, nm.bq[il], q)
        _add_bias(fb, nm.bk[il], k)
        _add_bias(fb, nm.bv[il], v)
    else:
        have = _linear(net.wbuf, w.q[il], net.cbuf, c.q[il], xn, acts, q, no_acts)
        have = _linear(net.wbuf, w.k[il], net.cbuf, c.k[il], xn, acts, k, have)
        _linear(net.wbuf, w.v[il], net.cbuf, c.v[il], xn, acts, v, have)
        _add_bias(fb, nm.bq[il], q)
        _add_bias(fb, nm.bk[il], k)
        _add_bias(fb, nm.bv[il], v)
    eps = sh.eps
    if nm.q[il, 1] > 0:
        rms_norm_heads(q, _fvec(fb, nm.q[il]), eps, sh.n_head, sh.head_dim)
        rms_norm_heads(k, _fvec(fb, nm.k[il]), eps, sh.n_head_kv, sh.head_dim)
    rope_apply(q, angles, sh.n_head, sh.head_dim, sh.n_rot, sh.rope_mode)
    rope_apply(k, angles, sh.n_head_kv, sh.head_dim, sh.n_rot, sh.rope_mode)


@per_formats(inline="always")   # called once: see ONCE
def _ffn(il, net, xn, acts, sfused, gate, up, hid, out):
    """out (T, n_embd) = layer il's feed-forward of xn (T, n_embd): gate and up (two weights, or
    phi3's one [gate; up] through sfused), GeGLU or SwiGLU, down, and the post-norm where the
    family has one."""
    sh, w, c = net.shape, net.w, net.copies
    n_ff = sh.n_ff
    no_acts = np.int64(-1)
    if w.gate[il, 1] >= 0 and xn.shape[0] <= FUSED_MAX_TOKENS:    # gate and up in one region
        _linear3(net.wbuf, net.cbuf, w.gate[il], c.gate[il], gate, w.up[il], c.up[il], up, w.up[il],
                 c.up[il], up, np.int64(2), xn, acts)
    elif w.gate[il, 1] >= 0:
        have = _linear(net.wbuf, w.gate[il], net.cbuf, c.gate[il], xn, acts, gate, no_acts)
        _linear(net.wbuf, w.up[il], net.cbuf, c.up[il], xn, acts, up, have)
    else:
        gu = _view(sfused, xn.shape[0], 2 * n_ff)     # phi3: ffn_up holds [gate; up]
        _linear(net.wbuf, w.up[il], net.cbuf, c.up[il], xn, acts, gu, no_acts)
        _split_cols(gu, gate, np.int64(0))
        _split_cols(gu, up, n_ff)
    have = no_acts
    T = xn.shape[0]
    down_kind = act_kind(_weight(net.wbuf, w.down[il], net.cbuf, c.down[il], T)[1][1])
    if sh.act == ACT_GELU and down_kind == ACT_Q8_0 and GATHER16 and T >= PAR_ROWS:
        # a batch's GeGLU goes straight to the down projection's Q8_0 activations (hid unwritten)
        geglu_q8_0(gate, up, net.gelu_tab, _view(acts.xq, T, n_ff), _view(acts.xd, T, n_ff // 32))
        have = down_kind
    elif sh.act == ACT_GELU:
        geglu(gate, up, net.gelu_tab, hid)
    else:
        swiglu(gate, up, hid)
    _linear(net.wbuf, w.down[il], net.cbuf, c.down[il], hid, acts, out, have)
    if net.norms.ffn_post[il, 1] > 0:
        rms_norm(out, _fvec(net.fbuf, net.norms.ffn_post[il]), sh.eps, out)


@per_formats(inline="always")   # called once: see ONCE
def _attn_out(il, net, att, acts, ao):
    """ao (T, n_embd) = layer il's attention output projection of att, post-normed where the
    family has it."""
    _linear(net.wbuf, net.w.o[il], net.cbuf, net.copies.o[il], att, acts, ao, np.int64(-1))
    if net.norms.attn_post[il, 1] > 0:
        rms_norm(ao, _fvec(net.fbuf, net.norms.attn_post[il]), net.shape.eps, ao)


@per_formats(inline="always")   # called once: see ONCE
def _output(x, net, acts, xo, out):
    """out (T, n_vocab) = the logits of x (T, n_embd): output norm into xo, the output matrix,
    and the final soft-cap where the family has one (ggml_scale by 1/cap, tanh, scale by cap)."""
    rms_norm(x, _fvec(net.fbuf, net.out_norm), net.shape.eps, xo)
    _linear(net.wbuf, net.out, net.cbuf, net.out_copies, xo, acts, out, np.int64(-1))
    if net.shape.final_softcap != 0.0:
        c = np.float32(net.shape.final_softcap)
        inv = np.float32(1.0) / c
        for t in range(out.shape[0]):
            for i in range(out.shape[1]):
                out[t, i] = np.float32(np.tanh(out[t, i] * inv)) * c


@njit(cache=True)
def _layer_cache(kv, il, layer_swa, cells, cells_swa):
    """Layer il's keys, values, cell positions and the batch's cells: the window ring for a
    sliding-window layer (where the model has one), else the n_ctx cache."""
    ig = 0
    for j in range(il):
        ig += 0 if (layer_swa[j] and kv.k_swa.shape[0] > 0) else 1
    if layer_swa[il] and kv.k_swa.shape[0] > 0:
        iw = il - ig
        return kv.k_swa[iw], kv.v_swa[iw], kv.pos_swa, cells_swa
    return kv.k[ig], kv.v[ig], kv.pos, cells


@njit(cache=True)
def place_batch(kv, positions, n_swa, cells, cells_swa):
    """cells, cells_swa (T,) = the cells of both caches the batch at `positions` goes to
    (llama.cpp's find_slot + apply_ubatch on each), marked taken."""
    place(kv.pos, kv.heads, GLOBAL, positions, 0, cells)
    if kv.k_swa.shape[0] > 0:
        place(kv.pos_swa, kv.heads, WINDOW, positions, n_swa, cells_swa)


@njit(cache=True)
def _trace(trace, name, layer, y):
    """Record y (rows, n) as the last `rows` tokens of the trace (fewer in the last layer).
    Callers pass `name` as np.int64(k), not a literal k: numba compiles a function once per
    literal argument value, and the ten literal names were ten compiles of a cold start."""
    if trace.shape[0] > 0:
        rows, n = y.shape
        t0 = trace.shape[2] - rows
        for t in range(rows):
            for i in range(n):
                trace[name, layer, t0 + t, i] = y[t, i]


@per_formats()
def forward(tokens, embd, pos0, causal, net, kv, scratch, acts, n_out, logits, trace, n_threads, rope):
    """Run T tokens (or T rows of embeddings) at positions pos0.. through the model; write the
    logits of the last n_out.

    tokens (T,) int64, or empty when embd (T, n_embd) f32 holds the inputs instead (an image's
    embeddings: not scaled by the family's embedding scale, as llama.cpp feeds them); causal:
    False lets the batch's tokens see each other both ways (an image, as mtmd decodes it);
    net: the model (Net); kv: the sequence's KV (kvcache.KV), whose cells this batch takes;
    scratch (Scratch), acts (Acts): n_batch rows each; logits (>= n_out, n_vocab); trace:
    (len(TRACE_NAMES), n_layer, T, width) or empty; n_threads: the thread count, which shapes
    llama.cpp's split-KV decode attention; rope: (1, T, 2, n_rot // 2) cos/sin tables that
    replace the ones of positions pos0.. (M-RoPE: an image's rows turn by their row and column,
    and the text after it at positions shifted from its cells), or (1, 0, 2, n_rot // 2).
    """
    sh = net.shape
    T = max(tokens.shape[0], embd.shape[0])
    x, xn, q, k, v, att, ao, gate, up, hid, work = _scratch_views(scratch, T, sh)
    eps = sh.eps
    positions, cells, cells_swa = work.positions[:T], work.cells[:T], work.cells_swa[:T]
    for t in range(T):
        positions[t] = pos0 + t
    place_batch(kv, positions, sh.n_swa, cells, cells_swa)
    if rope.shape[1] > 0:
        angles, layer_tab = rope, work.layer_tab
        for il in range(sh.n_layer):
            layer_tab[il] = 0
    else:
        angles, layer_tab = _rope_tables(positions, sh.n_rot, net.layer_freq_base, work)
    if embd.shape[0] > 0:
        _split_cols(embd, x, np.int64(0))
    else:
        _embed(tokens, net, x)

    for il in range(sh.n_layer):
        rms_norm(x, _fvec(net.fbuf, net.norms.attn[il]), eps, xn)
        _trace(trace, np.int64(0), il, xn)
        _qkv(il, net, xn, acts, scratch.gate, angles[layer_tab[il]], q, k, v)
        _trace(trace, np.int64(1), il, q)          # llama.cpp's "Qcur": after RoPE, before the query scale
        if sh.q_scale != 1.0:
            _scale(q, np.float32(sh.q_scale))
        _trace(trace, np.int64(2), il, k)
        _trace(trace, np.int64(3), il, v)
        kc, vc, kpos, cl = _layer_cache(kv, il, net.layer_swa, cells, cells_swa)
        store_kv(k, kc, cl)
        store_kv(v, vc, cl)
        n_swa = sh.n_swa if net.layer_swa[il] else 0
        attention(q, positions, kc, vc, kpos, sh.n_head, sh.n_head_kv, sh.head_dim, sh.head_dim_v,
                  sh.kq_scale, sh.attn_softcap, n_swa, causal, att, n_threads, work.attn)
        _trace(trace, np.int64(4), il, att)
        _attn_out(il, net, att, acts, ao)
        _trace(trace, np.int64(5), il, ao)
        if il == sh.n_layer - 1 and n_out < T:
            # llama.cpp keeps only the output rows from here on (ggml_get_rows of
            # inp_out_ids): the last FFN then takes the matmul path of n_out tokens
            x = x[T - n_out:]
            ao = ao[T - n_out:]
            xn = _view(scratch.xn, n_out, sh.n_embd)
            gate = _view(scratch.gate, n_out, sh.n_ff)
            up = _view(scratch.up, n_out, sh.n_ff)
            hid = _view(scratch.hid, n_out, sh.n_ff)
            T = n_out
        _add_residual(ao, x)
        _trace(trace, np.int64(6), il, x)

        rms_norm(x, _fvec(net.fbuf, net.norms.ffn[il]), eps, xn)
        _trace(trace, np.int64(7), il, xn)
        _ffn(il, net, xn, acts, scratch.hid, gate, up, hid, ao)
        _trace(trace, np.int64(8), il, ao)
        _add_residual(ao, x)
        _trace(trace, np.int64(9), il, x)

    _output(x[T - n_out:], net, acts, _view(scratch.xn, n_out, sh.n_embd), logits[:n_out])

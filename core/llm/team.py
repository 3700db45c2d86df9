"""A one-token decode step as ONE parallel region: a team of n_threads workers runs every stage of
the step, each its share of each matrix's row groups (the copies' rows functions, through
matmul.rows_for), thread 0 the row ops between them (norms, biases, RoPE, the KV store, GeGLU or
SwiGLU, residuals, quantising the activations and the tiles' aux rows), the attention heads split
over the team, a spin-then-yield barrier (kernels/barrier.py) after each stage.

forward's one-token step is ~10 parallel regions a layer, each a wake and a join of the pool,
and a thread the OS set aside stalls every one of them; here a token is one region and ~10
barriers a layer. Every serial op is the one forward calls, with the same arguments, and every
row group goes through the same tile, so the logits are forward's bit for bit
(tests/core/llm/test_team.py).

A model takes it (plan) where its step is a plain decoder layer stack (no fused QKV or gate-up
weight: phi3 keeps forward) and every matrix a token multiplies is served by a copy with a rows
function (gemma3 and Qwen2.5 Q4_K_M, gemma3 Q8_0: Q8_0_X16, Q5_0_P16, Q4_K_P16, Q6_K_P16); the
step then runs for one token, no trace, no embeddings, no M-RoPE shift (Model._forward), where
DASLLAMA_TEAM=1 (enabled: off by default until a quiet A/B shows it faster). numba
will not take a namedtuple of arrays into a prange body, so the step's tables are passed flat,
built once per net (Team).
"""
import os

import numba
import numpy as np
from numba import njit, prange

from dasllama.kernels import rowgroups
from dasllama.kernels.actq import act_kind
from dasllama.kernels.attention import FA_SPLIT_KV, _one_chunk_job, _split_kv_head, cells_used, n_kv_cells, store_kv
from dasllama.kernels.barrier import arrive_and_wait, epoch_of, flags_for
from dasllama.kernels.matmul import quantize_act
from dasllama.kernels.ops import geglu, rms_norm, rms_norm_heads, rope_angles, rope_apply, swiglu
from dasllama.kernels.quants import row_bytes
from dasllama.kernels.rowgroup_template import aux_rows

from . import forward as fw
from .forward import (ACT_GELU, F_ATTN_NORM, F_ATTN_POST_NORM, F_BK, F_BQ, F_BV, F_FFN_NORM, F_FFN_POST_NORM,
                      F_K_NORM, F_OUT_NORM, F_Q_NORM, _add_bias, _add_residual, _fvec, _scale, _view, per_formats)
from .kvcache import GLOBAL, WINDOW, place

# a layer's stages of matrices, in its stage table (the output's is the last, n_layer * 4)
ST_QKV, ST_O, ST_GATE_UP, ST_DOWN = range(4)
N_STAGES = 4
# mats columns: (layout, weight address, rows, cols, out address, out row stride, act slot, aux kind,
# rows a group)
M_LAYOUT, M_W, M_ROWS, M_COLS, M_OUT, M_OUT_STRIDE, M_SLOT, M_AUX, M_WIDTH = range(9)
N_SLOTS = 2         # activation kinds a stage may want (Q8_0's and Q8_K's: a Q4_K_M layer's mix)
N_AUX = 5           # rowgroup_template's aux kinds
# ii: the step's integer sizes; ff: its floats (the Shape's, as forward reads them)
(I_LAYER, I_EMBD, I_HEAD, I_HEAD_KV, I_HEAD_DIM, I_HEAD_DIM_V, I_FF, I_ROT, I_ROPE_MODE, I_ACT,
 I_SWA) = range(11)
F_EPS, F_Q_SCALE, F_KQ_SCALE, F_ATTN_SOFTCAP, F_FINAL_SOFTCAP, F_EMBD_SCALE = range(6)


@njit(cache=True)
def _inputs(xin, need, kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf):
    """A stage's inputs from xin (1, cols): quantised into each activation slot its matrices
    read (bit s of need: slot s, kind kinds[s]), as _linear quantises, and each aux kind's rows
    (bit 2 + k) made once into aux_buf[k]."""
    cols = xin.shape[1]
    for slot in range(N_SLOTS):
        if need & (1 << slot):
            xq, xd, xa, xf = (xq0, xd0, xa0, xf0) if slot == 0 else (xq1, xd1, xa1, xf1)
            quantize_act(kinds[slot], xin, _view(xq, 1, cols), _view(xd, 1, cols // 32), _view(xa, 1, cols // 16),
                         _view(xf, 1, cols))
    for kind in range(N_AUX):
        if need & (4 << kind):
            xq, xa = (xq0, xa0) if aux_slot[kind] == 0 else (xq1, xa1)
            aux_rows(kind, _view(xq, 1, cols), _view(xa, 1, cols // 16), 1, cols, aux_buf[kind])


@per_formats()
def _stage(t, n, flags_at, e, s, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf):
    """Stage s of thread t of n, from barrier epoch e: wait for its inputs (thread 0's ops
    before it), multiply thread t's share, wait for every thread's; returns the epoch reached."""
    arrive_and_wait(flags_at, t, n, e + 1)
    _share(t, s, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
    arrive_and_wait(flags_at, t, n, e + 2)
    return e + 2


@per_formats()
def _share(t, s, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf):
    """Thread t's row groups of stage s's matrices (split[i, t]: [g0, g1) of matrix i)."""
    for i in range(stage_first[s], stage_first[s + 1]):
        g0, g1 = split[i, t, 0], split[i, t, 1]
        if g1 > g0:
            cols = mats[i, M_COLS]
            xq, xd = (xq0, xd0) if mats[i, M_SLOT] == 0 else (xq1, xd1)
            matmul_rows(mats[i, M_LAYOUT], mats[i, M_W], mats[i, M_ROWS], mats[i, M_OUT],  # noqa: F821  (step.py's)
                        mats[i, M_OUT_STRIDE], cols, np.int64(xq.ctypes.data), cols,
                        np.int64(aux_buf[mats[i, M_AUX]].ctypes.data), np.int64(aux_buf.shape[1]),
                        np.int64(xd.ctypes.data), 4 * (cols // 32), np.int64(1), g0, g1)


@per_formats()
def _team_body(t, n, flags_at, ii, ff, fbuf, ft, kc_all, vc_all, kc_swa, vc_swa, kpos, kpos_swa, layer_kv, positions, cells,
               cells_swa, angles, layer_tab, gelu_tab, x, xn, q, k, v, att, ao, gate, up, hid,
               xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, mats, stage_first, split, needs, kinds,
               aux_slot, aux_buf, logits, work):
    """Thread t of n: the whole step's stages, a barrier after each (forward's order of ops).
    ft: the small tensors' table, slot-major (forward._slot_major: ft[slot, layer] as
    net.norms.<slot>[layer] reads it, the output norm at ft[F_OUT_NORM, n_layer])."""
    L, n_head, n_head_kv = ii[I_LAYER], ii[I_HEAD], ii[I_HEAD_KV]
    head_dim, head_dim_v, n_rot, rope_mode = ii[I_HEAD_DIM], ii[I_HEAD_DIM_V], ii[I_ROT], ii[I_ROPE_MODE]
    eps, q_scale, attn_softcap = ff[F_EPS], ff[F_Q_SCALE], ff[F_ATTN_SOFTCAP]
    scale = ff[F_KQ_SCALE]
    if attn_softcap != 0.0:
        scale = scale / attn_softcap        # as attention_one_chunk and attention_split_kv take it
    group = n_head // n_head_kv
    h0, h1 = t * n_head // n, (t + 1) * n_head // n
    e = epoch_of(flags_at, t)
    for il in range(L):
        s = N_STAGES * il
        if t == 0:
            rms_norm(x, _fvec(fbuf, ft[F_ATTN_NORM, il]), eps, xn)
            _inputs(xn, needs[s + ST_QKV], kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf)
        e = _stage(t, n, flags_at, e, s + ST_QKV, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
        if layer_kv[il, 0] == 1:
            kc, vc, kp, cl = kc_swa[layer_kv[il, 1]], vc_swa[layer_kv[il, 1]], kpos_swa, cells_swa
        else:
            kc, vc, kp, cl = kc_all[layer_kv[il, 1]], vc_all[layer_kv[il, 1]], kpos, cells
        if t == 0:
            _add_bias(fbuf, ft[F_BQ, il], q)
            _add_bias(fbuf, ft[F_BK, il], k)
            _add_bias(fbuf, ft[F_BV, il], v)
            if ft[F_Q_NORM, il, 1] > 0:
                rms_norm_heads(q, _fvec(fbuf, ft[F_Q_NORM, il]), eps, n_head, head_dim)
                rms_norm_heads(k, _fvec(fbuf, ft[F_K_NORM, il]), eps, n_head_kv, head_dim)
            an = angles[layer_tab[il]]
            rope_apply(q, an, n_head, head_dim, n_rot, rope_mode)
            rope_apply(k, an, n_head_kv, head_dim, n_rot, rope_mode)
            if q_scale != 1.0:
                _scale(q, np.float32(q_scale))
            store_kv(k, kc, cl)
            store_kv(v, vc, cl)
        e += 1
        arrive_and_wait(flags_at, t, n, e)
        # attention's jobs (a head each), as `attention` runs them for one query
        n_used = cells_used(kp)
        nek1 = n_kv_cells(kc.shape[0], n_used)
        if nek1 >= FA_SPLIT_KV:
            chunk = (nek1 + n - 1) // n
            for h in range(h0, h1):
                _split_kv_head(np.int64(h), q, positions[0], kc, vc, kp, n_used, group, head_dim, head_dim_v,
                               scale, attn_softcap, layer_kv[il, 2], True, n, chunk, att, work[t])
        else:
            for h in range(h0, h1):
                _one_chunk_job(np.int64(0), np.int64(h), q, positions, kc, vc, kp, n_used, group, head_dim,
                               head_dim_v, scale, attn_softcap, layer_kv[il, 2], True, att, work[t])
        e += 1
        arrive_and_wait(flags_at, t, n, e)
        if t == 0:
            _inputs(att, needs[s + ST_O], kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf)
        e = _stage(t, n, flags_at, e, s + ST_O, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
        if t == 0:
            if ft[F_ATTN_POST_NORM, il, 1] > 0:
                rms_norm(ao, _fvec(fbuf, ft[F_ATTN_POST_NORM, il]), eps, ao)
            _add_residual(ao, x)
            rms_norm(x, _fvec(fbuf, ft[F_FFN_NORM, il]), eps, xn)
            _inputs(xn, needs[s + ST_GATE_UP], kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf)
        e = _stage(t, n, flags_at, e, s + ST_GATE_UP, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
        if t == 0:
            if ii[I_ACT] == ACT_GELU:
                geglu(gate, up, gelu_tab, hid)
            else:
                swiglu(gate, up, hid)
            _inputs(hid, needs[s + ST_DOWN], kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf)
        e = _stage(t, n, flags_at, e, s + ST_DOWN, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
        if t == 0:
            if ft[F_FFN_POST_NORM, il, 1] > 0:
                rms_norm(ao, _fvec(fbuf, ft[F_FFN_POST_NORM, il]), eps, ao)
            _add_residual(ao, x)
    s = N_STAGES * L
    if t == 0:
        rms_norm(x[np.int64(0):], _fvec(fbuf, ft[F_OUT_NORM, L]), eps, xn)
        _inputs(xn, needs[s], kinds, aux_slot, xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, aux_buf)
    e += 1
    arrive_and_wait(flags_at, t, n, e)
    _share(t, s, mats, stage_first, split, xq0, xd0, xq1, xd1, aux_buf)
    cap = ff[F_FINAL_SOFTCAP]
    if cap != 0.0:      # each thread its own rows, as _output rounds them
        c = np.float32(cap)
        inv = np.float32(1.0) / c
        i = stage_first[s]
        for r in range(split[i, t, 0] * mats[i, M_WIDTH], split[i, t, 1] * mats[i, M_WIDTH]):
            logits[0, r] = np.float32(np.tanh(logits[0, r] * inv)) * c


@per_formats(parallel=True)
def team_step(token, pos, n, flags, ii, ff, wbuf, embd, bases, fbuf, ft, kc_all, vc_all, kc_swa, vc_swa, kpos, kpos_swa, heads, layer_kv,
              positions, cells, cells_swa, angles, layer_tab, gelu_tab, x, xn, q, k, v, att, ao, gate, up, hid,
              xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, mats, stage_first, split, needs, kinds, aux_slot, aux_buf,
              logits, work):
    """One token at position pos through the model on a team of n threads (numba's thread
    count must be n: each takes one iteration of the prange and waits for the others); the
    logits into logits[0]. Places the KV cells, RoPE's tables and the embedding as forward,
    into the preallocated arrays (nothing is allocated a token)."""
    positions[0] = pos
    place(kpos, heads, GLOBAL, positions, 0, cells)
    if kc_swa.shape[0] > 0:
        place(kpos_swa, heads, WINDOW, positions, ii[I_SWA], cells_swa)
    for j in range(bases.shape[0]):
        rope_angles(positions, ii[I_ROT], bases[j], angles[j])
    dequantize_row(embd[1], wbuf[embd[0]:], token, embd[3], x[0])  # noqa: F821  (step.py's)
    if ff[F_EMBD_SCALE] != 1.0:
        _scale(x, np.float32(ff[F_EMBD_SCALE]))
    flags_at = np.int64(flags.ctypes.data)
    for t in prange(n):     # t as int64: the prange's own index type would compile the body twice
        _team_body(np.int64(t), n, flags_at, ii, ff, fbuf, ft, kc_all, vc_all, kc_swa, vc_swa, kpos, kpos_swa, layer_kv, positions, cells,
                   cells_swa, angles, layer_tab, gelu_tab, x, xn, q, k, v, att, ao, gate, up, hid,
                   xq0, xd0, xa0, xf0, xq1, xd1, xa1, xf1, mats, stage_first, split, needs, kinds,
                   aux_slot, aux_buf, logits, work)


def _stage_of(slot):
    return {fw.W_Q: ST_QKV, fw.W_K: ST_QKV, fw.W_V: ST_QKV, fw.W_O: ST_O, fw.W_GATE: ST_GATE_UP,
            fw.W_UP: ST_GATE_UP, fw.W_DOWN: ST_DOWN}.get(slot)


def _split(pieces, n_threads):
    """[(g0, g1) of each thread] for each matrix of a stage, pieces [(groups, bytes a group)]:
    the stage's bytes cut in n_threads even shares, a group to the share its middle falls in
    (each thread a run of groups of each matrix)."""
    total = sum(g * b for g, b in pieces)
    out, start = [], 0
    for groups, nbytes in pieces:
        middle = start + (np.arange(groups) + 0.5) * nbytes
        owner = np.minimum((middle * n_threads // max(total, 1)).astype(np.int64), n_threads - 1)
        out.append([(int(np.searchsorted(owner, t, "left")), int(np.searchsorted(owner, t, "right")))
                    for t in range(n_threads)])
        start += groups * nbytes
    return out


class Team:
    """A model's one-region step (team_step) and the flat tables it reads, for one net; `plan`
    says whether the model can take it."""

    @staticmethod
    def plan(model):
        """A Team for the model's current net, or None where some matrix a token multiplies has
        no rows function (a file format's, a plain Q8_0 copy's), the family fuses QKV or
        gate-up, or the model runs on one thread."""
        if model.n_threads < 2:
            return None
        net, wtab, made = model.net, model.tables.wtab, model._made
        L = wtab.shape[0] - 1
        if (wtab[:L, fw.W_QKV, 1] >= 0).any() or (wtab[:L, fw.W_GATE, 1] < 0).any():
            return None
        rows_kernels = rowgroups.ROWS_KERNELS
        sc = model.scratch
        outs = {fw.W_Q: sc.q, fw.W_K: sc.k, fw.W_V: sc.v, fw.W_O: sc.ao, fw.W_GATE: sc.gate, fw.W_UP: sc.up,
                fw.W_DOWN: sc.ao}
        stages = [[] for _ in range(N_STAGES * L + 1)]
        for layer in range(L + 1):
            for slot in ((fw.W_OUT,) if layer == L else (fw.W_Q, fw.W_K, fw.W_V, fw.W_O, fw.W_GATE, fw.W_UP,
                                                         fw.W_DOWN)):
                prow = made[layer, slot]
                c = next((c for c in range(prow.shape[0]) if prow[c, 1] >= 0 and prow[c, 4] <= 1 <= prow[c, 5]), -1)
                if c < 0 or int(prow[c, 1]) not in rows_kernels:
                    return None
                off, layout, rows, cols = (int(v) for v in prow[c, :4])
                out = model.logits if layer == L else outs[slot]
                stage = N_STAGES * L if layer == L else N_STAGES * layer + _stage_of(slot)
                stages[stage].append((layout, off, rows, cols, out))
        return Team(model, stages)

    def __init__(self, model, stages):
        self.net = model.net
        n = self.n_threads = model.n_threads
        hp, sh, net = model.hparams, model.tables.shape, model.net
        kinds, mats, first, split, needs = [], [], [0], [], []
        aux_slot = np.zeros(N_AUX, np.int64)
        cbuf_at = net.cbuf.ctypes.data
        for stage in stages:
            need = 0
            pieces = []
            for layout, off, rows, cols, out in stage:
                rows_fn, aux, width = rowgroups.ROWS_KERNELS[layout]
                kind = int(act_kind(layout))
                if kind not in kinds:
                    kinds.append(kind)
                slot = kinds.index(kind)
                aux_slot[aux] = slot
                need |= (1 << slot) | (4 << aux)
                mats.append((layout, cbuf_at + off, rows, cols, out.ctypes.data, 4 * rows, slot, aux, width))
                pieces.append((rows // width, width * row_bytes(layout, cols)))
            split += _split(pieces, n)
            first.append(len(mats))
            needs.append(need)
        if len(kinds) > N_SLOTS:
            raise ValueError("a team step takes at most two activation kinds")
        self.kinds = np.array(kinds + [kinds[0]] * (N_SLOTS - len(kinds)), np.int64)
        self.mats, self.stage_first = np.array(mats, np.int64), np.array(first, np.int64)
        self.split, self.needs, self.aux_slot = np.array(split, np.int64), np.array(needs, np.int64), aux_slot
        cmax = max(hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim_v)
        self.aux_buf = np.zeros((N_AUX, cmax), np.uint8)
        self.acts1 = (np.zeros(cmax, np.int8), np.zeros(cmax // 32 + 1, np.float32),
                      np.zeros(cmax // 16 + 1, np.float32), np.zeros(cmax, np.float32))
        self.flags = flags_for(n)
        self.ii = np.array([sh.n_layer, sh.n_embd, sh.n_head, sh.n_head_kv, sh.head_dim, sh.head_dim_v, sh.n_ff,
                            sh.n_rot, sh.rope_mode, sh.act, sh.n_swa], np.int64)
        self.ff = np.array([sh.eps, sh.q_scale, sh.kq_scale, sh.attn_softcap, sh.final_softcap, sh.embd_scale],
                           np.float64)
        # RoPE's tables: one per distinct frequency base, as forward._rope_tables finds them
        bases, layer_tab = [], []
        for base in net.layer_freq_base:
            if base not in bases:
                bases.append(base)
            layer_tab.append(bases.index(base))
        self.bases, self.layer_tab = np.array(bases, np.float64), np.array(layer_tab, np.int64)
        self.angles = np.zeros((len(bases), 1, 2, sh.n_rot // 2), np.float32)
        self.positions, self.cells, self.cells_swa = (np.zeros(1, np.int64) for _ in range(3))
        v = fw._scratch_views(model.scratch, 1, sh)
        self.views = (v.x, v.xn, v.q, v.k, v.v, v.att, v.ao, v.gate, v.up, v.hid)
        self.acts, self.logits = model.acts, model.logits
        self.work = v.work.attn     # attention's scratch, a row a thread: the team's thread t takes row t
        self.ft = fw._slot_major(model.tables.ftab)
        self.layer_kv = self._layer_kv(model.kv.arrays)

    def _layer_kv(self, kv):
        """(n_layer, 3): each layer's cache (1: the window ring), its index there, and its n_swa
        (forward._layer_cache's choice; every cache of a model has the same layout)."""
        net, sh = self.net, self.net.shape
        out = np.zeros((sh.n_layer, 3), np.int64)
        ig = iw = 0
        for il in range(sh.n_layer):
            ring = bool(net.layer_swa[il]) and kv.k_swa.shape[0] > 0
            out[il] = (1 if ring else 0, iw if ring else ig, sh.n_swa if net.layer_swa[il] else 0)
            iw, ig = iw + ring, ig + (not ring)
        return out

    def run(self, team_step, token, pos, kv):
        """team_step (the model's Step's) for `token` at `pos` on the cache kv (a KV of
        arrays); numba's thread count must be the team's."""
        net = self.net
        team_step(np.int64(token), np.int64(pos), np.int64(self.n_threads), self.flags, self.ii, self.ff, net.wbuf,
                  net.embd, self.bases, net.fbuf, self.ft, kv.k, kv.v, kv.k_swa, kv.v_swa, kv.pos, kv.pos_swa, kv.heads,
                  self.layer_kv, self.positions, self.cells, self.cells_swa, self.angles, self.layer_tab,
                  net.gelu_tab, *self.views, *self.acts, *self.acts1, self.mats, self.stage_first, self.split,
                  self.needs, self.kinds, self.aux_slot, self.aux_buf, self.logits, self.work)


def enabled():
    """Whether a Model runs its Team: DASLLAMA_TEAM=1. Off by default: on the loaded host it was
    built on it was not shown faster than forward, and its compile adds ~28 s of CPU to a first
    run (docs/BENCHMARKS.md, seventh session, team7); a quiet A/B decides."""
    return os.environ.get("DASLLAMA_TEAM") == "1"


def threading_allows():
    """Whether numba's threading layer runs each of a prange's n iterations on a thread of its
    own (a team's threads wait for each other: libgomp's and tbb's pools do; the workqueue
    layer is not checked), known once some parallel region ran."""
    try:
        return numba.threading_layer() in ("omp", "tbb")
    except ValueError:
        return False

"""Attention over an f16 KV cache as ggml-cpu's flash attention computes it: the one-chunk path
(decode and small batches, an f16 accumulator), the split-KV path (one query over many keys)
and the tiled path (batches of FA_TILE_Q queries and more, f32 throughout), so greedy tokens
match llama.cpp bit for bit. The plain numpy reference is ops_ref.attention_ref."""
import math

import numba
import numpy as np
from numba import njit, prange

from .actq import PAR_ROWS, round_f16
from .cpu import llvm_has, probe
from .dots import hsum8
from .fa_tiles import (MAD, MAD_HALVES, SCALE, SCALE_HALVES, f16_dot_lanes, f16_round_lanes, outer_tile,
                       softmax_row)
from .ir import f16_to_f32, f32_bits, f32_to_f16, fma_f32, keep_alive
from .ops import EXP_LANES, row_max, v_expf

# ggml's tiled flash attention (f32 throughout) serves batches of at least this many queries;
# smaller batches and decode take the one-chunk path with its f16 accumulator.
FA_TILE_Q = 64
# f32 lanes of ggml's F16 vectors on this CPU: 16 with AVX-512 (GGML_F32Cx16), 8 with AVX2
# (GGML_F32Cx8). Only K.Q's reduction depends on it; the element-wise f16 ops do not.
F16_LANES = 16 if "avx512f" in probe().features else 8
# ggml's f16 vector ops in half precision: built for a CPU with AVX512-FP16 (Sapphire Rapids
# and later), ggml_vec_mad_f16 and ggml_vec_scale_f16 (the one-chunk path's V accumulator) run
# their first n & ~127 elements as native half lanes (the factor rounded to half, one rounding
# per fma or mul) and only the rest in float32; elsewhere all of it in float32 lanes.
F16_HALF_STEP = 128 if llvm_has("avx512fp16") else 0


@njit(cache=True, boundscheck=False, inline="always")
def _store_row(src, cache, cell):
    for i in range(src.shape[0]):
        cache[cell, i] = f32_to_f16(src[i])


@njit(cache=True, boundscheck=False, parallel=True)
def store_kv(src, cache, cells):
    """Round rows of src (T, n) to f16 into the cache's cells (T,) (cache: (n_cells, n) uint16),
    on the thread pool from PAR_ROWS rows (the cells are distinct)."""
    T = src.shape[0]
    if T < PAR_ROWS:
        for t in range(T):
            _store_row(src[t], cache, cells[t])
    else:
        for t in prange(T):
            _store_row(src[t], cache, cells[t])


@njit(cache=True, boundscheck=False)
def store_kv_rows(k, v, kblock, vblock, layer, seqs, cells):
    """A batched decode step's keys and values (B, n): row t rounded to f16 into cell cells[t]
    of sequence seqs[t]'s cache of `layer` (kblock, vblock: (n_seq, n_layers, n_cells, n)),
    on this thread (a few rows: no region, no views a row)."""
    for t in range(k.shape[0]):
        _store_row(k[t], kblock[seqs[t], layer], cells[t])
        _store_row(v[t], vblock[seqs[t], layer], cells[t])


@njit(cache=True, inline="always")
def sees(kp, p, n_swa, causal):
    """Whether a query at position p attends to a cell holding position kp (-1: empty), as
    llama.cpp's KV mask has it: same sequence, not in the future when causal, and inside the
    sliding window (a key at distance n_swa or more is masked) when n_swa > 0."""
    return kp >= 0 and (not causal or kp <= p) and (n_swa <= 0 or p - kp < n_swa)


@njit(cache=True, inline="always")
def cells_used(kpos):
    """llama_kv_cells::used_max_p1: one past the last occupied cell."""
    n = kpos.shape[0]
    while n > 0 and kpos[n - 1] < 0:
        n -= 1
    return n


_f16_dot = f16_dot_lanes(F16_LANES)
_f16_mad = f16_round_lanes(F16_LANES, MAD)
_f16_scale = f16_round_lanes(F16_LANES, SCALE)
_f16_mad_halves = f16_round_lanes(2 * F16_LANES, MAD_HALVES)
_f16_scale_halves = f16_round_lanes(2 * F16_LANES, SCALE_HALVES)


@njit(cache=True, boundscheck=False, inline="always")
def _kq(q16, kcache, j, koff, head_dim, lanes):
    """ggml_vec_dot_f16 as compiled for this CPU (F16C lanes in f32): 4 accumulators of
    F16_LANES lanes, fma over steps of 4*F16_LANES, folded 0+2, 1+3, then 0+1 (the IR of
    fa_tiles.f16_dot_lanes, into lanes: F16_LANES f32), then across lanes (_mm512_reduce_add_ps;
    on AVX2 the 128-bit halves added, then two hadds); the tail summed in double."""
    L = F16_LANES
    n_main = head_dim - head_dim % (4 * L)
    _f16_dot(q16.ctypes.data, kcache.ctypes.data + j * kcache.strides[0] + 2 * koff,
             n_main // (4 * L), lanes.ctypes.data)
    a = lanes
    if L == 16:
        total = np.float64(_reduce16(a))
    else:
        total = np.float64(((a[0] + a[4]) + (a[1] + a[5])) + ((a[2] + a[6]) + (a[3] + a[7])))
    for d in range(n_main, head_dim):
        total += np.float64(f16_to_f32(kcache[j, koff + d]) * q16[d])
    return np.float32(total)


@njit(cache=True, boundscheck=False, inline="always")
def _reduce16(a):
    """_mm512_reduce_add_ps as gcc expands it: halves 8, 4, 2, 1."""
    s0 = (a[0] + a[8]) + (a[4] + a[12])
    s1 = (a[1] + a[9]) + (a[5] + a[13])
    s2 = (a[2] + a[10]) + (a[6] + a[14])
    s3 = (a[3] + a[11]) + (a[7] + a[15])
    return (s0 + s2) + (s1 + s3)


@njit(cache=True, boundscheck=False)
def attention(q, qpos, kcache, vcache, kpos, n_head, n_head_kv, head_dim, head_dim_v,
              scale, softcap, n_swa, causal, out, n_threads, work):
    """Flash attention of T queries at positions qpos (T,) over an f16 cache of cells.

    q: (T, n_head*head_dim) f32; kcache: (n_cells, n_head_kv*head_dim) u16;
    vcache: (n_cells, n_head_kv*head_dim_v) u16; kpos (n_cells,): the position each cell holds
    (-1: empty), in llama.cpp's cell order, which is the order keys are summed in;
    out: (T, n_head*head_dim_v). A query sees the cells `sees` admits: causal or not (an image's
    tokens see each other), n_swa > 0 a sliding window. As in ggml, batches below FA_TILE_Q
    queries take the one-chunk path (f16 queries, V accumulated in f16), larger ones the tiled
    path (f32 throughout); a single query over a padded cache of 512 cells or more takes the
    split-KV path (one chunk of cells per thread, partials reduced: n_threads is llama.cpp's
    thread count, which shapes the result there). work: the decode jobs' scratch
    (attention_work).
    """
    n_used = cells_used(kpos)
    if q.shape[0] >= FA_TILE_Q:
        attention_tiled(q, qpos, kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim,
                        head_dim_v, scale, softcap, n_swa, causal, out)
    elif q.shape[0] == 1 and n_kv_cells(kcache.shape[0], n_used) >= FA_SPLIT_KV:
        attention_split_kv(q, qpos[0], kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim,
                           head_dim_v, scale, softcap, n_swa, causal, n_threads, out, work)
    else:
        attention_one_chunk(q, qpos, kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim,
                            head_dim_v, scale, softcap, n_swa, causal, out, work)


FA_SPLIT_KV = 512   # ggml's use_split_kv_path: one query, nek1 >= 512
KV_PAD = 256        # llama_kv_cache::get_n_kv pads the cells it shows the graph to 256


@njit(cache=True, inline="always")
def n_kv_cells(cache_size, n_used):
    """The nek1 llama.cpp's graph sees (llama_kv_cache::get_n_kv): used cells padded to 256,
    at most the cache size (n_ctx cells, or the sliding-window layers' smaller ring)."""
    return min(cache_size, max(KV_PAD, (n_used + KV_PAD - 1) // KV_PAD * KV_PAD))


def _round_up16(n):
    """n f32 rounded up to 64 bytes: each of _carve's arrays starts on a line of its own."""
    return (n + 15) // 16 * 16


_segment = njit(cache=True, inline="always")(_round_up16)


def work_width(n_head, n_head_kv, head_dim, head_dim_v):
    """f32 elements of one thread's row of the attention scratch (attention_work): _carve's
    arrays for a job of a KV head's query heads."""
    heads = n_head // n_head_kv
    n_half = head_dim_v & ~(F16_HALF_STEP - 1) if F16_HALF_STEP else 0
    sizes = (heads * head_dim, heads * head_dim_v, (heads * max(n_half, 1) + 1) // 2, heads, heads, heads,
             F16_LANES, head_dim_v)
    return sum(_round_up16(n) for n in sizes)


def attention_work(n_head, n_head_kv, head_dim, head_dim_v):
    """The decode jobs' scratch, a row per thread of numba's pool ((NUMBA_NUM_THREADS,
    work_width) f32): made once with the model, so a step allocates nothing (each job takes
    its thread's row, numba.get_thread_id, and carves its arrays from it)."""
    return np.zeros((numba.config.NUMBA_NUM_THREADS, work_width(n_head, n_head_kv, head_dim, head_dim_v)),
                    np.float32)


@njit(cache=True, boundscheck=False, inline="always")
def _carve(work, heads, head_dim, head_dim_v):
    """A job's arrays for `heads` query heads, views of its thread's row of the scratch:
    qv (heads, head_dim) the f16-rounded queries, acc (heads, head_dim_v) and acc_h (heads,
    n_half) u16 the accumulator (_one_chunk_heads), scores, M, S (heads,), lanes (F16_LANES,),
    vkq (head_dim_v,) the split-KV path's merged partials. The same row always gives the same
    views: a job and the functions it calls each carve their own."""
    n_half = head_dim_v & ~(F16_HALF_STEP - 1) if F16_HALF_STEP else 0
    nh = max(n_half, 1)
    o0 = 0
    o1 = o0 + _segment(heads * head_dim)
    o2 = o1 + _segment(heads * head_dim_v)
    o3 = o2 + _segment((heads * nh + 1) // 2)
    o4 = o3 + _segment(heads)
    o5 = o4 + _segment(heads)
    o6 = o5 + _segment(heads)
    o7 = o6 + _segment(F16_LANES)
    qv = work[o0:o0 + heads * head_dim].reshape((heads, head_dim))
    acc = work[o1:o1 + heads * head_dim_v].reshape((heads, head_dim_v))
    acc_h = work[o2:o3].view(np.uint16)[:heads * nh].reshape((heads, nh))
    return (qv, acc, acc_h, work[o3:o3 + heads], work[o4:o4 + heads], work[o5:o5 + heads],
            work[o6:o6 + F16_LANES], work[o7:o7 + head_dim_v])


@njit(cache=True, boundscheck=False)
def _one_chunk_row(p, kcache, vcache, kpos, koff, voff, j0, j1, head_dim, head_dim_v, scale,
                   softcap, n_swa, causal, work):
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query at position p over
    cells j0..j1-1 (masked cells skipped): the query, f16-rounded, in _carve(work, 1)'s qv; the
    f16 accumulator's values (unnormalised) left in its acc[0]; returns (M, S).
    _one_chunk_heads of one head."""
    n_half = head_dim_v & ~(F16_HALF_STEP - 1) if F16_HALF_STEP else 0
    qv, acc, acc_h, scores, M, S, lanes, _ = _carve(work, 1, head_dim, head_dim_v)
    _one_chunk_heads(qv, p, kcache, vcache, kpos, koff, voff, j0, j1, head_dim, head_dim_v, scale,
                     softcap, n_swa, causal, acc_h, acc, scores, M, S, lanes)
    for d in range(n_half):
        acc[0, d] = f16_to_f32(acc_h[0, d])
    return M[0], S[0]


@njit(cache=True, boundscheck=False)
def _one_chunk_heads(qv, p, kcache, vcache, kpos, koff, voff, j0, j1, head_dim, head_dim_v, scale,
                     softcap, n_swa, causal, acc_h, acc, scores, M, S, lanes):
    """_one_chunk_row for G query heads that share a KV head (qv (G, head_dim), f16-rounded),
    cell by cell: each cell's key and value rows read once for all G, each head's arithmetic
    in _one_chunk_row's order, so each head's bits are its own. The accumulator's half lanes
    stay halves (acc_h (G, n_half) u16: the same values, no conversion a cell), the rest f32
    (acc (G, head_dim_v), its first n_half unused). scores (G,), lanes (F16_LANES,) scratch;
    M, S (G,) f32 out."""
    G = qv.shape[0]
    n_half = head_dim_v & ~(F16_HALF_STEP - 1) if F16_HALF_STEP else 0
    n_lanes = (head_dim_v - n_half) // F16_LANES
    n_lanes_end = n_half + n_lanes * F16_LANES
    for g in range(G):
        M[g] = -np.inf
        S[g] = 0.0
        for d in range(n_half):
            acc_h[g, d] = 0
        for d in range(n_half, head_dim_v):
            acc[g, d] = 0.0
    for j in range(j0, j1):
        if not sees(kpos[j], p, n_swa, causal):
            continue
        for g in range(G):
            s = _kq(qv[g], kcache, j, koff, head_dim, lanes) * np.float32(scale)
            if softcap != 0.0:
                s = np.float32(softcap) * np.float32(math.tanh(s))
            scores[g] = s
        v_p = np.int64(vcache.ctypes.data) + j * vcache.strides[0] + 2 * voff
        for g in range(G):
            s = scores[g]
            acc_p = np.int64(acc.ctypes.data) + g * acc.strides[0]
            acc_hp = np.int64(acc_h.ctypes.data) + g * acc_h.strides[0]
            ms = np.float32(1.0)
            vs = np.float32(1.0)
            if s > M[g]:
                ms = np.float32(math.exp(M[g] - s))
                M[g] = s
                _f16_scale_halves(acc_hp, np.int64(f32_to_f16(ms)), np.int64(0), n_half // (2 * F16_LANES))
                _f16_scale(acc_p + 4 * n_half, np.int64(f32_bits(ms)), np.int64(0), n_lanes)
                for d in range(n_lanes_end, head_dim_v):
                    acc[g, d] = round_f16(acc[g, d] * ms)
            else:
                vs = np.float32(math.exp(s - M[g]))
            _f16_mad_halves(acc_hp, np.int64(f32_to_f16(vs)), v_p, n_half // (2 * F16_LANES))
            _f16_mad(acc_p + 4 * n_half, np.int64(f32_bits(vs)), v_p + 2 * n_half, n_lanes)
            for d in range(n_lanes_end, head_dim_v):
                acc[g, d] = round_f16(fma_f32(f16_to_f32(vcache[j, voff + d]), vs, acc[g, d]))
            S[g] = fma_f32(S[g], ms, vs)


@njit(cache=True, parallel=True, boundscheck=False)
def attention_one_chunk(q, qpos, kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim,
                        head_dim_v, scale, softcap, n_swa, causal, out, work):
    """ggml's one-chunk flash attention: online softmax cell by cell, f16 accumulator (work:
    attention_work, a row a thread)."""
    T = q.shape[0]
    group = n_head // n_head_kv
    if softcap != 0.0:
        scale = scale / softcap
    for job in prange(T * n_head):
        _one_chunk_job(job // n_head, job % n_head, q, qpos, kcache, vcache, kpos, n_used, group,
                       head_dim, head_dim_v, scale, softcap, n_swa, causal, out, work[numba.get_thread_id()])


@njit(cache=True, boundscheck=False)
def _one_chunk_job(t, h, q, qpos, kcache, vcache, kpos, n_used, group, head_dim, head_dim_v, scale,
                   softcap, n_swa, causal, out, work):
    """attention_one_chunk's query t, head h, on its thread's row of the scratch (work). A
    function of its own, not the prange's body: numba's parallel passes then see one call,
    not the inlined loops (COLD)."""
    qv, acc, _, _, _, _, _, _ = _carve(work, 1, head_dim, head_dim_v)
    for d in range(head_dim):
        qv[0, d] = round_f16(q[t, h * head_dim + d])
    M, S = _one_chunk_row(qpos[t], kcache, vcache, kpos, (h // group) * head_dim,
                          (h // group) * head_dim_v, np.int64(0), n_used, head_dim, head_dim_v, scale,
                          softcap, n_swa, causal, work)
    inv = np.float32(0.0) if S == 0.0 else np.float32(1.0) / S
    for d in range(head_dim_v):
        out[t, h * head_dim_v + d] = acc[0, d] * inv


@njit(cache=True, parallel=True, boundscheck=False)
def attention_split_kv(q, p, kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim, head_dim_v,
                       scale, softcap, n_swa, causal, n_threads, out, work):
    """ggml's split-KV decode: the padded cells cut into n_threads chunks, each run as one
    chunk from M = -inf, then the partials merged in chunk order
    (ggml_flash_attn_ext_reduce_partials: V = fma(V, e^(M-M'), Vc*e^(Mc-M')), the same for S).
    Depends on llama.cpp's thread count, taken equal to ours."""
    group = n_head // n_head_kv
    if softcap != 0.0:
        scale = scale / softcap
    nek1 = n_kv_cells(kcache.shape[0], n_used)
    chunk = (nek1 + n_threads - 1) // n_threads
    for h in prange(n_head):
        _split_kv_head(np.int64(h), q, p, kcache, vcache, kpos, n_used, group, head_dim, head_dim_v, scale,
                       softcap, n_swa, causal, n_threads, chunk, out, work[numba.get_thread_id()])


@njit(cache=True, boundscheck=False)
def _split_kv_head(h, q, p, kcache, vcache, kpos, n_used, group, head_dim, head_dim_v, scale,
                   softcap, n_swa, causal, n_threads, chunk, out, work):
    """attention_split_kv's head h, on its thread's row of the scratch (work; a function of its
    own: see _one_chunk_job)."""
    qv, acc, _, _, _, _, _, vkq = _carve(work, 1, head_dim, head_dim_v)
    for d in range(head_dim):
        qv[0, d] = round_f16(q[0, h * head_dim + d])
    for d in range(head_dim_v):
        vkq[d] = 0.0
    M = np.float32(-np.inf)
    S = np.float32(0.0)
    for c in range(n_threads):
        j0 = c * chunk
        j1 = min(c * chunk + chunk, n_used)
        if j0 >= j1:
            continue          # only empty cells: S = 0, skipped by the reduction
        Mc, Sc = _one_chunk_row(p, kcache, vcache, kpos, (h // group) * head_dim,
                                (h // group) * head_dim_v, j0, j1, head_dim, head_dim_v,
                                scale, softcap, n_swa, causal, work)
        if Sc == 0.0:
            continue
        m_new = max(M, Mc)
        s_old = np.float32(math.exp(M - m_new))
        s_new = np.float32(math.exp(Mc - m_new))
        for d in range(head_dim_v):
            vkq[d] = fma_f32(vkq[d], s_old, acc[0, d] * s_new)
        S = fma_f32(S, s_old, Sc * s_new)
        M = m_new
    if S != 0.0:
        inv = np.float32(1.0) / S
        for d in range(head_dim_v):
            vkq[d] = vkq[d] * inv
    for d in range(head_dim_v):
        out[0, h * head_dim_v + d] = vkq[d]


@njit(cache=True, parallel=True, boundscheck=False)
def attention_rows(q, qpos, kblock, vblock, layer, kpos, seqs, n_used, n_head, n_head_kv, head_dim,
                   head_dim_v, scale, softcap, n_swa, out, n_threads, work):
    """A batched decode step's attention in one parallel region: row t, one query q[t] at
    position qpos[t] of sequence seqs[t], over that sequence's cache of `layer`, causal, as
    `attention` computes it alone (split-KV where its padded cells reach FA_SPLIT_KV, else the
    one chunk), the jobs of every row in one prange (not a region a row). A job is a row's
    query heads that share a KV head (_one_chunk_heads: one pass over its keys and values),
    cut in halves while there are fewer jobs than threads.

    kblock, vblock: (n_seq, n_layers, n_cells, n_head_kv * head_dim(_v)) u16, the stacked caches
    of every sequence; kpos (n_seq, n_cells); n_used (>= B,) int64, scratch for each row's
    used cells; out (B, n_head * head_dim_v); work: attention_work, a row a thread."""
    B = q.shape[0]
    for t in range(B):
        n_used[t] = cells_used(kpos[seqs[t]])
    group = n_head // n_head_kv
    heads = group          # query heads a job
    while heads % 2 == 0 and B * (n_head // heads) < n_threads:
        heads //= 2
    if softcap != 0.0:
        scale = scale / softcap
    per_row = n_head // heads
    for job in prange(B * per_row):
        _rows_job(job // per_row, (job % per_row) * heads, heads, q, qpos, kblock, vblock, layer, kpos,
                  seqs, n_used, group, head_dim, head_dim_v, scale, softcap, n_swa, out, n_threads,
                  work[numba.get_thread_id()])


@njit(cache=True, boundscheck=False)
def _rows_job(t, h0, heads, q, qpos, kblock, vblock, layer, kpos, seqs, n_used, group, head_dim,
              head_dim_v, scale, softcap, n_swa, out, n_threads, work):
    """attention_rows' row t, query heads h0..h0+heads-1 (of one KV head), on its thread's row
    of the scratch (work; a function of its own: see _one_chunk_job)."""
    kc, vc, kp = kblock[seqs[t], layer], vblock[seqs[t], layer], kpos[seqs[t]]
    nek1 = n_kv_cells(kc.shape[0], n_used[t])
    if nek1 >= FA_SPLIT_KV:
        for h in range(h0, h0 + heads):
            _split_kv_head(h, q[t:t + 1], qpos[t], kc, vc, kp, n_used[t], group, head_dim, head_dim_v,
                           scale, softcap, n_swa, True, n_threads, (nek1 + n_threads - 1) // n_threads,
                           out[t:t + 1], work)
        return
    qv, acc, acc_h, scores, M, S, lanes, _ = _carve(work, heads, head_dim, head_dim_v)
    for g in range(heads):
        for d in range(head_dim):
            qv[g, d] = round_f16(q[t, (h0 + g) * head_dim + d])
    n_half = head_dim_v & ~(F16_HALF_STEP - 1) if F16_HALF_STEP else 0
    kv = h0 // group
    _one_chunk_heads(qv, qpos[t], kc, vc, kp, kv * head_dim, kv * head_dim_v, np.int64(0), n_used[t],
                     head_dim, head_dim_v, scale, softcap, n_swa, True, acc_h, acc, scores, M, S, lanes)
    for g in range(heads):
        inv = np.float32(0.0) if S[g] == 0.0 else np.float32(1.0) / S[g]
        o = (h0 + g) * head_dim_v
        for d in range(n_half):
            out[t, o + d] = f16_to_f32(acc_h[g, d]) * inv
        for d in range(n_half, head_dim_v):
            out[t, o + d] = acc[g, d] * inv


FA_TILE_KV = 64   # GGML_FA_TILE_KV: keys per tile, tiles start at multiples of it
# Register tiles of the scores and values: FA_R query rows x FA_COLS columns (4 vectors of
# FA_LANES), sized so the accumulators, the 4 B vectors and a broadcast fit the register file
# (AVX-512: 4 x 4 of 32 zmm; AVX2: 2 x 4 of 16 ymm, 73 GFLOP/s hot on one core: 3 x 4 spilled
# two accumulators through the stack on every step and ran at 36)
FA_LANES = 16 if "avx512f" in probe().features else 8
FA_R = 4 if FA_LANES == 16 else 2
FA_COLS = 4 * FA_LANES
# query rows of one head that share a tile's loads (any size gives the same result; 16 against
# 10: scores and values ~15 % faster at pp512), and the head_dim chunk of the scores' chains
FA_ROWS = 16
FA_DC = 64


@njit(cache=True, boundscheck=False)
def _key_tile(cache, n, off, width, dst, tile):
    """dst[tile, d, k] = cache[64 tile + k, off + d] as f32, zero past n: a key tile
    transposed (features by keys, as ggml packs it) and contiguous, so the score tile's k loop
    walks 256-byte rows rather than rows one cache-size stride apart (which thrashed L1 and L2:
    ~8x slower scores). Written a feature at a time from a column view (a key at a time, each
    store 256 bytes from the last: 0.21 ms a gemma3 layer at pp512 on one thread, now 0.03)."""
    j0 = tile * FA_TILE_KV
    k_in = max(0, min(FA_TILE_KV, n - j0))
    for d in range(width):
        row = dst[tile, d]
        col = cache[j0:j0 + k_in, off + d]
        for k in range(k_in):
            row[k] = f16_to_f32(col[k])
        for k in range(k_in, FA_TILE_KV):
            row[k] = 0.0


@njit(cache=True, boundscheck=False)
def _value_tile(cache, n, off, width, dst, tile):
    """dst[tile, c, k, i] = cache[64 tile + k, off + FA_COLS c + i] as f32, zero past n and
    past width: a key tile's values cut into column chunks of FA_COLS, each chunk
    contiguous, so the value tile's k loop walks consecutive rows."""
    for c in range(dst.shape[1]):
        for k in range(FA_TILE_KV):
            j = tile * FA_TILE_KV + k
            for i in range(FA_COLS):
                d = c * FA_COLS + i
                dst[tile, c, k, i] = f16_to_f32(cache[j, off + d]) if j < n and d < width else 0.0


_softmax_ir = softmax_row(FA_TILE_KV, False)
_softmax_ir_masked = softmax_row(FA_TILE_KV, True)


@njit(cache=True, boundscheck=False, inline="always")
def _softmax_row(row, kpos, lo, hi, scale, masked, m_old, res):
    """One query row of a key tile (FA_TILE_KV raw scores at row): each score times scale, -inf
    where `masked` and the cell's position (kpos[k]) is out of [lo, hi]; then with the running
    max m = max(m_old, the tile's max), row[k] = ggml_v_expf(row[k] - m). res (2,): the tile's
    max and the sum of the exps in ggml_vec_soft_max_f32's order (per EXP_LANES lanes a
    horizontal sum, added in double). 16 lanes in IR (fa_tiles.softmax_row), else numba's."""
    if EXP_LANES == 16:
        scale_bits, m_bits = f32_bits(np.float32(scale)), f32_bits(m_old)
        if masked:
            _softmax_ir_masked(row.ctypes.data, kpos.ctypes.data, lo, hi, scale_bits, m_bits, res.ctypes.data)
        else:
            _softmax_ir(row.ctypes.data, kpos.ctypes.data, lo, hi, scale_bits, m_bits, res.ctypes.data)
        return
    for k in range(FA_TILE_KV):
        ok = (kpos[k] <= hi) & (kpos[k] >= lo) if masked else True
        row[k] = row[k] * np.float32(scale) if ok else np.float32(-np.inf)
    tile_max = row_max(row, 0, FA_TILE_KV)
    m = max(m_old, tile_max)
    for k in range(FA_TILE_KV):
        row[k] = v_expf(row[k] - m)
    total = 0.0
    for c in range(0, FA_TILE_KV, EXP_LANES):
        total += np.float64(hsum8(row[c:c + 8]))
    res[0] = tile_max
    res[1] = total


@njit(cache=True, boundscheck=False)
def _scores_masked(row, kpos, ic, n_kv, p, scale, softcap, n_swa, causal):
    """A key tile's raw scores at row scaled (soft-capped: softcap * tanh(s * scale)) where the
    query at position p sees the cell (`sees`), -inf elsewhere and past n_kv: for the tiles
    _softmax_row's two bounds do not describe (a soft cap, empty cells, the cache's end)."""
    for tk in range(FA_TILE_KV):
        j = ic + tk
        if j < n_kv and sees(kpos[j], p, n_swa, causal):
            if softcap != 0.0:
                row[tk] = np.float32(math.tanh(row[tk] * np.float32(scale))) * np.float32(softcap)
            else:
                row[tk] = row[tk] * np.float32(scale)
        else:
            row[tk] = np.float32(-np.inf)


_o1, _o2, _o3, _o4 = (outer_tile(r, 4, FA_LANES) for r in (1, 2, 3, 4))


@njit(cache=True, inline="always")
def _outer(rows, a, a_rs, a_ks, b, b_rs, c, c_rs, k):
    """fa_tiles.outer_tile(rows, 4) for rows 1..4: FA_COLS columns."""
    if rows == 4:
        _o4(a, a_rs, a_ks, b, b_rs, c, c_rs, k)
    elif rows == 3:
        _o3(a, a_rs, a_ks, b, b_rs, c, c_rs, k)
    elif rows == 2:
        _o2(a, a_rs, a_ks, b, b_rs, c, c_rs, k)
    else:
        _o1(a, a_rs, a_ks, b, b_rs, c, c_rs, k)


@njit(cache=True, parallel=True, boundscheck=False)
def attention_tiled(q, qpos, kcache, vcache, kpos, n_used, n_head, n_head_kv, head_dim, head_dim_v,
                    scale, softcap, n_swa, causal, out):
    """ggml's tiled flash attention (ggml_compute_forward_flash_attn_ext_tiled): f32 queries;
    cells in tiles of FA_TILE_KV from cell 0; per tile and query row, scores by one fma
    chain over head_dim (simd_gemm), scaled, the running max, rescale by expf on a new max,
    probabilities by ggml_v_expf with their sum in double per EXP_LANES lanes
    (ggml_vec_soft_max_f32), then V accumulated by one fma chain over the tile's cells. Rows
    are independent; FA_ROWS of one head share each tile's loads. A tile no row of the block
    sees is skipped (ggml skips each row of it)."""
    T = q.shape[0]
    n_kv = n_used
    group = n_head // n_head_kv
    if softcap != 0.0:
        scale = scale / softcap
    n_tiles = (n_kv + FA_TILE_KV - 1) // FA_TILE_KV
    kf = np.empty((n_head_kv, n_tiles, head_dim, FA_TILE_KV), np.float32)
    n_chunks = (head_dim_v + FA_COLS - 1) // FA_COLS
    vf = np.empty((n_head_kv, n_tiles, n_chunks, FA_TILE_KV, FA_COLS), np.float32)
    # a job a tile, keys and values alternating (the key tiles' transpose takes ~3x the
    # values' copy: a job per head's keys or values left one thread idle most of the region)
    for job in prange(2 * n_head_kv * n_tiles):
        g, tile = job // (2 * n_tiles), (job % (2 * n_tiles)) // 2
        if job % 2 == 0:
            _key_tile(kcache, n_kv, g * head_dim, head_dim, kf[g], tile)
        else:
            _value_tile(vcache, n_kv, g * head_dim_v, head_dim_v, vf[g], tile)
    n_blocks = (T + FA_ROWS - 1) // FA_ROWS
    for job in prange(n_head * n_blocks):
        _tiled_block(job // n_blocks, (job % n_blocks) * FA_ROWS, q, qpos, kf, vf, kpos, n_kv, n_tiles,
                     n_chunks, group, head_dim, head_dim_v, scale, softcap, n_swa, causal, out)
    # numba frees an array after its last use in the function, and the tiles above reach kf
    # and vf by raw address only: these uses keep them alive until here
    keep_alive(kf)
    keep_alive(vf)


@njit(cache=True, boundscheck=False)
def _tiled_block(h, t0, q, qpos, kf, vf, kpos, n_kv, n_tiles, n_chunks, group, head_dim, head_dim_v,
                 scale, softcap, n_swa, causal, out):
    """attention_tiled's rows t0.. (FA_ROWS of them at most) of head h, over the key and value
    tiles kf, vf (a function of its own: see _one_chunk_job)."""
    T = q.shape[0]
    nr = min(FA_ROWS, T - t0)
    g = h // group
    hdv_pad = n_chunks * FA_COLS
    q_p, kf_p, vf_p = np.int64(q.ctypes.data), np.int64(kf.ctypes.data), np.int64(vf.ctypes.data)
    qs = q.strides[0]
    kq = np.empty((FA_ROWS, FA_TILE_KV), np.float32)
    acc = np.zeros((FA_ROWS, hdv_pad), np.float32)
    kq_p, acc_p, kq_rs = np.int64(kq.ctypes.data), np.int64(acc.ctypes.data), FA_TILE_KV * 4
    M = np.full(FA_ROWS, -np.inf, np.float32)
    S = np.zeros(FA_ROWS, np.float32)
    live = np.zeros(FA_ROWS, np.bool_)
    res = np.empty(2, np.float64)
    p_lo, p_hi = qpos[t0], qpos[t0]
    for r in range(nr):
        p_lo, p_hi = min(p_lo, qpos[t0 + r]), max(p_hi, qpos[t0 + r])
    # the positions some row of the block may see
    span_hi = p_hi if causal else np.int64(2**62)
    span_lo = p_lo - n_swa + 1 if n_swa > 0 else np.int64(-2**62)
    for ic in range(0, n_kv, FA_TILE_KV):
        ic1 = min(ic + FA_TILE_KV, n_kv)
        # the tile's occupied positions: a tile wholly after the block's last query (causal) or
        # wholly out of its first query's window is seen by no row, found without the
        # row-by-cell test below (for a causal pp512, 7 of 8 skipped tiles walked all of it)
        o_lo, o_hi = np.int64(-1), np.int64(-1)
        for j in range(ic, ic1):
            if kpos[j] >= 0:
                o_lo = kpos[j] if o_lo < 0 else min(o_lo, kpos[j])
                o_hi = max(o_hi, kpos[j])
        if o_hi < 0 or (causal and o_lo > p_hi) or (n_swa > 0 and p_lo - o_hi >= n_swa):
            continue
        seen = False
        for r in range(nr):
            for j in range(ic, ic1):
                if sees(kpos[j], qpos[t0 + r], n_swa, causal):
                    seen = True
                    break
            if seen:
                break
        if not seen:
            continue
        # the tile's occupied positions (whole: all its cells), and the columns a row of the
        # block may see: past the last cell in the block's span (a causal diagonal, a window's
        # edge) every row's scores are masked, so those columns' chunks of FA_COLS scores and
        # their values are skipped (a value times a zero probability adds nothing: ggml's fma
        # there leaves the sum as is)
        whole = ic + FA_TILE_KV <= n_kv
        k_lo, k_hi = kpos[ic], kpos[ic]
        n_cols = 0
        for j in range(ic, ic1):
            whole = whole and kpos[j] >= 0
            k_lo, k_hi = min(k_lo, kpos[j]), max(k_hi, kpos[j])
            if span_lo <= kpos[j] <= span_hi:
                n_cols = j - ic + 1
        if not whole or softcap != 0.0:
            n_cols = FA_TILE_KV
        kq[:, :] = 0.0
        k_tile = kf_p + ((g * n_tiles + ic // FA_TILE_KV) * head_dim) * FA_TILE_KV * 4
        # the scores' fma chains run over head_dim in chunks of FA_DC, each chunk against
        # every row of the block while its keys (FA_DC x FA_COLS) stay in L1; the chains
        # pass through kq between chunks, which stores and reloads them exactly
        for c0 in range(0, n_cols, FA_COLS):
            for d0 in range(0, head_dim, FA_DC):
                for r in range(0, nr, FA_R):
                    _outer(min(FA_R, nr - r), q_p + (t0 + r) * qs + (h * head_dim + d0) * 4, qs, 4,
                           k_tile + (d0 * FA_TILE_KV + c0) * 4, FA_TILE_KV * 4,
                           kq_p + r * kq_rs + c0 * 4, kq_rs, min(FA_DC, head_dim - d0))
        for r in range(nr):
            p = qpos[t0 + r]
            row = kq[r]
            hi = p if causal else np.int64(2**62)
            lo = p - n_swa + 1 if n_swa > 0 else np.int64(-2**62)
            if whole and softcap == 0.0:
                # `sees` for the tile's occupied cells as two bounds on their position
                _softmax_row(row, kpos[ic:], lo, hi, scale, not (lo <= k_lo and k_hi <= hi), M[r], res)
            else:
                _scores_masked(row, kpos, ic, n_kv, p, scale, softcap, n_swa, causal)
                _softmax_row(row, kpos[ic:], lo, hi, np.float32(1.0), False, M[r], res)
            tile_max = np.float32(res[0])
            live[r] = tile_max != -np.inf   # all cells masked: ggml skips the row
            if not live[r]:
                continue
            m_new = max(M[r], tile_max)
            if m_new > M[r]:
                ms = np.float32(math.exp(M[r] - m_new))
                for d in range(head_dim_v):
                    acc[r, d] = acc[r, d] * ms
                S[r] = S[r] * ms
            M[r] = m_new
            S[r] = np.float32(np.float64(S[r]) + res[1])
        v_tile = vf_p + (g * n_tiles + ic // FA_TILE_KV) * n_chunks * FA_TILE_KV * FA_COLS * 4
        all_live = True
        for r in range(nr):
            all_live = all_live and live[r]
        step = FA_R if all_live else 1
        for c in range(n_chunks):           # a chunk of values against every row
            for r in range(0, nr, step):
                if live[r]:
                    _outer(min(step, nr - r), kq_p + r * kq_rs, kq_rs, 4,
                           v_tile + c * FA_TILE_KV * FA_COLS * 4, FA_COLS * 4,
                           acc_p + (r * hdv_pad + c * FA_COLS) * 4, hdv_pad * 4, n_cols)
    for r in range(nr):
        inv = np.float32(0.0) if S[r] == 0.0 else np.float32(1.0) / S[r]
        for d in range(head_dim_v):
            out[t0 + r, h * head_dim_v + d] = acc[r, d] * inv
    keep_alive(kf)
    keep_alive(vf)

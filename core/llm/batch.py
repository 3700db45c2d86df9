"""One decode step of several sequences at once: B tokens, each at its own position in its own
KV cache, through every layer as one B-row batch, so each weight is read once per step
instead of once per sequence (what a server's parallel sequences gain from the batch tiles).

The layer is forward.py's, built from the same steps (_qkv, _ffn, _output); only the
positions, the caches and attention are per row (each row attends over its own sequence's
cache, through the one-query path a decode step takes, all rows in one parallel region). No
trace, and every row's logits are kept.
"""
import numpy as np
from numba import njit

from dasllama.kernels.attention import attention_rows, store_kv_rows
from dasllama.kernels.ops import rms_norm

from .forward import (_add_residual, _attn_out, _embed, _ffn, _fvec, _output, _qkv, _rope_tables, _scale,
                      _scratch_views, _view, per_formats, place_batch)
from .kvcache import KV


@njit(cache=True)
def _row(block, i):
    return KV(block.k[i], block.v[i], block.k_swa[i], block.v_swa[i], block.pos[i], block.pos_swa[i],
              block.heads[i])


@njit(cache=True)
def _layer_block(block, il, layer_swa, cells, cells_swa):
    """Layer il's stacked caches of every sequence, as _layer_cache picks one sequence's: (keys,
    values (n_seq, n_layers, n_cells, width), the layer's index in them, cell positions (n_seq,
    n_cells), the batch's cells in them (B,))."""
    ig = 0
    for j in range(il):
        ig += 0 if (layer_swa[j] and block.k_swa.shape[1] > 0) else 1
    if layer_swa[il] and block.k_swa.shape[1] > 0:
        return block.k_swa, block.v_swa, il - ig, block.pos_swa, cells_swa
    return block.k, block.v, ig, block.pos, cells


@per_formats()   # compiled per set of formats, as forward (step.py)
def forward_batch(tokens, positions, slots, net, block, scratch, acts, logits, n_threads):
    """Run tokens (B,) at positions (B,) of sequences slots (B,) through the model; write
    every row's logits into logits[:B].

    block: the stacked KV of every sequence (kvcache.new_block); the other arguments as
    forward.forward's."""
    sh = net.shape
    B = tokens.shape[0]
    x, xn, q, k, v, att, ao, gate, up, hid, work = _scratch_views(scratch, B, sh)
    cells, cells_swa, n_used = work.cells[:B], work.cells_swa[:B], work.n_used[:B]
    for t in range(B):
        place_batch(_row(block, slots[t]), positions[t:t + 1], sh.n_swa, cells[t:t + 1], cells_swa[t:t + 1])
    angles, layer_tab = _rope_tables(positions, sh.n_rot, net.layer_freq_base, work)
    _embed(tokens, net, x)

    for il in range(sh.n_layer):
        rms_norm(x, _fvec(net.fbuf, net.norms.attn[il]), sh.eps, xn)
        _qkv(il, net, xn, acts, scratch.gate, angles[layer_tab[il]], q, k, v)
        if sh.q_scale != 1.0:
            _scale(q, np.float32(sh.q_scale))
        n_swa = sh.n_swa if net.layer_swa[il] else 0
        kb, vb, layer, kposb, cl = _layer_block(block, il, net.layer_swa, cells, cells_swa)
        store_kv_rows(k, v, kb, vb, layer, slots, cl)
        attention_rows(q, positions, kb, vb, layer, kposb, slots, n_used, sh.n_head, sh.n_head_kv,
                       sh.head_dim, sh.head_dim_v, sh.kq_scale, sh.attn_softcap, n_swa, att, n_threads,
                       work.attn)
        _attn_out(il, net, att, acts, ao)
        _add_residual(ao, x)

        rms_norm(x, _fvec(net.fbuf, net.norms.ffn[il]), sh.eps, xn)
        _ffn(il, net, xn, acts, scratch.hid, gate, up, hid, ao)
        _add_residual(ao, x)

    _output(x, net, acts, _view(scratch.xn, B, sh.n_embd), logits[:B])

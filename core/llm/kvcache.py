"""One sequence's KV cache, laid out and filled as llama.cpp's is, so attention sums the same keys
in the same order.

llama.cpp keeps two caches when a model has sliding-window layers (llama_kv_cache_iswa): n_ctx
cells for the global layers, and for the window layers a ring of
pad256(min(n_ctx, n_swa + n_ubatch)) cells whose slots are reused once their keys fall out of
the window. A batch's tokens go to the cells `place` finds (llama_kv_cache::find_slot, then
apply_ubatch), and flash attention walks the cells in cell order: once the ring has wrapped,
that is not position order, and the sums round differently. Keeping the same cells keeps the
same bits, and the window layers' memory is the ring's instead of n_ctx's (gemma3 at 4096:
1024 cells for 5 layers in 6).
"""
from collections import namedtuple

import numpy as np
from numba import njit

GLOBAL, WINDOW = 0, 1     # the two caches (heads[GLOBAL], heads[WINDOW])

# k, v: (n_global_layers, n_ctx, kv_dim) u16 f16 bits; k_swa, v_swa: (n_window_layers, n_ring,
# kv_dim); pos, pos_swa: the position each cell holds (-1: empty); heads: (2,) where the next
# search starts in each. A block of caches (Model.new_kvs) has one more leading axis on each.
KV = namedtuple("KV", "k v k_swa v_swa pos pos_swa heads")


def ring_cells(n_ctx, n_swa, n_ubatch):
    """The window layers' cache size, as llama_kv_cache_iswa sizes it (swa_full off)."""
    return -(-min(n_ctx, n_swa + n_ubatch) // 256) * 256 if n_swa > 0 else 0


def new_block(n_seq, n_ctx, n_ring, n_global, n_window, kv_dim, kv_dim_v):
    """n_seq empty caches in one KV of stacked arrays."""
    return KV(np.zeros((n_seq, n_global, n_ctx, kv_dim), np.uint16),
              np.zeros((n_seq, n_global, n_ctx, kv_dim_v), np.uint16),
              np.zeros((n_seq, n_window, n_ring, kv_dim), np.uint16),
              np.zeros((n_seq, n_window, n_ring, kv_dim_v), np.uint16),
              np.full((n_seq, n_ctx), -1, np.int64), np.full((n_seq, n_ring), -1, np.int64),
              np.zeros((n_seq, 2), np.int64))


def row(block, i):
    """Sequence i of a block, as views."""
    return KV(*(a[i] for a in block))


@njit(cache=True)
def place(kpos, heads, which, positions, n_swa, cells):
    """Find cells for tokens at `positions` and mark them taken, as llama.cpp does for one
    sequence: find_slot (from the head, wrapping; a cell is free when empty or, in a window
    cache, when its key is out of the window of the next position; back to cell 0 when the head
    is far past the used count) then apply_ubatch (the cells take the new positions, every
    older position than one overwritten is dropped, the head moves past the last cell).
    Returns False when no room is left (the caller checked the context first)."""
    n_cells = kpos.shape[0]
    T = positions.shape[0]
    used = 0
    pos_max = -1
    for c in range(n_cells):
        if kpos[c] >= 0:
            used += 1
            pos_max = max(pos_max, kpos[c])
    head = heads[which]
    if head > used + 2 * T:
        head = 0
    found = 0
    tested = 0
    while found < T:
        if head + 1 > n_cells:
            tested += n_cells - head
            head = 0
            continue
        c = head
        head += 1
        tested += 1
        if kpos[c] < 0 or (n_swa > 0 and pos_max + 1 - kpos[c] >= n_swa):
            cells[found] = c
            found += 1
        if found < T and tested >= n_cells:
            return False
    dropped = -1
    for t in range(T):
        c = cells[t]
        if kpos[c] >= 0:
            dropped = max(dropped, kpos[c])
        kpos[c] = positions[t]
    if dropped >= 0:
        for c in range(n_cells):
            if 0 <= kpos[c] <= dropped:
                kpos[c] = -1
    heads[which] = cells[T - 1] + 1
    return True


@njit(cache=True)
def forget(kpos, heads, which, p0):
    """llama_kv_cache::seq_rm(seq, p0, -1): empty the cells of positions p0 and later; the
    head moves back to the first cell emptied when that is before it."""
    first = -1
    for c in range(kpos.shape[0]):
        if kpos[c] >= p0:
            kpos[c] = -1
            if first < 0:
                first = c
    if 0 <= first < heads[which]:
        heads[which] = first


def window_intact(pos_swa, n_keep, n_swa):
    """Whether the ring still holds every key the next position after n_keep sees (the
    n_swa - 1 before it): False once they were overwritten, and the prompt must be fed again."""
    if pos_swa.shape[0] == 0 or n_keep == 0:
        return True
    held = set(int(p) for p in pos_swa if 0 <= p < n_keep)
    return all(p in held for p in range(max(0, n_keep - n_swa + 1), n_keep))


class KVCache:
    """One sequence's state: its KV (see the module) and the tokens fed so far. A Model
    evaluates into the cache it holds in `model.kv`; a server gives each parallel sequence one of
    these (Model.new_kvs) over the shared weights and scratch. block, index: the stacked KV this
    cache is row `index` of, when made with others for Model.decode_batch. history holds -1
    where embeddings (an image) were fed instead of tokens."""

    def __init__(self, block, index=0):
        self.block, self.index = block, index
        self.arrays = row(block, index)
        self.n_past = 0
        self.history = []
        # M-RoPE: an image of nx x ny rows takes nx * ny cells but advances the rotary position
        # by max(nx, ny); (first cell after it, rotary position minus cell from there on)
        self.rope_shifts = []

    @property
    def rope_shift(self):
        """The rotary position of the next cell minus its index (0 but after M-RoPE images)."""
        return self.rope_shifts[-1][1] if self.rope_shifts else 0

    def reset(self):
        self.forget(0)

    def forget(self, n_keep):
        """Drop the positions from n_keep on (the next eval writes after the rest)."""
        kv = self.arrays
        forget(kv.pos, kv.heads, GLOBAL, n_keep)
        forget(kv.pos_swa, kv.heads, WINDOW, n_keep)
        self.n_past = n_keep
        self.history = self.history[:n_keep]
        self.rope_shifts = [(cell, shift) for cell, shift in self.rope_shifts if cell <= n_keep]

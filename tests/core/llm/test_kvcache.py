"""Cell placement in the KV cache as llama.cpp's find_slot / apply_ubatch / seq_rm do it for
one sequence (its attention sums keys in cell order, so the cells decide the bits)."""
import numpy as np

from dasllama.core.llm.kvcache import GLOBAL, WINDOW, forget, place, ring_cells, window_intact


def _place(kpos, heads, which, positions, n_swa):
    cells = np.empty(len(positions), np.int64)
    assert place(kpos, heads, which, np.asarray(positions, np.int64), n_swa, cells)
    return cells.tolist()


def test_ring_size_is_window_plus_batch_padded_to_256():
    assert ring_cells(4096, 512, 512) == 1024
    assert ring_cells(512, 512, 512) == 512          # never more than the context
    assert ring_cells(4096, 4096, 512) == 4096       # gemma2's window at 4096 cells
    assert ring_cells(4096, 100, 30) == 256
    assert ring_cells(4096, 0, 512) == 0


def test_a_window_ring_reuses_cells_out_of_the_window_from_the_start():
    kpos, heads = np.full(8, -1, np.int64), np.zeros(2, np.int64)
    assert _place(kpos, heads, WINDOW, range(6), 4) == list(range(6))
    assert _place(kpos, heads, WINDOW, [6], 4) == [6]
    assert _place(kpos, heads, WINDOW, [7], 4) == [7]
    # the head passed the end: back to cell 0, whose position 0 is out of the window of 8
    assert _place(kpos, heads, WINDOW, [8], 4) == [0]
    assert _place(kpos, heads, WINDOW, [9, 10, 11], 4) == [1, 2, 3]
    assert kpos.tolist() == [8, 9, 10, 11, 4, 5, 6, 7]
    # the cells after the head hold positions 4 and 5, both out of the window of 12
    assert _place(kpos, heads, WINDOW, [12, 13], 4) == [4, 5]


def test_overwriting_a_position_drops_every_older_one():
    kpos, heads = np.full(6, -1, np.int64), np.zeros(2, np.int64)
    _place(kpos, heads, WINDOW, range(6), 2)
    # head at 6 wraps to 0; position 0 goes, and with it nothing older; then 1 goes too
    assert _place(kpos, heads, WINDOW, [6, 7], 2) == [0, 1]
    assert sorted(p for p in kpos.tolist() if p >= 0) == [2, 3, 4, 5, 6, 7]


def test_global_cache_is_filled_in_order_and_forget_moves_the_head_back():
    kpos, heads = np.full(16, -1, np.int64), np.zeros(2, np.int64)
    assert _place(kpos, heads, GLOBAL, range(10), 0) == list(range(10))
    forget(kpos, heads, GLOBAL, 4)
    assert kpos[:5].tolist() == [0, 1, 2, 3, -1] and heads[GLOBAL] == 4
    assert _place(kpos, heads, GLOBAL, [4, 5], 0) == [4, 5]
    # far fewer used cells than the head: the search starts again from cell 0
    forget(kpos, heads, GLOBAL, 0)
    heads[GLOBAL] = 9
    assert _place(kpos, heads, GLOBAL, [0], 0) == [0]


def test_a_full_cache_has_no_room():
    kpos, heads = np.full(4, -1, np.int64), np.zeros(2, np.int64)
    _place(kpos, heads, GLOBAL, range(4), 0)
    cells = np.empty(1, np.int64)
    assert not place(kpos, heads, GLOBAL, np.array([4]), 0, cells)


def test_window_intact_until_the_keys_the_next_position_sees_are_overwritten():
    pos = np.array([8, 9, 10, 11, 4, 5, 6, 7], np.int64)
    assert window_intact(pos, 12, 4)          # 9, 10, 11 are held
    assert window_intact(pos, 8, 4)           # 5, 6, 7
    assert not window_intact(pos, 6, 4)       # 3 was overwritten
    assert window_intact(np.zeros(0, np.int64), 6, 4)

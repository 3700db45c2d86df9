"""Every matmul kernel reads and writes only inside the buffers it is given (issue 27).

Each variant of each format, and each row-group copy's kernel, runs on weights, activation
buffers and an output that border an unreadable page at one end, then at the other, for shapes
with row and token tails: a load or store past a buffer faults (the xdist worker of .ci/run
dies and this test fails), and the product must still equal the reference's."""
import numpy as np
import pytest

from dasllama.kernels import actq as A
from dasllama.kernels import matmul as M
from dasllama.kernels import quants as Q
from dasllama.kernels import rowgroups

from .blocks import random_weights
from .fence import fenced

SIDES = ("start", "end")
# (rows, tokens): one row, one token, row and token tails of every tile, a batch past a chunk
SHAPES = [(1, 1), (19, 1), (19, 2), (19, 7), (37, 13)]


def _inputs(qtype, n_rows, n_cols, n_tokens, seed):
    w = random_weights(qtype, n_rows, n_cols, seed=seed)
    x = np.random.default_rng(seed).standard_normal((n_tokens, n_cols)).astype(np.float32)
    bufs = A.act_buffers(n_tokens, n_cols)
    A.quantize_act(A.act_kind(qtype), x, *bufs)
    return w, bufs


def _run_fenced(kernel, w, n_rows, n_cols, bufs, n_tokens, side):
    out = fenced(np.full((n_tokens, n_rows), np.nan, np.float32), side)
    kernel(fenced(w, side), n_rows, n_cols, *(fenced(b, side) for b in bufs), n_tokens, out)
    return np.array(out)


@pytest.mark.parametrize("qtype", [pytest.param(q, id=Q.type_name(q)) for q in Q.SUPPORTED])
def test_every_variant_stays_inside_its_buffers(qtype):
    n_cols = 512
    for n_rows, n_tokens in SHAPES:
        w, bufs = _inputs(qtype, n_rows, n_cols, n_tokens, seed=n_rows + n_tokens)
        ref = np.empty((n_tokens, n_rows), np.float32)
        M.matmul_ref(qtype, w, n_rows, n_cols, *bufs, n_tokens, ref)
        for name, _ in M.VARIANTS[qtype]:
            for side in SIDES:
                got = _run_fenced(M.build_kernel(qtype, name), w, n_rows, n_cols, bufs, n_tokens, side)
                np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32),
                                              err_msg=f"{name} {n_rows}x{n_tokens} fenced at the {side}")


@pytest.mark.parametrize("qtype,copy", [pytest.param(q, c, id=f"{Q.type_name(q)}-{c}") for q, c in rowgroups.COPIES])
def test_every_copy_kernel_stays_inside_its_buffers(qtype, copy):
    n_cols = 1024 if qtype in (Q.Q4_K, Q.Q6_K) else 512
    width = rowgroups.WIDTHS[copy]
    layout = rowgroups.copy_layout(qtype, width, copy)
    first = rowgroups.min_tokens(layout)   # Q6_K's x8/x16 copies fold T >= 8 only
    last = rowgroups.decode_tokens(layout) if layout in rowgroups.PACKED else n_cols   # the p16 ones T < 8
    for n_rows, n_tokens in [(width, 1), (width, 2), (2 * width, 9), (3 * width, 33)]:
        n_tokens = min(max(n_tokens, first), last)
        w, bufs = _inputs(qtype, n_rows, n_cols, n_tokens, seed=n_rows + n_tokens)
        if qtype == Q.Q8_0:   # the offset copies take no -128 quant (ggml's quantiser writes none)
            q = w.reshape(-1, 34)[:, 2:]
            q[q == 0x80] = 0x81
        ref = np.empty((n_tokens, n_rows), np.float32)
        M.matmul_ref(qtype, w, n_rows, n_cols, *bufs, n_tokens, ref)
        packed = rowgroups.make_copy(qtype, w, n_rows, n_cols, name=copy)
        kernel = rowgroups.KERNELS[rowgroups.copy_layout(qtype, n_rows, copy)]
        for side in SIDES:
            got = _run_fenced(kernel, packed, n_rows, n_cols, bufs, n_tokens, side)
            np.testing.assert_array_equal(got.view(np.uint32), ref.view(np.uint32),
                                          err_msg=f"{n_rows}x{n_tokens} fenced at the {side}")

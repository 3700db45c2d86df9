"""Quantised matmul: out[t, r] = dot(W[r], x[t]) for GGUF weights as they lie in the file.

One template builds every kernel: `build_kernel(qtype, variant)` takes a tile plan from
VARIANTS (rows per tile, tokens per tile, and the block-dot engine: "ref" plain loops, or
"simd" LLVM vector IR from simd.py) and returns an @njit(parallel=True) kernel with prange
over row tiles. All integer sums are exact and every engine folds them as ggml does (see
dots.py), so all variants of one format give bit-identical results: the tuner can race them
freely, and tests assert equality with the plain reference.

`matmul` dispatches on qtype to the active variant of each format; it is numba-callable from
inside a compiled decode step. `set_active` swaps a variant and rebuilds `matmul` (do it
before compiling callers, which freeze the dispatcher they saw).
"""
import hashlib
import os

import numpy as np
import numba
from numba import njit

from . import quants as Q
from . import simd
from .actq import act_buffers, act_kind, quantize_act
from .dots import dot_ref
from .quants import (BF16, F16, F32, JIT, Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K,
                     Q8_0, SUPPORTED, dequantize, dequantize_row, row_bytes)

__all__ = ["act_kind", "act_buffers", "quantize_act", "matmul", "matmul_f32", "dequantize",
           "dequantize_row", "VARIANTS", "ACTIVE", "build_kernel", "set_active", "matmul_ref",
           "SOURCES_STAMP"]

# Tile plans, one list per format; the first is the default until a tuner says otherwise.
#   rows/tokens: register tile (rows x tokens share each weight/activation load)
#   engine: "ref" plain numba loops (dots.py), "simd" vector IR (simd.py)
_REF = [("ref_1x1", dict(engine="ref", rows=1, tokens=1)),
        ("ref_4x4", dict(engine="ref", rows=4, tokens=4))]
VARIANTS = {q: list(_REF) for q in SUPPORTED}
for _q in simd.FORMATS:
    VARIANTS[_q] = simd.variants(_q) + VARIANTS[_q]
ACTIVE = {q: VARIANTS[q][0][0] for q in SUPPORTED}

_built = {}


def build_kernel(qtype, name):
    """The @njit(parallel=True) kernel(w, R, C, xq, xd, xa, xf, T, out) of one variant."""
    key = (qtype, name)
    if key not in _built:
        params = dict(VARIANTS[qtype])[name]
        if params["engine"] == "ref":
            _built[key] = _make_ref_kernel(qtype, params["rows"], params["tokens"])
        else:
            _built[key] = simd.make_kernel(qtype, **{k: v for k, v in params.items() if k != "engine"})
    return _built[key]


def _make_ref_kernel(qtype, rows, tokens):
    @njit(**JIT, parallel=True)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        rb = row_bytes(qtype, n_cols)
        for tile in numba.prange((n_rows + rows - 1) // rows):
            r0 = tile * rows
            r1 = min(n_rows, r0 + rows)
            for t0 in range(0, n_tokens, tokens):
                for r in range(r0, r1):
                    for t in range(t0, min(n_tokens, t0 + tokens)):
                        out[t, r] = dot_ref(qtype, w, r * rb, n_cols, xq[t], xd[t], xa[t], xf[t])
    return kernel


@njit(**JIT, parallel=True)
def matmul_ref(qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """The plain reference: one dot_ref per (row, token)."""
    rb = row_bytes(qtype, n_cols)
    for r in numba.prange(n_rows):
        for t in range(n_tokens):
            out[t, r] = dot_ref(qtype, w, r * rb, n_cols, xq[t], xd[t], xa[t], xf[t])


def _sources_stamp():
    """Hash of this package's kernel sources. numba keys a closure's cache entry on its cell
    values, so capturing this makes `matmul` recompile when any kernel file changes (numba
    itself only watches the file a function is defined in)."""
    h = hashlib.sha256()
    here = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(os.listdir(here)):
        if name.endswith(".py"):
            with open(os.path.join(here, name), "rb") as f:
                h.update(f.read())
    return int.from_bytes(h.digest()[:7], "little")


SOURCES_STAMP = _sources_stamp()


def _build_matmul():
    k = {q: build_kernel(q, ACTIVE[q]) for q in SUPPORTED}
    stamp = SOURCES_STAMP
    k_f32, k_f16, k_bf16, k_q8_0, k_q4_0, k_q4_1 = k[F32], k[F16], k[BF16], k[Q8_0], k[Q4_0], k[Q4_1]
    k_q5_0, k_q5_1, k_q2_k, k_q3_k, k_q4_k, k_q5_k, k_q6_k = (
        k[Q5_0], k[Q5_1], k[Q2_K], k[Q3_K], k[Q4_K], k[Q5_K], k[Q6_K])

    @njit(**JIT)
    def matmul(qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        """out[:n_tokens, :n_rows] (T, R) = W (R, C) of `qtype` times the quantised x rows."""
        _ = stamp  # noqa: F841  (part of the cache key, see _sources_stamp)
        if qtype == Q8_0:
            k_q8_0(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q4_K:
            k_q4_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q6_K:
            k_q6_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q5_0:
            k_q5_0(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q4_0:
            k_q4_0(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q4_1:
            k_q4_1(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q5_1:
            k_q5_1(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q2_K:
            k_q2_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q3_K:
            k_q3_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == Q5_K:
            k_q5_k(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == F16:
            k_f16(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == BF16:
            k_bf16(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif qtype == F32:
            k_f32(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    return matmul


matmul = _build_matmul()


def set_active(qtype, name):
    """Make variant `name` the one `matmul` uses for `qtype`; returns the new `matmul`."""
    global matmul
    if name not in dict(VARIANTS[qtype]):
        raise KeyError(f"no variant {name!r} for type {qtype}; have {[n for n, _ in VARIANTS[qtype]]}")
    ACTIVE[qtype] = name
    matmul = _build_matmul()
    return matmul


def matmul_f32(qtype, w, n_rows, n_cols, x, variant=None):
    """(T, R) = x (T, C) f32 times W (R, C): quantises x as ggml would, then multiplies."""
    if n_cols % Q.BLOCK_ELEMS[qtype]:
        raise ValueError(f"{n_cols} columns is not a whole number of {Q.type_name(qtype)} blocks")
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_cols)
    w = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
    n_tokens = x.shape[0]
    xq, xd, xa, xf = act_buffers(n_tokens, n_cols)
    quantize_act(act_kind(qtype), x, xq, xd, xa, xf)
    out = np.empty((n_tokens, n_rows), np.float32)
    if variant is None:
        matmul(qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    else:
        build_kernel(qtype, variant)(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    return out

"""Matmul speed per format and variant: GB/s of weights streamed at T=1, GFLOP/s at T=512.

    python -m dasllama.kernels.bench_matmul [Q8_0 Q4_K ...] [--variants] [--full]

Shapes are Gemma 3 270M's: 640x2048 (ffn_down), 2048x640 (ffn_up/gate), 262144x640 (the
tied output); K-quants, whose super-blocks need 256 | C, get 32768x2048 as their large,
memory-bound case instead. T=512 on the large matrices takes seconds, so it needs --full. The
best of a few repeats is printed: the machine is shared, and the minimum is the least
disturbed run. Random weights: speed does not depend on the values.
"""
import argparse
import sys
import time

import numpy as np

from . import matmul as M
from . import quants as Q

SHAPES = ((640, 2048), (2048, 640), (262144, 640), (32768, 2048))


def _weights(qtype, n_rows, n_cols, rng):
    n_blocks = n_rows * n_cols // int(Q.BLOCK_ELEMS[qtype])
    blocks = rng.integers(0, 256, (n_blocks, int(Q.BLOCK_BYTES[qtype])), dtype=np.uint8)
    if qtype in (Q.F16, Q.BF16, Q.F32):
        vals = rng.standard_normal(n_rows * n_cols).astype(np.float32)
        if qtype == Q.F16:
            return vals.astype(np.float16).view(np.uint8)
        if qtype == Q.F32:
            return vals.view(np.uint8)
        return (vals.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)  # BF16, truncated
    for off in Q.F16_FIELDS[qtype]:  # sane scales: no inf/NaN/denormal arithmetic
        blocks[:, off:off + 2] = np.array([0.01], np.float16).view(np.uint8)
    return blocks.reshape(-1)


def _best(fn, repeats, budget=2.0):
    fn()
    best = float("inf")
    start = time.perf_counter()
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
        if time.perf_counter() - start > budget:
            break
    return best


def bench(qtype, names, full, out=sys.stdout):
    rng = np.random.default_rng(0)
    shapes = [s for s in SHAPES if s[1] % Q.BLOCK_ELEMS[qtype] == 0]
    if len(shapes) == 4:
        shapes.pop()  # one large matrix per format is enough
    for n_rows, n_cols in shapes:
        w = _weights(qtype, n_rows, n_cols, rng)
        for n_tokens in (1, 512):
            if n_tokens == 512 and n_rows > 10000 and not full:
                continue
            x = rng.standard_normal((n_tokens, n_cols)).astype(np.float32)
            xq, xd, xa, xf = M.act_buffers(n_tokens, n_cols)
            M.quantize_act(M.act_kind(qtype), x, xq, xd, xa, xf)
            res = np.empty((n_tokens, n_rows), np.float32)
            for name in names:
                kern = M.build_kernel(qtype, name)
                sec = _best(lambda: kern(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, res),
                            repeats=20 if n_tokens == 1 else 3)
                if n_tokens == 1:
                    fig = f"{w.nbytes / sec / 1e9:7.2f} GB/s"
                else:
                    fig = f"{2 * n_rows * n_cols * n_tokens / sec / 1e9:7.1f} GFLOP/s"
                print(f"{Q.type_name(qtype):5s} {n_rows:6d}x{n_cols:<5d} T={n_tokens:<3d} {name:12s} "
                      f"{sec * 1e3:9.3f} ms {fig}", file=out, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("types", nargs="*", help="type names (default: every supported type)")
    ap.add_argument("--variants", action="store_true", help="every variant, not just the active one")
    ap.add_argument("--full", action="store_true", help="also T=512 on the large matrix")
    args = ap.parse_args()
    qtypes = [getattr(Q, t.upper()) for t in args.types] or list(Q.SUPPORTED)
    for q in qtypes:
        active = dict.fromkeys(M.ACTIVE[q, ph] for ph in M.PHASES)
        names = [n for n, _ in M.VARIANTS[q]] if args.variants else list(active)
        bench(q, names, args.full)


if __name__ == "__main__":
    main()

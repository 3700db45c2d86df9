"""The IR block dots by format, as simd.py's tiles take them: each format's gemv fold (its
BLOCK_DOT, kernels/formats/<name>.py) and the folds of llama.cpp's batch paths where they
differ from it: its repacked gemm, one fma per chunk of a block (Q4_K, Q2_K), and its tiled
K-quant matmul, one exact integer sum per block pair (dots.dot_tiled); dots.gemm_tokens says
which tokens take which. Every table here is generated from the registry (formats.FORMATS)."""
from . import formats
from .blockdots import Scalar, Wide8
from .ir import I32, V8F32, V8I32


def _pair_products(g, row_vals, tok_vals, ids):
    """<8 x f32> whose lane l is row_vals[i // n] * tok_vals[i % n] for the l-th pair i of
    `ids` (pairs row-major, n = len(tok_vals)), lanes past them 0: the tile's few row and
    token scalars gathered once and spread by shuffles, then one vector multiply (the same
    products as one scalar multiply per pair, which with the gathers took ~32 ops)."""
    n = len(tok_vals)
    rows = sorted({i // n for i in ids})
    toks = sorted({i % n for i in ids})
    rv = g.gather_scalars([row_vals[r] for r in rows])      # lane len(rows): 0 when it exists
    tv = g.gather_scalars([tok_vals[t] for t in toks])
    pad = 8 - len(ids)                                        # only when fewer than 8 pairs
    ri = [rows.index(i // n) for i in ids] + [len(rows)] * pad
    ti = [toks.index(i % n) for i in ids] + [len(toks)] * pad
    return g.b.fmul(g.shuffle(rv, rv, ri), g.shuffle(tv, tv, ti))


class _ScalarChunks(Scalar):
    """A Scalar format as llama.cpp's repacked gemm folds it: per pair one fma per chunk of
    a block, ints and mins alike (ggml_gemm_q4_K_8x8_q8_K: 4 chunks of 64 elements,
    ggml_gemm_q2_K_8x8_q8_K: 2 of 128), in chunk order."""

    def __init__(self, fmt, n_chunks):
        self.fmt, self.n_chunks = fmt, n_chunks
        self.row, self.tok = fmt.row, fmt.tok

    def fold_tile(self, g, R, X, acc):
        b = g.b
        pairs = [(R[r], X[t]) for r in range(len(R)) for t in range(len(X))]
        new = list(acc)
        dx = [x[1] for x in X]
        for c in range(0, len(pairs), 8):
            chunk = pairs[c:c + 8]
            ids = range(c, c + len(chunk))
            d = _pair_products(g, [r[0] for r in R], dx, ids)        # dw * dx per pair
            dmin = _pair_products(g, [r[1] for r in R], dx, ids)     # dmin * dx per pair
            acc_s, acc_m = new[c // 4], new[c // 4 + 1]
            min_sums = self.fmt.chunk_min_sums(g, chunk, self.n_chunks)
            for k in range(self.n_chunks):
                parts = [self.fmt.chunk_parts(g, r, x, k, self.n_chunks) for r, x in chunk]
                sums = b.sitofp(g.sum_lanes_of_each([p[0] for p in parts], V8I32), V8F32)
                acc_s = g.fma(sums, d, acc_s)
                if min_sums is None:
                    min_sums_k = g.sum_lanes_of_each([p[1] for p in parts], V8F32)
                else:
                    min_sums_k = min_sums[k]
                acc_m = g.fma(min_sums_k, dmin, acc_m)
            new[c // 4], new[c // 4 + 1] = acc_s, acc_m
        return new


class _Tiled:
    """A K-quant as llama.cpp's tiled matmul folds it (dots.dot_tiled): per pair and block,
    res = f32(s1)*dw, res = fma(-dmin, f32(s2), res), acc = fma(res, dx, acc). Pairs are
    folded 8 at a time in the lanes of one vector, as _Scalar does."""

    def __init__(self, fmt):
        self.fmt = fmt
        self.row, self.tok = fmt.row, fmt.tok

    def init_tile(self, g, n_pairs):
        return [g.c(V8F32, 0.0)] * ((n_pairs + 7) // 8)

    def fold_tile(self, g, R, X, acc):
        b = g.b
        parts = [self.fmt.block_ints(g, R[r], X[t]) for r in range(len(R)) for t in range(len(X))]
        new = []
        for c in range(0, len(parts), 8):
            chunk = parts[c:c + 8]
            ints = b.sitofp(g.sum_lanes_of_each([p[0] for p in chunk], V8I32), V8F32)
            res = b.fmul(ints, g.gather_scalars([p[2] for p in chunk]))
            if chunk[0][1] is not None:
                mins = g.sum_lanes_of_each([p[1] for p in chunk], V8F32)   # exact integers
                res = g.fma(b.fneg(g.gather_scalars([p[3] for p in chunk])), mins, res)
            new.append(g.fma(res, g.gather_scalars([p[4] for p in chunk]), acc[c // 8]))
        return new

    def finish_tile(self, g, acc):
        return [g.b.extract_element(v, g.c(I32, i)) for v in acc for i in range(8)]


# qtype -> the IR block dot of its gemv/vec_dot, for every integer format
FMTS = {fmt.ID: fmt.BLOCK_DOT for fmt in formats.FORMATS if hasattr(fmt, "BLOCK_DOT")}
# The formats whose dots without VNNI take unsigned quants, and their offset (see q5_0.BlockDot).
UNSIGNED_OFFSET = {q: dot.offset for q, dot in FMTS.items() if getattr(dot, "offset", 0)}
# Those whose VNNI dots take them unsigned too, starting vpdpbusd from -offset * the token's
# sums of four (simd.offset_quad_sums).
VNNI_UNSIGNED = frozenset(q for q, dot in FMTS.items() if getattr(dot, "vnni_unsigned", False))
# The formats with a 512-bit two-pairs-per-vector tile (vpdpbusd on zmm; gemv fold only).
WIDE_FMTS = {fmt.ID: Wide8(fmt.BLOCK_DOT) for fmt in formats.FORMATS if getattr(fmt, "WIDE", False)}
# The formats whose batch paths fold unlike their gemv/vec_dot (dots.gemm_tokens says which
# tokens take which): the repacked gemm (chunks of GEMM_CHUNK elements), and the tiled K-quant
# matmul.
GEMM_FMTS = {fmt.ID: _ScalarChunks(fmt.GEMM_DOT, fmt.BLOCK_ELEMS // fmt.GEMM_CHUNK)
             for fmt in formats.FORMATS if hasattr(fmt, "GEMM_DOT")}
TILED_FMTS = {fmt.ID: _Tiled(fmt.BLOCK_DOT) for fmt in formats.FORMATS if getattr(fmt, "K_QUANT", False)}

"""IR block folds of the batch paths that fold unlike a format's gemv (blockdots.py has the
formats): llama.cpp's repacked gemm, one fma per chunk of a block (Q4_K, Q2_K), and its tiled
K-quant matmul, one exact integer sum per block pair (dots.dot_tiled); dots.gemm_tokens says
which tokens take which."""
from .blockdots import FMTS, Q2_KFmt, Q4_KFmt, _Scalar
from .ir import I32, V8F32, V8I32
from .quants import Q2_K, Q3_K, Q4_K, Q5_K, Q6_K


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


class _ScalarChunks(_Scalar):
    """A _Scalar format as llama.cpp's repacked gemm folds it: per pair one fma per chunk of
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


def _q4_k_chunk_parts(self, g, R, X, k, n_chunks):
    """Int lanes of 32-groups 2k, 2k+1 (the gemm's `sb`); their min products come from
    chunk_min_sums."""
    _, _, scv, _, groups = R
    qx, _, _ = X
    lanes = g.b.add(g.maddwd(g.maddubs(groups[2 * k], qx[2 * k]), scv[2 * k]),
                    g.maddwd(g.maddubs(groups[2 * k + 1], qx[2 * k + 1]), scv[2 * k + 1]))
    return lanes, None


def _q4_k_chunk_min_sums(self, g, pairs, n_chunks):
    """Per chunk k, <8 x f32> whose lane p is pair p's m[2k] + m[2k+1], m = mins * bsums of
    its 32-groups (integers below 2**24, so exact): the sum the gemm folds per chunk, as one
    level of pairwise adds and a transpose, ~24 vector ops where summing all 8 lanes of each
    chunk's products masked to its 2 took ~120."""
    b = g.b
    ms = [b.fmul(r[3], x[2]) for r, x in pairs] + [g.c(V8F32, 0.0)] * (8 - len(pairs))
    even, odd = list(range(0, 16, 2)), list(range(1, 16, 2))
    # level[i] lanes 0..3: chunks 0..3 of pair 2i; lanes 4..7: those of pair 2i + 1
    level = [b.fadd(g.shuffle(ms[i], ms[i + 1], even), g.shuffle(ms[i], ms[i + 1], odd))
             for i in range(0, 8, 2)]
    out = []
    for k in range(n_chunks):
        lo = g.shuffle(level[0], level[1], [k, 4 + k, 8 + k, 12 + k])
        hi = g.shuffle(level[2], level[3], [k, 4 + k, 8 + k, 12 + k])
        out.append(g.shuffle(lo, hi, range(8)))
    return out


def _no_chunk_min_sums(self, g, pairs, n_chunks):
    return None


def _q2_k_chunk_parts(self, g, R, X, k, n_chunks):
    """Int lanes of 32-groups 4k..4k+3 and the min products of 16-sub-blocks 8k..8k+7."""
    b = g.b
    _, _, scv, mins, groups = R
    qx, _, bsums = X
    lanes = None
    for j in range(4 * k, 4 * k + 4):
        v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
        lanes = v if lanes is None else b.add(lanes, v)
    m16 = b.fmul(mins, bsums)
    return lanes, g.shuffle(m16, m16, range(8 * k, 8 * k + 8))


Q4_KFmt.chunk_parts = _q4_k_chunk_parts
Q4_KFmt.chunk_min_sums = _q4_k_chunk_min_sums
Q2_KFmt.chunk_parts = _q2_k_chunk_parts
Q2_KFmt.chunk_min_sums = _no_chunk_min_sums


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


# The formats whose batch paths fold unlike their gemv/vec_dot (dots.gemm_tokens says which
# tokens take which): the repacked gemm, and the tiled K-quant matmul.
GEMM_FMTS = {Q4_K: _ScalarChunks(FMTS[Q4_K], 4), Q2_K: _ScalarChunks(Q2_KFmt(), 2)}
TILED_FMTS = {q: _Tiled(FMTS[q]) for q in (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)}

"""The IR block-dot engines of simd.py's tiles, and the pieces formats share: each integer
format's own block dot is its `BlockDot` (kernels/formats/<name>.py), built on one of these.

A format gives `row(g, p)`: what one weight row's block at byte pointer p decodes to (32-byte
groups of integer quants, scales); `tok(g, x, xd, xa, b)`: one activation row's block b;
`pair(g, R, X, acc)` (Lanes8) or `parts(g, R, X)` (Scalar): the accumulators after folding
one (row, token) block product, or its parts. The integer lanes are ggml's
(pmaddubsw/pmaddwd, lane l = elements 4l..4l+3 of each group) and the folds are those of
dots.py, so results match the plain reference bit for bit.
"""
from llvmlite import ir

from .ir import I32, I64, V8F32, V8I32, V16F32, V16I8, V16I16, V16I32, V32I8, F32T, vec, I8


class Lanes8:
    """Per pair acc = (acc8 <8 x f32>, summs f32); result hsum8(acc8) + summs."""

    def init_tile(self, g, n_pairs):
        return [g.c(V8F32, 0.0), g.c(F32T, 0.0)] * n_pairs

    def fold_tile(self, g, R, X, acc):
        new = []
        for r in range(len(R)):
            for t in range(len(X)):
                k = 2 * (r * len(X) + t)
                new += list(self.pair(g, R[r], X[t], tuple(acc[k:k + 2])))
        return new

    def finish_tile(self, g, acc):
        return [g.b.fadd(g.hsum8(acc[k]), acc[k + 1]) for k in range(0, len(acc), 2)]


class Scalar:
    """One f32 sum and one f32 min sum per pair, acc - acc_min at the end (ggml's repacked
    gemv). Pairs are folded 8 at a time: their int32 lane vectors are summed across lanes into
    one vector (exact), then one vector fma does 8 scalar folds, lane by lane as ggml's."""

    def init_tile(self, g, n_pairs):
        n_vec = (n_pairs + 7) // 8
        return [g.c(V8F32, 0.0)] * (2 * n_vec)

    def fold_tile(self, g, R, X, acc):
        b = g.b
        parts = [self.parts(g, R[r], X[t]) for r in range(len(R)) for t in range(len(X))]
        new = []
        for c in range(0, len(parts), 8):
            chunk = parts[c:c + 8]
            acc_s, acc_m = acc[c // 4], acc[c // 4 + 1]
            sums = b.sitofp(g.sum_lanes_of_each([p[0] for p in chunk], V8I32), V8F32)
            new.append(g.fma(sums, g.gather_scalars([p[2] for p in chunk]), acc_s))
            if chunk[0][1] is None:
                new.append(acc_m)
            else:
                mins = g.sum_lanes_of_each([p[1] for p in chunk], V8F32)  # exact integers
                new.append(g.fma(mins, g.gather_scalars([p[3] for p in chunk]), acc_m))
        return new

    def finish_tile(self, g, acc):
        out = []
        for v in range(0, len(acc), 2):
            diff = g.b.fsub(acc[v], acc[v + 1])
            out += [g.b.extract_element(diff, g.c(I32, i)) for i in range(8)]
        return out


class Wide8:
    """A Q8_0/Q5_0 block dot on 512-bit vectors, two pairs per vector: lanes 0-7 are the
    pair (r, t0), lanes 8-15 (r, t1), each lane ggml's (elements 4l..4l+3). One vpdpbusd
    forms both pairs' int lanes: the tokens' quants offset to unsigned (x + 128, shared by the
    tile's rows) against the row's quants twice, starting from -128*sum4(w) (itself one
    vpdpbusd, shared by the tile's tokens), which leaves exactly sum4(x*w). The fold is then
    ggml's, lane for lane: acc = fma(dw*dx, f32(lanes), acc), hsum8 of each half at the end."""

    def __init__(self, fmt):
        self.fmt = fmt

    def row(self, g, p):
        b = g.b
        d, q = self.fmt.quants(g, p)
        q2 = b.bitcast(g.shuffle(q, q, list(range(32)) * 2), V16I32)
        offset = g.dpbusd(g.c(V16I32, 0), g.c(V16I32, 0x80808080 - (1 << 32)), q2)
        return g.splat(d, 16), q2, b.sub(g.c(V16I32, 0), offset)

    def tok(self, g, x, xd, xa, b):
        (q,), d = tok_q8(g, x, xd, xa, b, 32)
        return q, d

    def init_tile(self, g, n_pairs):
        assert n_pairs % 2 == 0
        return [g.c(V16F32, 0.0)] * (n_pairs // 2)

    def fold_tile(self, g, R, X, acc):
        b = g.b
        n_tp = len(X) // 2
        new = list(acc)
        for j in range(n_tp):
            (q0, d0), (q1, d1) = X[2 * j], X[2 * j + 1]
            u = b.bitcast(b.xor(g.shuffle(q0, q1, range(64)), g.c(vec(I8, 64), 0x80 - 256)), V16I32)
            dx = g.shuffle(g.splat(d0, 8), g.splat(d1, 8), range(16))
            for r, (dw, qw, start) in enumerate(R):
                lanes = g.dpbusd(start, u, qw)
                k = r * n_tp + j
                new[k] = g.fma(b.fmul(dw, dx), b.sitofp(lanes, V16F32), acc[k])
        return new

    def finish_tile(self, g, acc):
        out = []
        for v in acc:
            out += [g.hsum8(g.shuffle(v, v, range(8))), g.hsum8(g.shuffle(v, v, range(8, 16)))]
        return out


def tok_q8(g, x, xd, xa, b, be):
    """The token's int8 groups of block b and its block scale."""
    base = g.b.mul(b, g.c(I64, be))
    groups = [g.load(x, g.b.add(base, g.c(I64, 32 * j)), V32I8) for j in range(be // 32)]
    d = g.f32(xd, g.b.mul(b, g.c(I64, 4)))
    return groups, d


def tok_unsigned(g, x, xd, xa, b):
    """A token's block for the unsigned Q4_0/Q5_0 dots: its quants, scale and the int16
    pair sums times the format's offset (simd.offset_sums: xa points there)."""
    (q,), d = tok_q8(g, x, xd, xa, b, 32)
    return q, d, g.load(xa, g.b.mul(b, g.c(I64, 32)), V16I16)


def lanes_unsigned(g, uw, qx, sums):
    """ggml's int32 lanes of q*x from the unsigned quants u = q + offset: pmaddubsw's u*x
    pairs less offset*(x pair sums), then pmaddwd."""
    return g.maddwd(g.b.sub(g.maddubs(uw, qx), sums), g.c(V16I16, 1))


def tok_q8k(g, x, xd, xa, b):
    groups, d = tok_q8(g, x, xd, xa, b, 256)
    bsums = g.load(xa, g.b.mul(b, g.c(I64, 64)), V16F32)  # 16 exact int16 sums as f32
    return groups, d, bsums


def words_to_bytes(g, words):
    """4 i32 -> <16 x i8> (little-endian bytes of the words in order)."""
    v = ir.Constant(vec(I32, 4), ir.Undefined)
    for i, w in enumerate(words):
        v = g.b.insert_element(v, w, g.c(I32, i))
    return g.b.bitcast(v, V16I8)


def pair_scales(g, sc16):
    """16 i16 sub-block scales -> per 32-group <16 x i16> (8 lanes of sc[2j], 8 of sc[2j+1])."""
    return [g.shuffle(sc16, sc16, [2 * j] * 8 + [2 * j + 1] * 8) for j in range(8)]

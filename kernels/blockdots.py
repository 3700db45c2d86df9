"""IR block dots per weight format, for the tile loops of simd.py.

A format gives `row(g, p)`: what one weight row's block at byte pointer p decodes to (32-byte
groups of integer quants, scales); `tok(g, x, xd, xa, b)`: one activation row's block b;
`pair(g, R, X, acc)`: the accumulators after folding one (row, token) block product; `init`
and `finish`. The integer lanes are ggml's (pmaddubsw/pmaddwd, lane l = elements 4l..4l+3 of
each group) and the folds are those of dots.py, so results match the plain reference bit for
bit.
"""
from llvmlite import ir

from .ir import F32T, HALF, I8, I32, I64, V8F32, V8I32, V16F32, V16I8, V16I16, V16I32, V32I8, vec
from .dots import REPACK_Q2_K
from .quants import Q2_K, Q3_K, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0


class _Lanes8:
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


class _Scalar:
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


def _tok_q8(g, x, xd, xa, b, be):
    """The token's int8 groups of block b and its block scale."""
    base = g.b.mul(b, g.c(I64, be))
    groups = [g.load(x, g.b.add(base, g.c(I64, 32 * j)), V32I8) for j in range(be // 32)]
    d = g.f32(xd, g.b.mul(b, g.c(I64, 4)))
    return groups, d


class Q8_0Fmt(_Lanes8):
    # scales are splatted once per row and per token; the per-pair product is then one
    # vector multiply, lane for lane the scalar dw*dx ggml broadcasts
    def quants(self, g, p):
        """The block's f16 scale as f32 and its 32 signed quants."""
        return g.f16(p, 0), g.load(p, 2, V32I8)

    def row(self, g, p):
        d, q = self.quants(g, p)
        return g.splat(d, 8), q, g.psign(q, q)

    def tok(self, g, x, xd, xa, b):
        (q,), d = _tok_q8(g, x, xd, xa, b, 32)
        return q, g.splat(d, 8)

    def pair(self, g, R, X, acc):
        dw, qw, aw = R
        qx, dx = X
        return (g.fma(g.b.fmul(dw, dx), g.cvt(g.lanes_signed(qw, aw, qx)), acc[0]), acc[1])


class Q5_0Fmt(Q8_0Fmt):
    """Q5_0 against Q8_0 activations. Without VNNI the quants stay unsigned, u = q + 16 in
    [0, 31], so pmaddubsw takes them as they unpack (no psign of the row, none of the token
    by the row's signs, no -16): its int16 pairs are then u*x pairs, from which the token's
    pair sums times 16 (simd.offset_sums, computed once per call: xa points there) are taken
    before pmaddwd. Each int32 lane is exactly ggml's sum of four q*x, so the fold is the
    same."""
    offset = 16

    def quants(self, g, p):
        q = g.b.sub(self.unsigned(g, p), g.c(V32I8, self.offset))
        return g.f16(p, 0), q

    def unsigned(self, g, p):
        return g.b.or_(g.nibbles(p, 6), g.bits32(g.load(p, 2, I32)))

    def row(self, g, p):
        if g.vnni:
            return super().row(g, p)
        return g.splat(g.f16(p, 0), 8), self.unsigned(g, p)

    def tok(self, g, x, xd, xa, b):
        if g.vnni:
            return super().tok(g, x, xd, xa, b)
        q, d, sums = _tok_unsigned(g, x, xd, xa, b)
        return q, g.splat(d, 8), sums

    def pair(self, g, R, X, acc):
        if g.vnni:
            return super().pair(g, R, X, acc)
        (dw, uw), (qx, dx, sums) = R, X
        return (g.fma(g.b.fmul(dw, dx), g.cvt(_lanes_unsigned(g, uw, qx, sums)), acc[0]), acc[1])


class _Wide8:
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
        (q,), d = _tok_q8(g, x, xd, xa, b, 32)
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


def _tok_unsigned(g, x, xd, xa, b):
    """A token's block for the unsigned Q4_0/Q5_0 dots: its quants, scale and the int16
    pair sums times the format's offset (simd.offset_sums: xa points there)."""
    (q,), d = _tok_q8(g, x, xd, xa, b, 32)
    return q, d, g.load(xa, g.b.mul(b, g.c(I64, 32)), V16I16)


def _lanes_unsigned(g, uw, qx, sums):
    """ggml's int32 lanes of q*x from the unsigned quants u = q + offset: pmaddubsw's u*x
    pairs less offset*(x pair sums), then pmaddwd."""
    return g.maddwd(g.b.sub(g.maddubs(uw, qx), sums), g.c(V16I16, 1))


class Q4_0Fmt(_Scalar):
    """Without VNNI the nibbles stay unsigned (q + 8) as Q5_0Fmt's quants do."""
    offset = 8

    def row(self, g, p):
        n = g.nibbles(p, 2)
        if not g.vnni:
            return g.f16(p, 0), n
        q = g.b.sub(n, g.c(V32I8, self.offset))
        return g.f16(p, 0), q, g.psign(q, q)

    def tok(self, g, x, xd, xa, b):
        if not g.vnni:
            return _tok_unsigned(g, x, xd, xa, b)
        (q,), d = _tok_q8(g, x, xd, xa, b, 32)
        return q, d

    def parts(self, g, R, X):
        if not g.vnni:
            (dw, nw), (qx, dx, sums) = R, X
            return _lanes_unsigned(g, nw, qx, sums), None, g.b.fmul(dw, dx), None
        dw, qw, aw = R
        qx, dx = X
        return g.lanes_signed(qw, aw, qx), None, g.b.fmul(dw, dx), None


def _f16_pair(g, p):
    """The f16 scale and min at the start of a Q4_1/Q5_1 block, as two f32: one 4-byte load
    and one conversion (two scalar f16 loads cost two inserts and two conversions; ~5 % of the
    Q4_1 gemv, hot)."""
    dm = g.b.fpext(g.load(p, 0, vec(HALF, 2)), vec(F32T, 2))
    return g.b.extract_element(dm, g.c(I32, 0)), g.b.extract_element(dm, g.c(I32, 1))


class Q4_1Fmt(_Lanes8):
    def row(self, g, p):
        d, m = _f16_pair(g, p)
        return g.splat(d, 8), m, g.nibbles(p, 4)

    def tok(self, g, x, xd, xa, b):
        (q,), d = _tok_q8(g, x, xd, xa, b, 32)
        return q, g.splat(d, 8), g.f32(xa, g.b.mul(b, g.c(I64, 4)))

    def pair(self, g, R, X, acc):
        dw, mw, qw = R
        qx, dx, sx = X
        acc8 = g.fma(g.b.fmul(dw, dx), g.cvt(g.lanes(qw, qx)), acc[0])
        return (acc8, g.fma(mw, sx, acc[1]))


class Q5_1Fmt(Q4_1Fmt):
    def row(self, g, p):
        q = g.b.or_(g.nibbles(p, 8), g.bits32(g.load(p, 4, I32)))
        d, m = _f16_pair(g, p)
        return g.splat(d, 8), m, q


def _tok_q8k(g, x, xd, xa, b):
    groups, d = _tok_q8(g, x, xd, xa, b, 256)
    bsums = g.load(xa, g.b.mul(b, g.c(I64, 64)), V16F32)  # 16 exact int16 sums as f32
    return groups, d, bsums


def _words_to_bytes(g, words):
    """4 i32 -> <16 x i8> (little-endian bytes of the words in order)."""
    v = ir.Constant(vec(I32, 4), ir.Undefined)
    for i, w in enumerate(words):
        v = g.b.insert_element(v, w, g.c(I32, i))
    return g.b.bitcast(v, V16I8)


def _k4_scales(g, p, off):
    """Q4_K/Q5_K 12-byte field -> (8 scales splatted to <16 x i16>, <8 x f32> mins).

    The word arithmetic is ggml's utmp unpacking: bytes 0-7 scales, 8-15 mins."""
    b = g.b
    u0, u1, u2 = (g.load(p, off + 4 * i, I32) for i in range(3))
    k1, k2, k3 = g.c(I32, 0x3F3F3F3F), g.c(I32, 0x0F0F0F0F), g.c(I32, 0x03030303)
    w3 = b.or_(b.and_(b.lshr(u2, g.c(I32, 4)), k2), b.shl(b.and_(b.lshr(u1, g.c(I32, 6)), k3), g.c(I32, 4)))
    w1 = b.or_(b.and_(u2, k2), b.shl(b.and_(b.lshr(u0, g.c(I32, 6)), k3), g.c(I32, 4)))
    w2 = b.and_(u1, k1)
    w0 = b.and_(u0, k1)
    sm = b.zext(_words_to_bytes(g, [w0, w1, w2, w3]), V16I16)
    scales = [g.shuffle(sm, sm, [j] * 16) for j in range(8)]
    mins = b.uitofp(g.shuffle(sm, sm, range(8, 16)), V8F32)
    return scales, mins


def _q3_scales(g, p, off):
    """Q3_K 12-byte field -> 16 signed scales as <16 x i16> (ggml's aux unpacking)."""
    b = g.b
    a0, a1, a2 = (g.load(p, off + 4 * i, I32) for i in range(3))
    k1, k2 = g.c(I32, 0x03030303), g.c(I32, 0x0F0F0F0F)

    def word(lo, lo_shift, hi_shift):
        low = b.and_(b.lshr(lo, g.c(I32, lo_shift)) if lo_shift else lo, k2)
        high = b.and_(b.lshr(a2, g.c(I32, hi_shift)) if hi_shift else a2, k1)
        return b.or_(low, b.shl(high, g.c(I32, 4)))

    by = _words_to_bytes(g, [word(a0, 0, 0), word(a1, 0, 2), word(a0, 4, 4), word(a1, 4, 6)])
    return b.sub(b.zext(by, V16I16), g.c(V16I16, 32))


def _bsum32(g, bsums):
    """16 per-16 sums -> <8 x f32> per-32 sums (exact)."""
    return g.b.fadd(g.shuffle(bsums, bsums, range(0, 16, 2)), g.shuffle(bsums, bsums, range(1, 16, 2)))


class Q4_KFmt(_Scalar):
    def row(self, g, p):
        sc, mins = _k4_scales(g, p, 4)
        groups = []
        for c in range(4):
            q = g.load(p, 16 + 32 * c, V32I8)
            groups.append(g.b.and_(q, g.c(V32I8, 0xF)))
            groups.append(g.b.lshr(q, g.c(V32I8, 4)))
        return g.f16(p, 0), g.f16(p, 2), sc, mins, groups

    def tok(self, g, x, xd, xa, b):
        groups, d, bsums = _tok_q8k(g, x, xd, xa, b)
        return groups, d, _bsum32(g, bsums)

    def int_lanes(self, g, R, X):
        scv, groups = R[2], R[4]
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(groups[j], X[0][j]), scv[j])
            total = v if total is None else g.b.add(total, v)
        return total

    def parts(self, g, R, X):
        dw, dminw, _, mins, _ = R
        _, dx, bs32 = X
        return (self.int_lanes(g, R, X), g.b.fmul(mins, bs32), g.b.fmul(dw, dx), g.b.fmul(dminw, dx))


class Q5_KFmt(_Lanes8):
    def row(self, g, p):
        sc, mins = _k4_scales(g, p, 4)
        qh = g.load(p, 16, V32I8)
        groups = []
        for c in range(4):
            q = g.load(p, 48 + 32 * c, V32I8)
            for hi, nib in ((0, g.b.and_(q, g.c(V32I8, 0xF))), (1, g.b.lshr(q, g.c(V32I8, 4)))):
                bit = g.b.and_(g.b.lshr(qh, g.c(V32I8, 2 * c + hi)), g.c(V32I8, 1))
                groups.append(g.b.or_(nib, g.b.shl(bit, g.c(V32I8, 4))))
        return g.f16(p, 0), g.f16(p, 2), sc, mins, groups

    tok = Q4_KFmt.tok
    int_lanes = Q4_KFmt.int_lanes

    def pair(self, g, R, X, acc):
        dw, dminw, _, mins, _ = R
        _, dx, bs32 = X
        acc8 = g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(self.int_lanes(g, R, X)), acc[0])
        dmin = g.b.fmul(g.b.fneg(dx), dminw)
        return (acc8, g.fma(dmin, g.hsum_exact(g.b.fmul(mins, bs32)), acc[1]))


def _pair_scales(g, sc16):
    """16 i16 sub-block scales -> per 32-group <16 x i16> (8 lanes of sc[2j], 8 of sc[2j+1])."""
    return [g.shuffle(sc16, sc16, [2 * j] * 8 + [2 * j + 1] * 8) for j in range(8)]


class Q6_KFmt(_Lanes8):
    def row(self, g, p):
        b = g.b
        groups = []
        for n in range(2):
            qh = g.load(p, 128 + 32 * n, V32I8)
            for k in range(4):
                ql = g.load(p, 64 * n + 32 * (k & 1), V32I8)
                lo = b.and_(ql, g.c(V32I8, 0xF)) if k < 2 else b.lshr(ql, g.c(V32I8, 4))
                hi = b.shl(b.and_(b.lshr(qh, g.c(V32I8, 2 * k)), g.c(V32I8, 3)), g.c(V32I8, 4))
                groups.append(b.or_(lo, hi))
        sc16 = b.sext(g.load(p, 192, V16I8), V16I16)
        return g.f16(p, 208), _pair_scales(g, sc16), groups, sc16

    def tok(self, g, x, xd, xa, b):
        groups, d, bsums = _tok_q8k(g, x, xd, xa, b)
        return groups, d, g.b.fptosi(bsums, V16I16)    # sums of 16 int8s: within i16

    def pair(self, g, R, X, acc):
        total, _, dw, _, dx = self.block_ints(g, R, X)
        return (g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(total), acc[0]), acc[1])


class Q3_KFmt(_Lanes8):
    def row(self, g, p):
        b = g.b
        hmask = g.load(p, 0, V32I8)
        groups, absg = [], []
        for n in range(2):
            qs = g.load(p, 32 + 32 * n, V32I8)
            for k in range(4):
                lo = b.and_(b.lshr(qs, g.c(V32I8, 2 * k)), g.c(V32I8, 3))
                h = b.and_(b.lshr(hmask, g.c(V32I8, 4 * n + k)), g.c(V32I8, 1))
                q = b.sub(lo, b.shl(b.xor(h, g.c(V32I8, 1)), g.c(V32I8, 2)))  # -4 unless h
                groups.append(q)
                absg.append(g.psign(q, q))
        sc16 = _q3_scales(g, p, 96)
        return g.f16(p, 108), _pair_scales(g, sc16), groups, absg

    def tok(self, g, x, xd, xa, b):
        groups, d = _tok_q8(g, x, xd, xa, b, 256)
        return groups, d

    def pair(self, g, R, X, acc):
        dw, scv, groups, absg = R
        qx, dx = X
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(absg[j], g.psign(qx[j], groups[j])), scv[j])
            total = v if total is None else g.b.add(total, v)
        return (g.fma(g.splat(g.b.fmul(dx, dw), 8), g.cvt(total), acc[0]), acc[1])


class Q2_KFmt(_Scalar):
    def row(self, g, p):
        b = g.b
        groups = []
        for n in range(2):
            qs = g.load(p, 16 + 32 * n, V32I8)
            for k in range(4):
                groups.append(b.and_(b.lshr(qs, g.c(V32I8, 2 * k)), g.c(V32I8, 3)))
        sc8 = g.load(p, 0, V16I8)
        sc16 = b.zext(b.and_(sc8, g.c(V16I8, 0xF)), V16I16)
        mins = b.uitofp(b.lshr(sc8, g.c(V16I8, 4)), V16F32)
        return g.f16(p, 80), g.f16(p, 82), _pair_scales(g, sc16), mins, groups

    def tok(self, g, x, xd, xa, b):
        return _tok_q8k(g, x, xd, xa, b)

    def int_lanes(self, g, R, X):
        """The 8 int32 lanes of the scaled quants' products over the block."""
        _, _, scv, _, groups = R
        qx = X[0]
        total = None
        for j in range(8):
            v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
            total = v if total is None else g.b.add(total, v)
        return total

    def parts(self, g, R, X):
        b = g.b
        dw, dminw, _, mins, _ = R
        _, dx, bsums = X
        total = self.int_lanes(g, R, X)
        m16 = b.fmul(mins, bsums)
        m8 = b.fadd(g.shuffle(m16, m16, range(8)), g.shuffle(m16, m16, range(8, 16)))  # exact
        return total, m8, b.fmul(dw, dx), b.fmul(dminw, dx)


class Q2_KLanesFmt(_Lanes8, Q2_KFmt):
    """Q2_K through ggml's vec_dot (not repacked, CPUs without AVX-512): per block the mins'
    8 lanes (sub-blocks 2l and 2l+1, as pmaddwd pairs them) fold with -dx*dmin, then the
    quants' lanes with dx*d, into one 8-lane accumulator."""

    def pair(self, g, R, X, acc):
        b = g.b
        dw, dminw, _, mins, _ = R
        _, dx, bsums = X
        total = self.int_lanes(g, R, X)
        m16 = b.fmul(mins, bsums)                                           # exact
        m8 = b.fadd(g.shuffle(m16, m16, range(0, 16, 2)), g.shuffle(m16, m16, range(1, 16, 2)))
        dmin = b.fmul(b.fsub(g.c(F32T, -0.0), dx), dminw)
        acc8 = g.fma(g.splat(dmin, 8), m8, acc[0])
        return (g.fma(g.splat(b.fmul(dx, dw), 8), g.cvt(total), acc8), acc[1])


FMTS = {Q8_0: Q8_0Fmt(), Q5_0: Q5_0Fmt(), Q4_0: Q4_0Fmt(), Q4_1: Q4_1Fmt(), Q5_1: Q5_1Fmt(),
        Q4_K: Q4_KFmt(), Q5_K: Q5_KFmt(), Q6_K: Q6_KFmt(), Q3_K: Q3_KFmt(), Q2_K: Q2_KFmt()}


def _k4_block_ints(self, g, R, X):
    """(int lanes of s1, min products of s2, dw, dmin, dx) of a Q4_K/Q5_K block pair."""
    dw, dminw, _, mins, _ = R
    _, dx, bs32 = X
    return self.int_lanes(g, R, X), g.b.fmul(mins, bs32), dw, dminw, dx


def _q6_k_block_ints(self, g, R, X):
    b = g.b
    dw, scv, groups, sc16 = R
    qx, dx, bs16 = X
    total = None
    for j in range(8):
        v = g.maddwd(g.maddubs(groups[j], qx[j]), scv[j])
        total = v if total is None else b.add(total, v)
    # sc[2i] bs[2i] + sc[2i+1] bs[2i+1] per lane, as one pmaddwd (exact: int8 scales by
    # int16 sums), not two 32-bit multiplies of their even and odd halves
    corr = b.shl(g.maddwd(sc16, bs16), g.c(V8I32, 5))
    return b.sub(total, corr), None, dw, None, dx


def _q3_k_block_ints(self, g, R, X):
    dw, scv, groups, absg = R
    qx, dx = X
    total = None
    for j in range(8):
        v = g.maddwd(g.maddubs(absg[j], g.psign(qx[j], groups[j])), scv[j])
        total = v if total is None else g.b.add(total, v)
    return total, None, dw, None, dx


def _q2_k_block_ints(self, g, R, X):
    total, m8, _, _ = self.parts(g, R, X)
    return total, m8, R[0], R[1], X[1]


Q4_KFmt.block_ints = Q5_KFmt.block_ints = _k4_block_ints
Q6_KFmt.block_ints = _q6_k_block_ints
Q3_KFmt.block_ints = _q3_k_block_ints
Q2_KFmt.block_ints = _q2_k_block_ints
if not REPACK_Q2_K:     # Q2_K's gemv is ggml's vec_dot, not the repacked one
    FMTS[Q2_K] = Q2_KLanesFmt()

# The formats whose dots without VNNI take unsigned quants, and their offset (see Q5_0Fmt).
UNSIGNED_OFFSET = {q: FMTS[q].offset for q in (Q5_0, Q4_0)}
# The formats with a 512-bit two-pairs-per-vector tile (vpdpbusd on zmm; gemv fold only).
WIDE_FMTS = {q: _Wide8(FMTS[q]) for q in (Q8_0, Q5_0)}

"""The template every row-group copy is generated from (kernels/rowgroups.py has the idea and
the formats): the repacker, the intrinsic tile of one group of rows against tokens, the
prange kernel over groups, and the per-call aux rows (|x|, block sums) its tiles read, made in
the activations' f32 rows (xf), which the int8 activations these copies take leave unused."""
import numba
import numpy as np
from numba import njit
from numba.extending import intrinsic

from .dots import gemm_tokens
from .ir import F32T, I8, I16, I32, I64, Gen, i64_call, keep_alive, thread_count, vec
from .quants import BLOCK_BYTES, JIT, Q4_K, row_bytes
from .simd import HAS_AVX512BW, HAS_VNNI, _loop

# A long batch runs in blocks that stay in L2: each thread takes its share of the row groups
# in panels of ~_PANEL_BYTES of weights, and each panel the tokens in chunks of ~_ACT_CHUNK_BYTES
# of activations (quants and aux rows), every group of the panel against one chunk before the
# next. (A group against all the tokens before the next group re-read all the activations
# from L3 once a group where they outgrew L2: gemma3's down projection at 512 tokens is 2 MB
# of them; that product ran 1.08x faster in panels, Sapphire Rapids, 2 threads.)
_ACT_CHUNK_BYTES = 256 * 1024
_PANEL_BYTES = 256 * 1024
PREFETCH_TOKENS = 8             # the calls whose tiles prefetch (_tile's prefetch)
# How far ahead those prefetch where they do (the 16-row Q8_0 copy and Q5_0_P16: 6 and ~10 of
# their group blocks). One 262144x640 Q8_0_X16 matrix, one thread, CPU time, Sapphire Rapids:
# 1.10x at T=1, 1.17x at 2, 1.19x at 4, 1.06x at 8 (1 KB to 6 KB ahead all gain, prefetchnta
# loses); Q5_0_P16 (65536x640) 1.07x at T=1, 1.16x at 2; Q6_K_P16 and Q4_K_P16 ran level or
# slower (their folds are the longer part), so they do not prefetch.
PREFETCH_BYTES = 3456


class _Vectors:
    """The vector types of a group of n rows, one lane a row: f32 and i32 lanes, the int16
    pairs and the bytes (4 a row) of one load."""

    def __init__(self, n):
        self.n = n
        self.f32, self.i32, self.i16, self.i8 = vec(F32T, n), vec(I32, n), vec(I16, 2 * n), vec(I8, 4 * n)


def _repacker(fill, layout, block_elems, width):
    """repack(blocks, n_rows, n_cols, out=None): the matrix in `layout` (into `out` if given),
    or None if its rows do not come in whole groups of `width` or `fill` declines it."""
    def repack(blocks, n_rows, n_cols, out=None):
        if n_rows % width or n_cols % block_elems:
            return None
        src = np.ascontiguousarray(blocks).reshape(-1)
        if out is None:
            out = np.empty(n_rows * row_bytes(layout, n_cols), np.uint8)
        return out if fill(src, n_rows // width, n_cols // block_elems, out, width) else None
    return repack


class _Token:
    """One token's rows as a tile reads them: its int8 quants, its per-call extra (aux) and
    its block scales, at byte pointers, broadcast over the group's n rows."""

    def __init__(self, g, v, x, aux, xd, block_elems):
        self.g, self.v, self.x, self.aux, self.xd, self.block_elems = g, v, x, aux, xd, block_elems

    def lane(self, blk, lane, base=None):
        """The 4 bytes of `lane` of block blk (of x, or of `base`) broadcast to every row."""
        g, b = self.g, self.g.b
        off = b.add(b.mul(blk, g.c(I64, self.block_elems)), g.c(I64, 4 * lane))
        return b.bitcast(g.splat(g.load(self.x if base is None else base, off, I32), self.v.n), self.v.i8)

    def pair(self, off):
        """The int32 (two int16s) of aux at byte `off` broadcast to every row's pair."""
        g = self.g
        return g.b.bitcast(g.splat(g.load(self.aux, off, I32), self.v.n), self.v.i16)

    def scale(self, blk):
        """The block's f32 scale broadcast to every row."""
        return self.g.splat(self.g.f32(self.xd, self.g.b.mul(blk, self.g.c(I64, 4))), self.v.n)


def _tile(name, layout, block_elems, n_acc, block, finish, vnni=False, width=8, step=1, prefetch=0):
    """The intrinsic tile(w, n_blocks, x, x_stride, aux, aux_stride, xd, xd_stride, n_tok, out,
    out_stride) of one group of `width` rows (w: its bytes) against n_tok tokens: per token,
    acc = block(g, v, wb, token, blk, acc) over the blocks (wb: the group's bytes of block
    blk), then finish(g, v, acc), the rows' floats, stored at out + t * out_stride.
    step: tokens that share one pass over the blocks (their weight loads are one), the rest
    one by one. vnni: the Gen forms 4-product lanes with vpdpbusd (Gen.lanes). prefetch: in
    calls of up to PREFETCH_TOKENS tokens (decode, a batched step), each block's pass also
    prefetches (prefetcht1) the lines `prefetch` bytes on in the weight stream (0: never; the
    groups lie end to end, so near a group's end that is the next one's), which keeps the
    stream going while the tile folds; a longer call's passes after a group's first read its
    weights from L1, where the prefetches would only take load slots."""
    group_block = int(BLOCK_BYTES[layout]) * width
    name += ("_vnni" if vnni else "") + (f"_w{width}" if width != 8 else "") + (f"_s{step}" if step > 1 else "")
    name += f"_pf{prefetch}" if prefetch else ""
    v = _Vectors(width)

    def emit(b, a):
        g = Gen(b, vnni, avx512=HAS_AVX512BW)
        w, x, aux, xd, out = [b.inttoptr(a[i], I8.as_pointer()) for i in (0, 2, 4, 6, 9)]
        n_blocks, n_tok = a[1], a[8]

        def tokens(t0, count, carry, ahead):
            ts = [b.add(t0, g.c(I64, j)) for j in range(count)]
            toks = [_Token(g, v, g.at(x, b.mul(t, a[3])), g.at(aux, b.mul(t, a[5])), g.at(xd, b.mul(t, a[7])),
                           block_elems) for t in ts]

            def each(blk, acc):
                wb = g.at(w, b.mul(blk, g.c(I64, group_block)))
                for line in range(0, group_block if ahead else 0, 64):
                    g.prefetch(g.at(wb, ahead + line))
                return [a_ for j, tok in enumerate(toks)
                        for a_ in block(g, v, wb, tok, blk, acc[j * n_acc:(j + 1) * n_acc])]

            acc = _loop(g, g.c(I64, 0), n_blocks, [g.c(v.f32, 0.0)] * (n_acc * count), each)
            for j, t in enumerate(ts):
                st = b.store(finish(g, v, acc[j * n_acc:(j + 1) * n_acc]),
                             b.bitcast(g.at(out, b.mul(t, a[10])), v.f32.as_pointer()))
                st.align = 4
            return carry

        def passes(ahead):
            n_shared = g.c(I64, 0)
            if step > 1:
                n_steps = b.sdiv(n_tok, g.c(I64, step))
                _loop(g, g.c(I64, 0), n_steps, [g.c(I64, 0)],
                      lambda i, carry: tokens(b.mul(i, g.c(I64, step)), step, carry, ahead))
                n_shared = b.mul(n_steps, g.c(I64, step))
            _loop(g, n_shared, n_tok, [g.c(I64, 0)], lambda t, carry: tokens(t, 1, carry, ahead))

        if not prefetch:
            passes(0)
            return
        with b.if_else(b.icmp_signed("<=", n_tok, g.c(I64, PREFETCH_TOKENS))) as (few, many):
            with few:
                passes(prefetch)
            with many:
                passes(0)

    @intrinsic
    def tile(typingctx, w, n_blocks, x, x_stride, aux, aux_stride, xd, xd_stride, n_tok, out,
             out_stride):
        return i64_call(11, "dasllama_tile_" + name, emit)

    tile._set_uuid("dasllama.rowgroups." + name)    # a stable disk-cache key (see simd.tile_intrinsic)
    return tile


FUSED = {}      # a kernel of _kernel -> its fused decode form (_fused_kernel), built beside it

# what a kernel computes per call for its tiles' aux rows
AUX_ABS, AUX_BLOCK_SUMS8, AUX_BSUMS32, AUX_BSUMS16, AUX_LANE_OFFSETS = range(5)

# 1.5 * 2**23 as f32 bits: the int 0x4B400000 + i, for |i| < 2**22, is the float 1.5 * 2**23 + i
# exactly (i in the low mantissa bits), which minus 1.5 * 2**23 is f32(i) exactly: the offset
# tiles' lane sums start from it (AUX_LANE_OFFSETS, lane_f32)
F32_INT_BIAS = 0x4B400000


def lane_f32(g, v, ints):
    """f32 of each int32 lane that started from F32_INT_BIAS, exactly as vcvtdq2ps of the lane
    without it: one float subtraction, which Intel's cores run on either of the two ports a zmm
    operation has, where the conversion shares vpdpbusd's (1.05x a 16-row Q8_0 tile's folds)."""
    return g.b.fsub(g.b.bitcast(ints, v.f32), g.c(v.f32, 1.5 * 2 ** 23))


def fold_k_chunks(g, v, ints, mins, d, dmin, acc, chunks):
    """A K-quant block's 4 chunk sums (int32 lanes) and their mins' sums into the accumulators
    (acc_s, acc_m): llama.cpp's repacked gemv folds the block's whole sums (chunks=1: one fma
    each), its gemm each chunk's (chunks=4)."""
    b = g.b
    acc_s, acc_m = acc
    if chunks == 1:
        ints = [b.add(b.add(ints[0], ints[1]), b.add(ints[2], ints[3]))]
        mins = [b.add(b.add(mins[0], mins[1]), b.add(mins[2], mins[3]))]
    for i, m in zip(ints, mins):
        acc_s = g.fma(b.sitofp(i, v.f32), d, acc_s)
        acc_m = g.fma(b.sitofp(m, v.f32), dmin, acc_m)
    return [acc_s, acc_m]


def _kernel(layout, block_elems, aux_kind, tile, gemv_tile=None, width=8):
    """kernel(w, R, C, xq, xd, xa, xf, T, out) as matmul's kernels, on a copy in `layout`:
    one part a thread of the groups of `width` rows, each in panels of groups against chunks
    of tokens (_PANEL_BYTES, _ACT_CHUNK_BYTES). With gemv_tile
    (Q4_K), the first tokens dots.gemm_tokens gives llama.cpp's repacked gemm take `tile`, the
    rest gemv_tile. (The aux functions are called as globals under a compile-time kind: a
    captured dispatcher would key numba's disk cache on a random id.)"""
    group_block = int(BLOCK_BYTES[layout]) * width
    split = gemv_tile is not None
    gemv = gemv_tile if split else tile

    aux_of = _aux_of(aux_kind)

    @njit(**JIT, parallel=True)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        n_blocks = n_cols // block_elems
        group_bytes = n_blocks * group_block
        aux_of(xq, xa, xf, n_tokens, n_cols)
        n_batch = gemm_tokens(Q4_K, n_rows, n_cols, n_tokens)[0] if split else n_tokens
        wp, xp, ap = np.int64(w.ctypes.data), np.int64(xq.ctypes.data), np.int64(xf.ctypes.data)
        dp, op = np.int64(xd.ctypes.data), np.int64(out.ctypes.data)
        xs, as_, ds, os = xq.strides[0], xf.strides[0], xd.strides[0], out.strides[0]
        chunk = max(1, _ACT_CHUNK_BYTES // max(2 * n_cols, 1))
        n_groups = n_rows // width
        panel = max(1, _PANEL_BYTES // group_bytes)
        n_parts = min(thread_count(), n_groups)
        for part in numba.prange(n_parts):
            for p0 in range(n_groups * part // n_parts, n_groups * (part + 1) // n_parts, panel):
                p1 = min(p0 + panel, n_groups * (part + 1) // n_parts)
                for c0 in range(0, n_tokens, chunk):
                    c1 = min(n_tokens, c0 + chunk)
                    t1 = max(c0, min(c1, n_batch))     # [c0, t1) take `tile`, [t1, c1) the gemv's
                    for grp in range(p0, p1):
                        wg, og = wp + grp * group_bytes, op + 4 * width * grp
                        if t1 > c0:
                            tile(wg, n_blocks, xp + c0 * xs, xs, ap + c0 * as_, as_, dp + c0 * ds, ds,
                                 t1 - c0, og + c0 * os, os)
                        if c1 > t1:
                            gemv(wg, n_blocks, xp + t1 * xs, xs, ap + t1 * as_, as_, dp + t1 * ds, ds,
                                 c1 - t1, og + t1 * os, os)
        keep_alive(xf)
    FUSED[kernel] = _fused_kernel(layout, block_elems, aux_kind, tile, gemv_tile, width)
    return kernel


def _aux_of(aux_kind):
    """aux(xq, xa, xf, n_tokens, n_cols): the tiles' aux rows of one kind (a compile-time
    constant: one branch is compiled) into the rows of xf (T, >= n_cols f32: each kind's row
    fits its bytes), which the tiles then read (the kernel's ap, as_: xf's); inlined into its
    kernel: no compile of its own, and no array a call."""
    @njit(**JIT, inline="always")
    def aux(xq, xa, xf, n_tokens, n_cols):
        if aux_kind == AUX_ABS:
            abs_quants(xq, n_tokens, n_cols, xf.view(np.uint8))
        elif aux_kind == AUX_BLOCK_SUMS8:
            group_sums(xq, n_tokens, n_cols, 32, 8, xf.view(np.int32))
        elif aux_kind == AUX_BSUMS32:
            bsums32(xa, n_tokens, n_cols, xf.view(np.int16))
        elif aux_kind == AUX_LANE_OFFSETS:
            lane_offsets(xq, n_tokens, n_cols, F32_INT_BIAS, xf.view(np.int32))
        else:
            bsums16(xa, n_tokens, n_cols, xf.view(np.int16))
    return aux


RANGES = {}     # a fused kernel of _fused_kernel -> (its rows: _group_rows, aux kind, width): one source


def _group_rows(layout, block_elems, tile, gemv_tile=None, width=8):
    """rows(w, n_rows, out, out_stride, n_cols, x, x_stride, aux, aux_stride, xd, xd_stride,
    n_tokens, g0, g1), all int64 (addresses, byte strides, counts): row groups [g0, g1) of one
    matrix of n_rows x n_cols in the copy (in `layout`) at w against n_tokens tokens (the quantised rows at x
    and xd, the aux rows at aux), each group's tile taking every token, into out. With
    gemv_tile (Q4_K), the first gemm_tokens tokens take `tile`, the rest gemv_tile.
    The fused kernels' prange calls it a group at a time, and a compiled decode step
    (core/llm/team.py) on a range of groups a thread: one source, so the two cannot part. The
    tiles' IR is compiled here once, not again in each caller."""
    group_block = int(BLOCK_BYTES[layout]) * width
    split = gemv_tile is not None
    gemv = gemv_tile if split else tile

    @njit(**JIT)
    def rows(w, n_rows, out, out_stride, n_cols, x, x_stride, aux, aux_stride, xd, xd_stride, n_tokens, g0, g1):
        n_blocks = n_cols // block_elems
        group_bytes = n_blocks * group_block
        n_batch = gemm_tokens(Q4_K, n_rows, n_cols, n_tokens)[0] if split else n_tokens
        for g in range(g0, g1):
            wg, og = w + g * group_bytes, out + 4 * width * g
            if n_batch > 0:
                tile(wg, n_blocks, x, x_stride, aux, aux_stride, xd, xd_stride, n_batch, og, out_stride)
            if n_tokens > n_batch:
                gemv(wg, n_blocks, x + n_batch * x_stride, x_stride, aux + n_batch * aux_stride, aux_stride,
                     xd + n_batch * xd_stride, xd_stride, n_tokens - n_batch, og + n_batch * out_stride, out_stride)
    # a stable disk-cache key for the fused kernel that captures it (see simd.tile_intrinsic)
    rows._set_uuid(f"dasllama.rowgroups.rows.{tile._uuid}.{gemv._uuid}")
    return rows


def _fused_kernel(layout, block_elems, aux_kind, tile, gemv_tile=None, width=8):
    """fused(wa, na, oa, wb, nb, ob, wc, nc, oc, n_cols, xq, xd, xa, xf, n_tokens) as
    simd.make_fused_kernel, on copies in `layout`, for a few tokens (a decode step's one, or a
    batched step's B): up to three matrices in one parallel region, the prange over the row
    groups of all three, each group through _group_rows (every token against its weights,
    read once), the aux rows made once. (_kernel cuts a long batch into cache-sized chunks of
    tokens: this one is for the few of a step, whose activations stay in L1.) RANGES[fused] is
    (its rows function, the aux kind its tiles read, rows a group)."""
    rows = _group_rows(layout, block_elems, tile, gemv_tile, width)
    aux_of = _aux_of(aux_kind)

    @njit(**JIT, parallel=True)
    def fused(wa, na, oa, wb, nb, ob, wc, nc, oc, n_cols, xq, xd, xa, xf, n_tokens):
        aux_of(xq, xa, xf, n_tokens, n_cols)
        xp, ap, dp = np.int64(xq.ctypes.data), np.int64(xf.ctypes.data), np.int64(xd.ctypes.data)
        xs, as_, ds = np.int64(xq.strides[0]), np.int64(xf.strides[0]), np.int64(xd.strides[0])
        ga, gb, gc = na // width, nb // width, nc // width
        pa, pb, pc = np.int64(wa.ctypes.data), np.int64(wb.ctypes.data), np.int64(wc.ctypes.data)
        qa, qb, qc = np.int64(oa.ctypes.data), np.int64(ob.ctypes.data), np.int64(oc.ctypes.data)
        sa, sb, sc = np.int64(oa.strides[0]), np.int64(ob.strides[0]), np.int64(oc.strides[0])
        for grp in numba.prange(ga + gb + gc):
            if grp < ga:
                wp, op, os, n_rows, g = pa, qa, sa, np.int64(na), np.int64(grp)
            elif grp < ga + gb:
                wp, op, os, n_rows, g = pb, qb, sb, np.int64(nb), np.int64(grp - ga)
            else:
                wp, op, os, n_rows, g = pc, qc, sc, np.int64(nc), np.int64(grp - ga - gb)
            rows(wp, n_rows, op, os, np.int64(n_cols), xp, xs, ap, as_, dp, ds, np.int64(n_tokens), g, g + 1)
        keep_alive(xf)
    RANGES[fused] = (rows, aux_kind, width)
    return fused


@njit(**JIT)
def aux_rows(aux_kind, xq, xa, n_tokens, n_cols, out):
    """The tiles' aux rows of `aux_kind` (what _aux_of makes), into the bytes `out` (at least
    n_tokens * n_cols): returns their row stride in bytes. For a caller that makes them once
    into a buffer it keeps (a compiled decode step: core/llm/team.py)."""
    if aux_kind == AUX_ABS:
        abs_quants(xq, n_tokens, n_cols, out[:n_tokens * n_cols].reshape((n_tokens, n_cols)))
        return n_cols
    elif aux_kind == AUX_BLOCK_SUMS8:
        n = n_cols // 32
        group_sums(xq, n_tokens, n_cols, 32, 8, out[:4 * n_tokens * n].view(np.int32).reshape((n_tokens, n)))
        return 4 * n
    elif aux_kind == AUX_BSUMS32:
        n = n_cols // 32
        bsums32(xa, n_tokens, n_cols, out[:2 * n_tokens * n].view(np.int16).reshape((n_tokens, n)))
        return 2 * n
    elif aux_kind == AUX_LANE_OFFSETS:
        _lane_offset_rows(xq.ctypes.data, xq.strides[0], out.ctypes.data, n_cols, n_cols, n_tokens, F32_INT_BIAS)
        return n_cols
    n = n_cols // 16
    bsums16(xa, n_tokens, n_cols, out[:2 * n_tokens * n].view(np.int16).reshape((n_tokens, n)))
    return 2 * n


@njit(**JIT)
def abs_quants(xq, n_tokens, n_cols, out):
    """out (n_tokens, >= n_cols) u8 = |x| of each token's int8 quants (Q8_0 activations are
    never -128: ggml's quantiser rounds into [-127, 127])."""
    for t in range(n_tokens):
        src, dst = xq[t], out[t]
        for i in range(n_cols):
            v = np.int32(src[i])
            dst[i] = np.uint8(v if v >= 0 else -v)


@njit(**JIT)
def group_sums(xq, n_tokens, n_cols, group, factor, out):
    """out (n_tokens, >= n_cols // group) int32 = factor x each token's sums over its groups of
    `group` consecutive quants: Q4_0_X* take 8 x the 32-element block sums (the offset Q8_0_X*
    take -128 x the 4-element ones from lane_offsets)."""
    for t in range(n_tokens):
        row = xq[t]
        for j in range(n_cols // group):
            s = np.int32(0)
            for e in range(group * j, group * j + group):
                s += np.int32(row[e])
            out[t, j] = factor * s


def _emit_lane_offsets(b, args):
    """The body of _lane_offset_rows' function."""
    g = Gen(b, HAS_VNNI, avx512=HAS_AVX512BW)
    xq, xq_rs, out, out_rs, n_cols, n_rows, bias = args

    def chunk(x_row, o_row, at, n):     # n bytes at byte `at`: n / 4 int32 sums
        ints = g.lanes(g.c(vec(I8, n), 1), g.load(x_row, at, vec(I8, n)))
        ints = b.sub(g.splat(b.trunc(bias, I32), n // 4), b.shl(ints, g.c(vec(I32, n // 4), 7)))
        st = b.store(ints, b.bitcast(g.at(o_row, at), vec(I32, n // 4).as_pointer()))
        st.align = 4

    def row(t, acc):
        x_row = g.at(b.inttoptr(xq, I8.as_pointer()), b.mul(t, xq_rs))
        o_row = g.at(b.inttoptr(out, I8.as_pointer()), b.mul(t, out_rs))
        n_wide = b.sdiv(n_cols, g.c(I64, 64))

        def wide(i, acc):
            chunk(x_row, o_row, b.mul(i, g.c(I64, 64)), 64)
            return acc

        def narrow(i, acc):
            chunk(x_row, o_row, b.mul(i, g.c(I64, 32)), 32)
            return acc

        _loop(g, g.c(I64, 0), n_wide, [g.c(I64, 0)], wide)
        _loop(g, b.mul(n_wide, g.c(I64, 2)), b.sdiv(n_cols, g.c(I64, 32)), [g.c(I64, 0)], narrow)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


@intrinsic
def _lane_offset_rows(typingctx, xq, xq_rs, out, out_rs, n_cols, n_rows, bias):
    return i64_call(7, "dasllama_lane_offset_rows", _emit_lane_offsets)


_lane_offset_rows._set_uuid("dasllama.rowgroup_template.lane_offset_rows")   # a stable disk-cache key


@njit(**JIT)
def lane_offsets(xq, n_tokens, n_cols, bias, out):
    """out (n_tokens, >= n_cols // 4) int32 = bias + group_sums(xq, n_tokens, n_cols, 4, -128)
    (n_cols a multiple of 32): the offset tiles' aux rows (bias F32_INT_BIAS), 16 sums a
    vpdpbusd of ones (group_sums' loop took ~0.7 ns a quant, 5 % of a gemma3 pp512 on one
    thread: every matrix makes its own)."""
    _lane_offset_rows(xq.ctypes.data, xq.strides[0], out.ctypes.data, out.strides[0], n_cols, n_tokens, bias)


@njit(**JIT)
def bsums32(xa, n_tokens, n_cols, out):
    """out (n_tokens, >= n_cols // 32) int16 = each token's sums over 32 elements (Q8_K keeps
    them per 16, xa)."""
    for t in range(n_tokens):
        for j in range(n_cols // 32):
            out[t, j] = np.int16(xa[t, 2 * j] + xa[t, 2 * j + 1])


@njit(**JIT)
def bsums16(xa, n_tokens, n_cols, out):
    """out (n_tokens, >= n_cols // 16) int16 = each token's Q8_K sums over 16 elements (xa, as
    f32)."""
    for t in range(n_tokens):
        for j in range(n_cols // 16):
            out[t, j] = np.int16(xa[t, j])

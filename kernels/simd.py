"""Vector IR matmul kernels: one register tile of `rows` weight rows x `tokens` activation
rows per call, looped over blocks in LLVM IR inside a numba @intrinsic.

`emit_tile` wraps a format's block dot (blockdots.py) in the block loop with one accumulator
per (row, token) pair (with the formats of blockdots_batch.WIDE_FMTS, one 512-bit accumulator per
row and pair of tokens); `emit_float_tile` does the same for F32/F16/BF16. `make_kernel` is the
template every variant comes from: prange over row tiles, token tiles inside, cache-sized
token chunks outside. Tails: rows and tokens past the valid count re-read the last valid one
and are not stored, so one tile function serves every shape.
"""
import numba
import numpy as np
from numba import njit
from numba.extending import intrinsic

from .cpu import llvm_has
from .blockdots_batch import FMTS, GEMM_FMTS, TILED_FMTS, UNSIGNED_OFFSET, VNNI_UNSIGNED, WIDE_FMTS
from .ir import F32T, F64T, HALF, I8, I16, I32, I64, V16F32, V16I32, Gen, i64_call, keep_alive, vec
from .dots import PATH_GEMM, PATH_TILED, PATH_VEC, gemm_tokens
from .quants import BF16, BLOCK_BYTES, BLOCK_ELEMS, F16, F32, JIT, row_bytes

FORMATS = tuple(FMTS) + (F16, BF16, F32)


# --- the tile loop ---------------------------------------------------------------------------

def _clamp(g, i, n):
    """i, or n-1 past the valid count (the tail tile re-reads the last row/token)."""
    ok = g.b.icmp_signed("<", g.c(I64, i), n)
    return g.b.select(ok, g.c(I64, i), g.b.sub(n, g.c(I64, 1)))


def _loop(g, start, stop, init, body):
    """for i in range(start, stop): acc = body(i, acc); returns the final acc values.
    `body` must emit straight-line code."""
    b = g.b
    entry = b.block
    head = b.append_basic_block("loop")
    done = b.append_basic_block("loop_done")
    b.cbranch(b.icmp_signed("<", start, stop), head, done)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(start, entry)
    phis = [b.phi(v.type) for v in init]
    for ph, v in zip(phis, init):
        ph.add_incoming(v, entry)
    new = body(i, phis)
    latch = b.block
    nxt = b.add(i, g.c(I64, 1))
    i.add_incoming(nxt, latch)
    for ph, v in zip(phis, new):
        ph.add_incoming(v, latch)
    b.cbranch(b.icmp_signed("<", nxt, stop), head, done)
    b.position_at_end(done)
    res = [b.phi(v.type) for v in init]
    for r, v0, v1 in zip(res, init, new):
        r.add_incoming(v0, entry)
        r.add_incoming(v1, latch)
    return res


def _store(g, rows, tokens, n_rows, n_tok, out, out_stride, values):
    b = g.b
    for r in range(rows):
        for t in range(tokens):
            ok = b.and_(b.icmp_signed("<", g.c(I64, r), n_rows), b.icmp_signed("<", g.c(I64, t), n_tok))
            with b.if_then(ok):
                ptr = b.bitcast(g.at(out, b.add(b.mul(g.c(I64, t), out_stride), g.c(I64, 4 * r))),
                                F32T.as_pointer())
                b.store(values[r * tokens + t], ptr)


def emit_tile(g, fmt, qtype, rows, tokens, args):
    """for b in blocks: per row decode, per token load, per pair accumulate; then store."""
    (w, row_stride, n_rows, x, x_stride, xd, xd_stride, xa, xa_stride, n_tok, n_blocks,
     out, out_stride) = args
    b = g.b
    bb = int(BLOCK_BYTES[qtype])
    row_base = [g.at(w, b.mul(_clamp(g, r, n_rows), row_stride)) for r in range(rows)]
    tok_base = []
    for t in range(tokens):
        ti = _clamp(g, t, n_tok)
        tok_base.append((g.at(x, b.mul(ti, x_stride)), g.at(xd, b.mul(ti, xd_stride)),
                         g.at(xa, b.mul(ti, xa_stride))))

    def block(blk, acc):
        R = [fmt.row(g, g.at(row_base[r], b.mul(blk, g.c(I64, bb)))) for r in range(rows)]
        X = [fmt.tok(g, *tok_base[t], blk) for t in range(tokens)]
        return fmt.fold_tile(g, R, X, acc)

    acc = _loop(g, g.c(I64, 0), n_blocks, fmt.init_tile(g, rows * tokens), block)
    _store(g, rows, tokens, n_rows, n_tok, out, out_stride, fmt.finish_tile(g, acc))


def _load_float16x(g, qtype, base, off):
    """16 weights of a float type at base+off as <16 x f32> (exact widening)."""
    if qtype == F32:
        return g.load(base, off, V16F32)
    if qtype == F16:
        return g.b.fpext(g.load(base, off, vec(HALF, 16)), V16F32)
    bits = g.b.zext(g.load(base, off, vec(I16, 16)), V16I32)  # BF16: the high half of an f32
    return g.b.bitcast(g.b.shl(bits, g.c(V16I32, 16)), V16F32)


def _load_float1(g, qtype, base, off):
    if qtype == F32:
        return g.load(base, off, F32T)
    if qtype == F16:
        return g.f16(base, off)
    return g.b.bitcast(g.b.shl(g.b.zext(g.load(base, off, I16), I32), g.c(I32, 16)), F32T)


def _reduce16(g, v):
    """_mm512_reduce_add_ps as gcc expands it: halves 8, 4, 2, 1."""
    b = g.b
    s8 = b.fadd(g.shuffle(v, v, range(8)), g.shuffle(v, v, range(8, 16)))
    s4 = b.fadd(g.shuffle(s8, s8, range(4)), g.shuffle(s8, s8, range(4, 8)))
    s2 = b.fadd(g.shuffle(s4, s4, [0, 1]), g.shuffle(s4, s4, [2, 3]))
    return b.fadd(b.extract_element(s2, g.c(I32, 0)), b.extract_element(s2, g.c(I32, 1)))


def emit_float_tile(g, qtype, rows, tokens, args, gemm):
    """Float weights, `n_blocks` carrying n_cols. gemm=False: ggml_vec_dot_f16 (AVX-512),
    4 x 16 fma lanes per step of 64, pairwise reduce, tail in double. gemm=True: tinyBLAS,
    one 16-lane fma accumulator per pair over steps of 16 (n_cols % 16 == 0), then reduce."""
    (w, row_stride, n_rows, x, x_stride, _, _, _, _, n_tok, n_cols, out, out_stride) = args
    b = g.b
    esize = 4 if qtype == F32 else 2
    rows_p = [g.at(w, b.mul(_clamp(g, r, n_rows), row_stride)) for r in range(rows)]
    toks_p = [g.at(x, b.mul(_clamp(g, t, n_tok), x_stride)) for t in range(tokens)]
    if gemm:
        def step16(i, acc):
            e0 = b.mul(i, g.c(I64, 16))
            W = [_load_float16x(g, qtype, rows_p[r], b.mul(e0, g.c(I64, esize))) for r in range(rows)]
            X = [g.load(toks_p[t], b.mul(e0, g.c(I64, 4)), V16F32) for t in range(tokens)]
            return [g.fma(W[r], X[t], acc[r * tokens + t]) for r in range(rows) for t in range(tokens)]

        init = [g.c(V16F32, 0.0)] * (rows * tokens)
        acc = _loop(g, g.c(I64, 0), b.sdiv(n_cols, g.c(I64, 16)), init, step16)
        _store(g, rows, tokens, n_rows, n_tok, out, out_stride, [_reduce16(g, a) for a in acc])
        return
    steps = b.sdiv(n_cols, g.c(I64, 64))
    zero = g.c(V16F32, 0.0)
    init = [zero] * (4 * rows * tokens)

    def step(i, acc):
        e0 = b.mul(i, g.c(I64, 64))
        W = [[_load_float16x(g, qtype, rows_p[r], b.mul(b.add(e0, g.c(I64, 16 * j)), g.c(I64, esize)))
              for j in range(4)] for r in range(rows)]
        X = [[g.load(toks_p[t], b.mul(b.add(e0, g.c(I64, 16 * j)), g.c(I64, 4)), V16F32)
              for j in range(4)] for t in range(tokens)]
        return [g.fma(W[r][j], X[t][j], acc[(r * tokens + t) * 4 + j])
                for r in range(rows) for t in range(tokens) for j in range(4)]

    acc = _loop(g, g.c(I64, 0), steps, init, step)
    sums = []
    for pr in range(rows * tokens):
        a = acc[4 * pr: 4 * pr + 4]
        sums.append(b.fpext(_reduce16(g, b.fadd(b.fadd(a[0], a[2]), b.fadd(a[1], a[3]))), F64T))

    def tail(e, acc):
        out_ = []
        for r in range(rows):
            wv = _load_float1(g, qtype, rows_p[r], b.mul(e, g.c(I64, esize)))
            for t in range(tokens):
                xv = g.load(toks_p[t], b.mul(e, g.c(I64, 4)), F32T)
                out_.append(b.fadd(acc[r * tokens + t], b.fpext(b.fmul(wv, xv), F64T)))
        return out_

    sums = _loop(g, b.mul(steps, g.c(I64, 64)), n_cols, sums, tail)
    _store(g, rows, tokens, n_rows, n_tok, out, out_stride,
           [b.fptrunc(v, F32T) for v in sums])


_tiles = {}


def tile_intrinsic(qtype, rows, tokens, vnni=False, path=PATH_VEC, wide=False):
    """numba intrinsic tile(w, row_stride, n_rows, x, x_stride, xd, xd_stride, xa, xa_stride,
    n_tok, n_blocks, out, out_stride): addresses as uint64/int64, strides in bytes.
    vnni: vpdpbusd lanes; path: the fold of llama.cpp's gemv/vec_dot (PATH_VEC), its gemm
    (PATH_GEMM: tinyBLAS for float weights, the repacked gemm for GEMM_FMTS) or its tiled
    K-quant matmul (PATH_TILED); wide: the 512-bit tile of WIDE_FMTS (two token pairs per
    vector, the gemv fold, even `tokens`)."""
    key = (qtype, rows, tokens, vnni, path, wide)
    if key in _tiles:
        return _tiles[key]
    gemm = path == PATH_GEMM
    if wide:
        assert path == PATH_VEC and tokens % 2 == 0, "the wide tile is the gemv fold of token pairs"
        fmt = WIDE_FMTS[qtype]
    elif path == PATH_TILED:
        fmt = TILED_FMTS[qtype]
    else:
        fmt = GEMM_FMTS[qtype] if gemm and qtype in GEMM_FMTS else FMTS.get(qtype)
    suffix = {PATH_VEC: "", PATH_GEMM: "_gemm", PATH_TILED: "_tiled"}[path]
    name = f"dasllama_tile_{qtype}_{rows}x{tokens}{'_vnni' if vnni else ''}{'_wide' if wide else ''}{suffix}"

    def emit(b, a):
        g = Gen(b, vnni)
        ptr = [b.inttoptr(a[i], I8.as_pointer()) for i in (0, 3, 5, 7, 11)]
        args = (ptr[0], a[1], a[2], ptr[1], a[4], ptr[2], a[6], ptr[3], a[8], a[9], a[10], ptr[4], a[12])
        if fmt is None:
            emit_float_tile(g, qtype, rows, tokens, args, gemm)
        else:
            emit_tile(g, fmt, qtype, rows, tokens, args)

    @intrinsic
    def tile(typingctx, w, row_stride, n_rows, x, x_stride, xd, xd_stride, xa, xa_stride, n_tok,
             n_blocks, out, out_stride):
        return i64_call(13, name, emit)

    # numba keys a closure's disk cache on its pickled cells: a random intrinsic uuid would
    # make every kernel that captures this tile miss the cache in each new process
    tile._set_uuid(f"dasllama.simd.{name}")
    _tiles[key] = tile
    return tile


# --- variants and the kernel template --------------------------------------------------------

# One list per block size; the first entry is the default until a tuner picks. rows x tokens
# is the prefill register tile; rows1 the T=1 (decode) tile: one row at a time keeps the
# weight stream strictly sequential, which the hardware prefetcher follows at full speed
# (two adjacent rows interleaved measured 3x slower on Zen 4).
_PLANS = [("simd_r4t4", dict(rows=4, tokens=4, rows1=1)),
          ("simd_r2t6", dict(rows=2, tokens=6, rows1=1)),
          ("simd_r6t2", dict(rows=6, tokens=2, rows1=1))]
_K_PLANS = [("simd_r2t4", dict(rows=2, tokens=4, rows1=1)),
            ("simd_r4t4", dict(rows=4, tokens=4, rows1=1)),
            ("simd_r4t2", dict(rows=4, tokens=2, rows1=1)),
            ("simd_r1t4", dict(rows=1, tokens=4, rows1=1))]
# Q8_0/Q5_0 with VNNI: 512-bit tiles, rows x tokens (tokens in pairs, one zmm per row and
# token pair); the decode tile is the 256-bit vnni one
_W_PLANS = [("simd_w_r4t6", dict(rows=4, tokens=6, rows1=1)),
            ("simd_w_r3t8", dict(rows=3, tokens=8, rows1=1)),
            ("simd_w_r2t8", dict(rows=2, tokens=8, rows1=1))]
_F_PLANS = [("simd_r4t4", dict(rows=4, tokens=4, rows1=1)),
            ("simd_r2t6", dict(rows=2, tokens=6, rows1=1)),
            ("simd_r6t2", dict(rows=6, tokens=2, rows1=1))]

# prefill walks token chunks whose activations stay in L2 while all row tiles pass over them
_ACT_CHUNK_BYTES = 256 * 1024


HAS_VNNI = llvm_has("avx512vnni", "avx512vl")
HAS_AVX512BW = llvm_has("avx512bw")


# decode tiles of 2 and 4 rows beside the default plan's 1: rows stream interleaved, which
# measured 3x slower on a Zen 4 but up to 1.8x faster on a Zen 3 for some shapes (Q4_K
# 640x1024), so the tuner decides, per shape where it pays
_DECODE_ROWS = (1, 2, 4)


def variants(qtype):
    """[(name, params)]: the prefill variants, named after their rows x tokens tile, then the
    decode variants, named after their rows x 1 tile (`phases` says which phase offers one).
    A decode variant is the kernel of a prefill plan (the first of its vnni form) with that
    T=1 tile: the default decode and prefill variants are then one kernel, compiled once."""
    if qtype in (F16, BF16, F32):
        plans = _F_PLANS
    elif BLOCK_ELEMS[qtype] == 256:
        plans = _K_PLANS  # scaled sub-block sums keep pmaddwd: no vnni form
    else:
        plans = _PLANS
        if HAS_VNNI:
            wide = [(n, dict(p, vnni=True, wide=True)) for n, p in _W_PLANS] if qtype in WIDE_FMTS else []
            plans = [(n + "_vnni", dict(p, vnni=True)) for n, p in _PLANS[:2]] + wide + plans
    prefill = [(n, dict(p, phases=("prefill",))) for n, p in plans]
    firsts = {}     # vnni or not -> the first plan of that form
    for _, p in plans:
        firsts.setdefault(p.get("vnni", False), p)
    decode = [(f"simd_r{r}t1" + ("_vnni" if vnni else ""), dict(first, rows1=r, phases=("decode",)))
              for vnni, first in firsts.items() for r in (_DECODE_ROWS if first is plans[0][1] else (1,))]
    return [(n, dict(engine="simd", **p)) for n, p in prefill + decode]


def offers(params, phase):
    """Whether a variant (its params) is offered for `phase` (a plan without `phases`: both)."""
    return phase in params.get("phases", ("decode", "prefill"))


def make_kernel(qtype, rows, tokens, rows1, vnni=False, wide=False):
    """kernel(w, R, C, xq, xd, xa, xf, T, out): (rows x tokens) tiles over full token tiles,
    then the leftover tokens one at a time with (rows1 x 1) tiles (T=1 decode is all leftover).
    Where llama.cpp's batch path folds unlike its gemv (float weights under tinyBLAS, repacked
    Q4_K/Q2_K, the tiled K-quant matmul), the tokens dots.gemm_tokens names take that fold
    and the rest the gemv's; the main tiles then cover only the former."""
    is_float = qtype in (F16, BF16, F32)
    main_vec = tile_intrinsic(qtype, rows, tokens, vnni, wide=wide)
    single = tile_intrinsic(qtype, rows1, 1, vnni)
    gemm = is_float or qtype in GEMM_FMTS
    main_gemm = tile_intrinsic(qtype, rows, tokens, vnni, PATH_GEMM) if gemm else main_vec
    single_gemm = tile_intrinsic(qtype, rows1, 1, vnni, PATH_GEMM) if gemm else single
    tiled = qtype in TILED_FMTS
    main_tiled = tile_intrinsic(qtype, rows, tokens, vnni, PATH_TILED) if tiled else main_vec
    single_tiled = tile_intrinsic(qtype, rows1, 1, vnni, PATH_TILED) if tiled else single
    be = int(BLOCK_ELEMS[qtype])
    offset = UNSIGNED_OFFSET.get(qtype, 0) if not vnni or qtype in VNNI_UNSIGNED else 0

    @njit(**JIT, parallel=True)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        rb = row_bytes(qtype, n_cols)
        nb = n_cols if is_float else n_cols // be
        wp = np.int64(w.ctypes.data)
        xp = np.int64(xf.ctypes.data) if is_float else np.int64(xq.ctypes.data)
        xs = xf.strides[0] if is_float else xq.strides[0]
        dp, ap, op = np.int64(xd.ctypes.data), np.int64(xa.ctypes.data), np.int64(out.ctypes.data)
        ds, as_, os = xd.strides[0], xa.strides[0], out.strides[0]
        if offset:      # a compile-time constant: other formats compute nothing here
            # into xf, which the Q8_0 activations these formats take leave unused
            if vnni:
                offset_quad_sums(xq, n_tokens, n_cols, offset, xf)
            else:
                offset_sums(xq, n_tokens, n_cols, offset, xf)
            ap, as_ = np.int64(xf.ctypes.data), xf.strides[0]
        sums = xf
        n_batch, path = gemm_tokens(qtype, n_rows, n_cols, n_tokens)
        if path == PATH_VEC:
            n_batch = n_tokens        # one fold for all: the main tiles serve the gemv fold
        n_full = n_batch // tokens * tokens
        chunk = max(tokens, min(n_full, _ACT_CHUNK_BYTES // max(xs, 1)) // tokens * tokens)
        for c0 in range(0, n_full, chunk):
            c1 = min(n_full, c0 + chunk)
            for tile in numba.prange((n_rows + rows - 1) // rows):
                r0 = tile * rows
                nr = min(rows, n_rows - r0)
                for t0 in range(c0, c1, tokens):
                    args = (wp + r0 * rb, rb, nr, xp + t0 * xs, xs, dp + t0 * ds, ds, ap + t0 * as_,
                            as_, tokens, nb, op + t0 * os + 4 * r0, os)
                    if path == PATH_TILED:
                        main_tiled(*args)
                    elif path == PATH_GEMM:
                        main_gemm(*args)
                    else:
                        main_vec(*args)
        if n_full < n_tokens:
            for tile in numba.prange((n_rows + rows1 - 1) // rows1):
                r0 = tile * rows1
                nr = min(rows1, n_rows - r0)
                for t in range(n_full, n_tokens):
                    args = (wp + r0 * rb, rb, nr, xp + t * xs, xs, dp + t * ds, ds, ap + t * as_, as_,
                            1, nb, op + t * os + 4 * r0, os)
                    if t < n_batch and path == PATH_TILED:
                        single_tiled(*args)
                    elif t < n_batch and path == PATH_GEMM:
                        single_gemm(*args)
                    else:
                        single(*args)
        keep_alive(sums)
    return kernel


def make_fused_kernel(qtype, rows1, vnni=False):
    """fused(wa, na, oa, wb, nb, ob, wc, nc, oc, n_cols, xq, xd, xa, xf): one token times up to
    three matrices of `qtype` with n_cols columns each (wa: its bytes, na rows, oa (1, na) its
    output; nb or nc 0 where there are fewer), in one parallel region: the prange runs over
    the (rows1 x 1) tiles of all three, so a decode step's q, k, v (or gate, up) cost one
    dispatch and one barrier, not three. The tiles are make_kernel's T=1 tiles: every output
    is bit for bit the unfused kernel's."""
    single = tile_intrinsic(qtype, rows1, 1, vnni)
    is_float = qtype in (F16, BF16, F32)
    be = int(BLOCK_ELEMS[qtype])
    offset = UNSIGNED_OFFSET.get(qtype, 0) if not vnni or qtype in VNNI_UNSIGNED else 0

    @njit(**JIT, parallel=True)
    def fused(wa, na, oa, wb, nb, ob, wc, nc, oc, n_cols, xq, xd, xa, xf):
        rb = row_bytes(qtype, n_cols)
        n_blocks = n_cols if is_float else n_cols // be
        xp = np.int64(xf.ctypes.data) if is_float else np.int64(xq.ctypes.data)
        xs = xf.strides[0] if is_float else xq.strides[0]
        dp, ap = np.int64(xd.ctypes.data), np.int64(xa.ctypes.data)
        ds, as_ = xd.strides[0], xa.strides[0]
        if offset:      # as make_kernel's
            if vnni:
                offset_quad_sums(xq, np.int64(1), n_cols, offset, xf)
            else:
                offset_sums(xq, np.int64(1), n_cols, offset, xf)
            ap, as_ = np.int64(xf.ctypes.data), xf.strides[0]
        ta, tb, tc = (na + rows1 - 1) // rows1, (nb + rows1 - 1) // rows1, (nc + rows1 - 1) // rows1
        pa, pb, pc = np.int64(wa.ctypes.data), np.int64(wb.ctypes.data), np.int64(wc.ctypes.data)
        qa, qb, qc = np.int64(oa.ctypes.data), np.int64(ob.ctypes.data), np.int64(oc.ctypes.data)
        for tile in numba.prange(ta + tb + tc):
            if tile < ta:
                wp, op, n_rows, r0 = pa, qa, na, tile * rows1
            elif tile < ta + tb:
                wp, op, n_rows, r0 = pb, qb, nb, (tile - ta) * rows1
            else:
                wp, op, n_rows, r0 = pc, qc, nc, (tile - ta - tb) * rows1
            single(wp + r0 * rb, rb, min(rows1, n_rows - r0), xp, xs, dp, ds, ap, as_, 1, n_blocks,
                   op + 4 * r0, 4)
        keep_alive(xf)
    return fused


@njit(**JIT)
def offset_sums(xq, n_tokens, n_cols, offset, out):
    """offset * (x[2i] + x[2i+1]) of each token's int8 quants as int16, n_cols // 2 of them at
    the start of each row of `out` (T, >= n_cols // 4 f32, its bytes reused): what the unsigned
    Q4_0/Q5_0 dots (blockdots_batch.UNSIGNED_OFFSET) take from their pmaddubsw pairs (at most
    16 * 254 in magnitude)."""
    for t in range(n_tokens):
        row = xq[t]
        dst = out[t].view(np.int16)
        for i in range(n_cols // 2):
            dst[i] = np.int16(offset) * (np.int16(row[2 * i]) + np.int16(row[2 * i + 1]))


@njit(**JIT)
def offset_quad_sums(xq, n_tokens, n_cols, offset, out):
    """-offset * (x[4i] + ... + x[4i+3]) of each token's int8 quants as int32, n_cols // 4 of
    them at the start of each row of `out` (T, >= n_cols // 4 f32, its bytes reused): the
    starting sums from which vpdpbusd of the unsigned quants u = q + offset leaves exactly
    ggml's lanes of q*x (blockdots_batch.VNNI_UNSIGNED)."""
    for t in range(n_tokens):
        row = xq[t]
        dst = out[t].view(np.int32)
        for i in range(n_cols // 4):
            j = 4 * i
            dst[i] = -np.int32(offset) * (np.int32(row[j]) + np.int32(row[j + 1]) + np.int32(row[j + 2])
                                          + np.int32(row[j + 3]))

"""Register tiles for the tiled flash attention (attention.attention_tiled): C[R, L W] += A[R, K] B[K, L W]
with every element of C one fma chain over k in order, so the result is bit for bit the
plain loop's (`for k: c = fma(a[r, k], b[k, j], c)`) while R x W accumulators of L lanes stay
in registers for the whole k loop. L is the machine's vector width (16 with AVX-512, 8
otherwise) and R x W must fit its register file: with AVX2's sixteen ymm registers, 4 x 4
accumulators of 16 lanes (32 ymm) spilled on every fma and ran at a third of the FMA rate.

Scores are A = queries (rows r, features k), B = the key tile transposed (features k, keys j);
the weighted values are A = probabilities (rows r, keys k), B = the value tile (keys k,
features j). numba alone keeps such accumulators in memory (one load and store per fma).
The one-chunk (decode) attention's K.Q, ggml_vec_dot_f16, is here too (f16_dot_lanes), and its
f16 accumulator's lanes (f16_round_lanes).
"""
from numba.extending import intrinsic

from .ir import F32T, F64T, HALF, I8, I16, I32, I64, Gen, i64_call, vec
from .ops import emit_v_expf16
from .simd import _loop

_tiles = {}


def outer_tile(rows, width, lanes=16):
    """numba intrinsic tile(a, a_rs, a_ks, b, b_rs, c, c_rs, k): addresses as int64, strides
    in bytes; C (rows x lanes*width f32 at c) += A (rows x k at a, element (r, k) at
    a + r*a_rs + k*a_ks) times B (k x lanes*width at b, row k at b + k*b_rs)."""
    key = (rows, width, lanes)
    if key in _tiles:
        return _tiles[key]
    name = f"dasllama_outer_tile_{rows}x{width}" + ("" if lanes == 16 else f"x{lanes}")
    VF = vec(F32T, lanes)
    vbytes = 4 * lanes

    def emit(b, args):
        g = Gen(b)
        a_addr, a_rs, a_ks, b_addr, b_rs, c_addr, c_rs, n_k = args
        a_p, b_p, c_p = (b.inttoptr(v, I8.as_pointer()) for v in (a_addr, b_addr, c_addr))
        c_rows = [g.at(c_p, b.mul(g.c(I64, r), c_rs)) for r in range(rows)]
        a_rows = [g.at(a_p, b.mul(g.c(I64, r), a_rs)) for r in range(rows)]
        init = [g.load(c_rows[r], vbytes * w, VF) for r in range(rows) for w in range(width)]

        def step(k, acc):
            b_row = g.at(b_p, b.mul(k, b_rs))
            bv = [g.load(b_row, vbytes * w, VF) for w in range(width)]
            a_off = b.mul(k, a_ks)
            av = [g.splat(g.load(a_rows[r], a_off, F32T), lanes) for r in range(rows)]
            return [g.fma(av[r], bv[w], acc[r * width + w]) for r in range(rows) for w in range(width)]

        acc = _loop(g, g.c(I64, 0), n_k, init, step)
        for r in range(rows):
            for w in range(width):
                ptr = b.bitcast(g.at(c_rows[r], vbytes * w), VF.as_pointer())
                b.store(acc[r * width + w], ptr).align = 1

    @intrinsic
    def tile(typingctx, a, a_rs, a_ks, bb, b_rs, c, c_rs, k):
        return i64_call(8, name, emit)

    tile._set_uuid(f"dasllama.fa_tiles.{name}")   # stable across processes: see simd.py
    _tiles[key] = tile
    return tile


def f16_dot_lanes(lanes):
    """numba intrinsic dot(q, k, n_steps, out): ggml_vec_dot_f16's vector part over
    n_steps * 4 * lanes elements, f32 queries at q against f16 keys at k (addresses as int64):
    4 accumulators of `lanes` lanes, fma over steps of 4 * lanes, then (acc0 + acc2) +
    (acc1 + acc3) stored as `lanes` f32 at out, for the caller's horizontal sum. numba kept
    the 4 x lanes chains scalar in memory (~550 cycles a 256-element key, against ~76 with
    this and the caller's fold)."""
    key = ("f16_dot", lanes)
    if key in _tiles:
        return _tiles[key]
    name = f"dasllama_f16_dot_{lanes}"
    VF, VH, VI = vec(F32T, lanes), vec(HALF, lanes), vec(I16, lanes)
    step_elems = 4 * lanes

    def emit(b, args):
        g = Gen(b)
        q_p, k_p, out_p = (b.inttoptr(args[i], I8.as_pointer()) for i in (0, 1, 3))

        def step(i, acc):
            base = b.mul(i, g.c(I64, step_elems))
            new = []
            for a in range(4):
                e = b.add(base, g.c(I64, lanes * a))
                kv = b.fpext(b.bitcast(g.load(k_p, b.mul(e, g.c(I64, 2)), VI), VH), VF)
                qv = g.load(q_p, b.mul(e, g.c(I64, 4)), VF)
                new.append(g.fma(kv, qv, acc[a]))
            return new

        acc = _loop(g, g.c(I64, 0), args[2], [g.c(VF, 0.0)] * 4, step)
        res = b.fadd(b.fadd(acc[0], acc[2]), b.fadd(acc[1], acc[3]))
        b.store(res, b.bitcast(out_p, VF.as_pointer())).align = 4

    @intrinsic
    def dot(typingctx, q, k, n_steps, out):
        return i64_call(4, name, emit)

    dot._set_uuid(f"dasllama.fa_tiles.{name}")
    _tiles[key] = dot
    return dot


MAD, SCALE = "mad", "scale"
# the half lanes' accumulator held as halves (2 bytes an element, no conversion a step)
MAD_HALVES, SCALE_HALVES = "mad_halves", "scale_halves"


def f16_round_lanes(lanes, mode):
    """numba intrinsic op(acc, factor_bits, v, n_steps) over n_steps * lanes f32 at acc, which
    hold f16 values (addresses as int64): the one-chunk attention's f16 accumulator, element by
    element, so any lane count gives its scalar loop's bits (numba left those loops scalar:
    ~60 ns a 64-wide value row, Qwen2.5's heads, against ~15 in lanes).
      MAD       acc = f16(fma(v, factor, acc)) in f32, v the f16 values at v, factor_bits the
                float32 factor's bits (f32_bits): ggml_vec_mad_f16's f32 lanes
      SCALE     acc = f16(acc * factor) in f32 (v unused): ggml_vec_scale_f16's
      MAD_HALVES  acc = fma(v, factor, acc) in half lanes over an accumulator of halves at acc
                (2 bytes an element), one rounding (factor_bits: the half's bits): AVX512-FP16's
                vfmadd*ph, exact where numba compiles for that CPU
      SCALE_HALVES  SCALE with a half factor over the halves: the same bits (a product of two
                halves is exact in f32, so SCALE's one rounding to half is the half product's)
    f16(.) rounds to half and back, as the cache's f16 accumulator holds it."""
    key = ("f16_round", lanes, mode)
    if key in _tiles:
        return _tiles[key]
    name = f"dasllama_f16_{mode}_{lanes}"
    VF, VH, VI = vec(F32T, lanes), vec(HALF, lanes), vec(I16, lanes)

    def emit(b, args):
        g = Gen(b)
        acc_p, v_p = b.inttoptr(args[0], I8.as_pointer()), b.inttoptr(args[2], I8.as_pointer())
        halves = mode in (MAD_HALVES, SCALE_HALVES)
        if halves:
            factor = g.splat(b.bitcast(b.trunc(args[1], I16), HALF), lanes)
        else:
            factor = g.splat(b.bitcast(b.trunc(args[1], I32), F32T), lanes)

        def step_halves(i, carry):
            off = b.mul(i, g.c(I64, 2 * lanes))
            acc = b.bitcast(g.load(acc_p, off, VI), VH)
            if mode == SCALE_HALVES:
                new = b.fmul(acc, factor)
            else:
                new = g.intr(f"llvm.fma.v{lanes}f16", VH, [b.bitcast(g.load(v_p, off, VI), VH), factor, acc])
            b.store(new, b.bitcast(g.at(acc_p, off), VH.as_pointer())).align = 1
            return carry

        def step(i, carry):
            off = b.mul(i, g.c(I64, lanes))
            acc = g.load(acc_p, b.mul(off, g.c(I64, 4)), VF)
            if mode == SCALE:
                new = b.fmul(acc, factor)
            else:
                v = b.bitcast(g.load(v_p, b.mul(off, g.c(I64, 2)), VI), VH)
                new = g.fma(b.fpext(v, VF), factor, acc)
            ptr = b.bitcast(g.at(acc_p, b.mul(off, g.c(I64, 4))), VF.as_pointer())
            b.store(b.fpext(b.fptrunc(new, VH), VF), ptr).align = 1
            return carry

        _loop(g, g.c(I64, 0), args[3], [g.c(I64, 0)], step_halves if halves else step)

    @intrinsic
    def op(typingctx, acc, factor_bits, v, n_steps):
        return i64_call(4, name, emit)

    op._set_uuid(f"dasllama.fa_tiles.{name}")
    _tiles[key] = op
    return op


def softmax_row(n_keys, masked):
    """numba intrinsic op(row, kpos, lo, hi, scale_bits, m_old_bits, res) over one query row's
    n_keys scores of a key tile (f32 at row, a multiple of 16, addresses as int64), in 16-lane
    vectors: each score times the f32 scale (its bits), -inf where masked (kpos: the tile's
    cells' positions, int64; a cell is seen where lo <= position <= hi), then the tile's max,
    the new running max m = max(m_old, tile max) (f32 bits), row[k] = ggml_v_expf(row[k] - m)
    (ops.emit_v_expf16), and their sum in ggml_vec_soft_max_f32's order (_mm512_reduce_add_ps of
    each 16, added in double). res (2 f64): the tile's max, the sum. numba ran these as three
    loops of 8 lanes (~0.9 ms of a gemma3 layer's attention at pp512 on one thread)."""
    key = ("softmax_row", n_keys, masked)
    if key in _tiles:
        return _tiles[key]
    name = f"dasllama_softmax_row_{n_keys}" + ("_masked" if masked else "")
    VF, VL = vec(F32T, 16), vec(I64, 16)

    def emit(b, args):
        g = Gen(b)
        row_p, kpos_p, res_p = (b.inttoptr(args[i], I8.as_pointer()) for i in (0, 1, 6))
        scale = g.splat(b.bitcast(b.trunc(args[4], I32), F32T), 16)
        scores = []
        for i in range(n_keys // 16):
            s = b.fmul(g.load(row_p, 64 * i, VF), scale)
            if masked:
                kp = g.load(kpos_p, 128 * i, VL)
                seen = b.and_(b.icmp_signed("<=", kp, g.splat(args[3], 16)), b.icmp_signed(">=", kp, g.splat(args[2], 16)))
                s = b.select(seen, s, g.c(VF, float("-inf")))
            scores.append(s)
        vmax = lambda x, y: g.intr("llvm.maxnum.v16f32", VF, [x, y])
        top = scores[0]
        for s in scores[1:]:
            top = vmax(top, s)
        tile_max = g.reduce_tree(top, vmax)
        m_old = b.bitcast(b.trunc(args[5], I32), F32T)
        m_new = g.intr("llvm.maxnum.f32", F32T, [m_old, tile_max])
        total = g.c(F64T, 0.0)
        for i, s in enumerate(scores):
            e = emit_v_expf16(g, b.fsub(s, g.splat(m_new, 16)))
            b.store(e, b.bitcast(g.at(row_p, 64 * i), VF.as_pointer())).align = 4
            total = b.fadd(total, b.fpext(g.reduce_tree(e, b.fadd), F64T))
        out = b.bitcast(res_p, F64T.as_pointer())
        b.store(b.fpext(tile_max, F64T), out).align = 8
        b.store(total, b.gep(out, [g.c(I32, 1)])).align = 8

    @intrinsic
    def op(typingctx, row, kpos, lo, hi, scale_bits, m_old_bits, res):
        return i64_call(7, name, emit)

    op._set_uuid(f"dasllama.fa_tiles.{name}")
    _tiles[key] = op
    return op

"""Row passes of the media towers written as explicit 16-lane IR: the loops numba left scalar or
half-vectorised (its exp with a floor and an int shift, a masked tail, a sum reduction), which
were the larger part of the towers' attention (the online softmax of kernels/amx_tower.py:
2.7 cycles a score, the bf16 tiles around it a fraction of that).

Each is an @intrinsic over int64 addresses, strides in bytes, and generated once per variant.
"""
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from .ir import F32T, I8, I16, I32, I64, Gen, i64_call, vec
from .quants import JIT
from .simd import _loop
from .speech import encoder_ops as eo


class BFloatType(ir.types._BaseFloatType):
    """LLVM's bfloat, which llvmlite does not spell: `fptrunc` to it is one vcvtneps2bf16
    (round to nearest even) where AVX512-BF16 is, the six integer ops of amx.bf16_round else."""
    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"


BFloatType._create_instance()

V16F, V16I, V16H, V16B = vec(F32T, 16), vec(I32, 16), vec(I16, 16), vec(BFloatType(), 16)


def _exp_parts16(g, x):
    """(y, n) with e^x = y * 2^n on 16 lanes: Cephes' expf reduction and polynomial."""
    b = g.b
    c = lambda v: g.c(V16F, float(v))
    n = g.intr("llvm.floor.v16f32", V16F, [g.fma(x, c(eo._LOG2E), c(eo._HALF))])
    r = g.fma(n, c(-eo._LN2_LO), g.fma(n, c(-eo._LN2_HI), x))
    p = c(eo._P0)
    for coef in (eo._P1, eo._P2, eo._P3, eo._P4, eo._P5):
        p = g.fma(p, r, c(coef))
    return g.fma(b.fmul(p, r), r, b.fadd(r, c(1.0))), n


def exp_nonpositive16(g, x):
    """encoder_ops.exp_nonpositive on 16 lanes: Cephes' expf, x clamped below at _EXP_MIN."""
    b = g.b
    y, n = _exp_parts16(g, g.intr("llvm.maxnum.v16f32", V16F, [x, g.c(V16F, float(eo._EXP_MIN))]))
    scale = b.bitcast(b.shl(b.add(b.fptosi(n, V16I), g.c(V16I, 127)), g.c(V16I, 23)), V16F)
    return b.fmul(y, scale)


def exp_scalef16(g, x):
    """exp_nonpositive16 without the clamp, 2^n applied by vscalefps (underflow to 0, not to
    e^_EXP_MIN): four fewer ops a vector, for finite x <= 0 (a softmax's s - max). The same
    value wherever e^x is a normal float."""
    c = lambda v: g.c(V16F, float(v))
    y, n = _exp_parts16(g, x)
    return g.intr("llvm.x86.avx512.mask.scalef.ps.512", V16F,
                  [y, n, c(0.0), ir.Constant(I16, -1), ir.Constant(I32, 4)])


def bf16_bits16(g, v):
    """The bf16 bits (i16 lanes) nearest the 16 floats v, ties to even (amx.bf16_round)."""
    return g.b.bitcast(g.b.fptrunc(v, V16B), V16H)


def bf16_value16(g, h):
    """The 16 floats of bf16 bits h (i16 lanes)."""
    return g.b.bitcast(g.b.shl(g.b.zext(h, V16I), g.c(V16I, 16)), V16F)


_softmax = {}


def _emit_softmax(with_lo, b, args):
    """The body of softmax_block's function. The emitters are module functions, so an
    intrinsic's pickled form (its closure: a name, a flag) is the same before and after it is
    compiled, and the numba cache key of a kernel that calls it is too (a nested emitter drags
    in the IR types, which cache their text once printed: the attention's tile missed the cache
    in every process)."""
    g = Gen(b)
    s, s_rs, n, n_zero, p, p_part, p_rs, m, l, o, o_rs, n_o, n_rows = args
    s_p, p_p, m_p, l_p, o_p = (b.inttoptr(v, I8.as_pointer()) for v in (s, p, m, l, o))
    n_full = b.sdiv(n, g.c(I64, 16))
    tail = b.srem(n, g.c(I64, 16))
    lane = g.c(V16I, list(range(16)))
    tail_mask = b.icmp_signed("<", lane, g.splat(b.trunc(tail, I32), 16))
    neg_inf = g.c(V16F, float("-inf"))
    zero16, zero_h = g.c(V16F, 0.0), g.c(V16H, 0)
    vmax = lambda a, c: g.intr("llvm.maxnum.v16f32", V16F, [a, c])

    def row(t, acc):
        s_row = g.at(s_p, b.mul(t, s_rs))
        hi_row = g.at(p_p, b.mul(t, p_rs))
        lo_row = g.at(hi_row, p_part)
        (mx,) = _loop(g, g.c(I64, 0), n_full, [neg_inf],
                      lambda k, a: [vmax(a[0], g.load(s_row, b.mul(k, g.c(I64, 64)), V16F))])
        tail_at = b.mul(n_full, g.c(I64, 64))
        has_tail = b.icmp_signed(">", tail, g.c(I64, 0))
        tail_s = b.select(tail_mask, g.load(s_row, tail_at, V16F), neg_inf)
        mx = b.select(has_tail, vmax(mx, tail_s), mx)
        row_max = g.reduce_tree(mx, vmax)
        m_at = b.bitcast(g.at(m_p, b.mul(t, g.c(I64, 4))), F32T.as_pointer())
        l_at = b.bitcast(g.at(l_p, b.mul(t, g.c(I64, 4))), F32T.as_pointer())
        m_old = b.load(m_at)
        m_new = g.intr("llvm.maxnum.f32", F32T, [m_old, row_max])
        alpha = exp_nonpositive16(g, g.splat(b.fsub(m_old, m_new), 16))   # 1 exactly if no new max
        b.store(m_new, m_at)
        o_row = g.at(o_p, b.mul(t, o_rs))

        def rescale(c, a):
            at = b.bitcast(g.at(o_row, b.mul(c, g.c(I64, 64))), V16F.as_pointer())
            v = b.load(at)
            v.align = 4
            b.store(b.fmul(v, alpha), at).align = 4
            return a

        _loop(g, g.c(I64, 0), b.sdiv(n_o, g.c(I64, 16)), [g.c(I64, 0)], rescale)
        m_vec = g.splat(m_new, 16)

        def put(k, e):
            hi = bf16_bits16(g, e)
            b.store(hi, b.bitcast(g.at(hi_row, b.mul(k, g.c(I64, 32))), V16H.as_pointer())).align = 2
            if with_lo:
                rest = b.fsub(e, bf16_value16(g, hi))
                b.store(bf16_bits16(g, rest),
                        b.bitcast(g.at(lo_row, b.mul(k, g.c(I64, 32))), V16H.as_pointer())).align = 2

        def chunk(k, a):
            e = exp_scalef16(g, b.fsub(g.load(s_row, b.mul(k, g.c(I64, 64)), V16F), m_vec))
            put(k, e)
            return [b.fadd(a[0], e)]

        (total,) = _loop(g, g.c(I64, 0), n_full, [zero16], chunk)
        e_tail = b.select(tail_mask, exp_scalef16(g, b.fsub(g.load(s_row, tail_at, V16F), m_vec)), zero16)
        e_tail = b.select(has_tail, e_tail, zero16)
        total = b.fadd(total, e_tail)
        n_done = b.add(n_full, b.zext(has_tail, I64))
        with b.if_then(has_tail):
            put(n_full, e_tail)

        def clear(k, a):
            b.store(zero_h, b.bitcast(g.at(hi_row, b.mul(k, g.c(I64, 32))), V16H.as_pointer())).align = 2
            b.store(zero_h, b.bitcast(g.at(lo_row, b.mul(k, g.c(I64, 32))), V16H.as_pointer())).align = 2
            return a

        _loop(g, n_done, b.sdiv(n_zero, g.c(I64, 16)), [g.c(I64, 0)], clear)
        sum_ = g.reduce_tree(total, b.fadd)
        alpha0 = b.extract_element(alpha, g.c(I32, 0))
        b.store(b.fadd(b.fmul(b.load(l_at), alpha0), sum_), l_at)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


def softmax_block(with_lo):
    """numba intrinsic run(s, s_rs, n, n_zero, p, p_part, p_rs, m, l, o, o_rs, n_o, n_rows):
    one key block of flash attention's online softmax over n_rows rows: scores s
    (float32, the first n of a row real), the running maxima m and sums l (float32 a row), the
    exp-weighted sums o (float32, n_o a row, a multiple of 16) rescaled by e^(old - new max);
    p (uint16, rows p_rs apart) <- the bf16 bits of e^(s - max) (and at p + p_part the rest's,
    with_lo), zeros on [n, n_zero) (n_zero a multiple of 16); l += the exps' sum."""
    if with_lo in _softmax:
        return _softmax[with_lo]
    name = f"dasllama_tower_softmax_{int(with_lo)}"

    @intrinsic
    def run(typingctx, s, s_rs, n, n_zero, p, p_part, p_rs, m, l, o, o_rs, n_o, n_rows):
        return i64_call(13, name, lambda b, args: _emit_softmax(with_lo, b, args))

    run._set_uuid(f"dasllama.tower_rows.{name}")
    _softmax[with_lo] = run
    return run


_gelu = {}


def _erf16(g, x):
    """encoder_ops.erf_f32 on 16 lanes: x P(x^2) below |x| = 1, 1 - e^Q(min(|x|, 4)) past it."""
    b = g.b
    c = lambda v: g.c(V16F, float(v))
    s = b.fmul(x, x)
    near = c(eo._ERF_P[0])
    for coef in eo._ERF_P[1:]:
        near = g.fma(near, s, c(coef))
    near = b.fmul(x, near)
    ax = b.bitcast(b.and_(b.bitcast(x, V16I), g.c(V16I, 0x7FFFFFFF)), V16F)
    t = g.intr("llvm.minnum.v16f32", V16F, [ax, c(4.0)])
    q = c(eo._ERF_Q[0])
    for coef in eo._ERF_Q[1:]:
        q = g.fma(q, t, c(coef))
    far = b.fsub(c(1.0), exp_nonpositive16(g, g.intr("llvm.minnum.v16f32", V16F, [q, c(0.0)])))
    sign = b.and_(b.bitcast(x, V16I), g.c(V16I, -0x80000000))
    far = b.bitcast(b.or_(b.bitcast(far, V16I), sign), V16F)
    return b.select(b.fcmp_ordered("<", ax, c(1.0)), near, far)


def gelu_erf16(g, v):
    """0.5 v (1 + erf(v / sqrt 2)) on 16 lanes, as encoder_ops.bias_gelu_erf after its bias."""
    b = g.b
    erf = _erf16(g, b.fmul(v, g.c(V16F, float(eo._SQRT_2_INV))))
    return b.fmul(b.fmul(g.c(V16F, 0.5), v), b.fadd(g.c(V16F, 1.0), erf))


def _emit_bias_gelu_erf(b, args):
    """The body of bias_gelu_erf16's function."""
    g = Gen(b)
    x, x_rs, bias, n16, n_rows = args
    x_p, b_p = (b.inttoptr(v, I8.as_pointer()) for v in (x, bias))

    def row(t, acc):
        x_row = g.at(x_p, b.mul(t, x_rs))

        def chunk(k, acc):
            off = b.mul(k, g.c(I64, 64))
            v = b.fadd(g.load(x_row, off, V16F), g.load(b_p, off, V16F))
            b.store(gelu_erf16(g, v), b.bitcast(g.at(x_row, off), V16F.as_pointer())).align = 4
            return acc

        _loop(g, g.c(I64, 0), n16, [g.c(I64, 0)], chunk)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


def bias_gelu_erf16():
    """numba intrinsic run(x, x_rs, bias, n16, n_rows): encoder_ops.bias_gelu_erf in place on
    the first 16 n16 columns of n_rows float32 rows (x_rs bytes apart), bias float32."""
    if "run" in _gelu:
        return _gelu["run"]
    name = "dasllama_tower_bias_gelu_erf"

    @intrinsic
    def run(typingctx, x, x_rs, bias, n16, n_rows):
        return i64_call(5, name, _emit_bias_gelu_erf)

    run._set_uuid(f"dasllama.tower_rows.{name}")
    _gelu["run"] = run
    return run


_gelu_erf16 = bias_gelu_erf16()


@njit(**JIT, fastmath={"contract"})
def bias_gelu_erf_rows(x, bias):
    """encoder_ops.bias_gelu_erf (x (T, n) <- gelu_erf(x + bias) in place, rows contiguous):
    16 columns at a time in IR, the rest of a row as it does (numba's loop was ~1.6 ns a
    value, ~6 % of the qwen2a tower)."""
    n_rows, n_cols = x.shape
    n16 = n_cols // 16
    _gelu_erf16(x.ctypes.data, x.strides[0], bias.ctypes.data, n16, n_rows)
    for t in range(n_rows):
        for j in range(16 * n16, n_cols):
            v = x[t, j] + bias[j]
            x[t, j] = eo._HALF * v * (eo._ONE + eo.erf_f32(v * eo._SQRT_2_INV))


def _emit_pack_head(b, args):
    """The body of pack_head16's function: one pass over a head's q, k, v columns, two tokens a
    step (v's B tiles pair consecutive tokens)."""
    g = Gen(b)
    (qkv, qkv_rs, n_tok, q_col, k_col, v_col, d16, scale_bits, qp, qp_part, qp_rs,
     kp, kp_part, kp_tt, vp, vp_part, vp_vc) = args
    src, q_p, k_p, v_p = (b.inttoptr(v, I8.as_pointer()) for v in (qkv, qp, kp, vp))
    scale = g.splat(b.bitcast(b.trunc(scale_bits, I32), F32T), 16)
    v8i = vec(I32, 8)
    zero16 = g.c(V16F, 0.0)
    f16 = lambda v: b.fpext(b.fptrunc(v, vec(ir.HalfType(), 16)), V16F)   # libmtmd's K, V casts

    def parts(v):
        hi = bf16_bits16(g, v)
        return hi, bf16_bits16(g, b.fsub(v, bf16_value16(g, hi)))

    def store(ptr, off, value):
        b.store(value, b.bitcast(g.at(ptr, off), value.type.as_pointer())).align = 2

    def step(tp, acc):
        t0 = b.mul(tp, g.c(I64, 2))
        t1 = b.add(t0, g.c(I64, 1))
        has_t1 = b.icmp_signed("<", t1, n_tok)
        rows = [g.at(src, b.mul(t, qkv_rs)) for t in (t0, b.select(has_t1, t1, t0))]

        def chunk(j, acc):
            col = b.mul(j, g.c(I64, 64))
            load = lambda row, base: g.load(row, b.add(base, col), V16F)
            v_parts = []
            for which, (t, row) in enumerate(zip((t0, t1), rows)):
                q_parts = parts(b.fmul(load(row, q_col), scale))
                k_parts = parts(f16(load(row, k_col)))
                v_val = f16(load(row, v_col))
                v_parts.append(parts(v_val if which == 0 else b.select(has_t1, v_val, zero16)))

                def put_qk():
                    for p, (qh, kh) in enumerate(zip(q_parts, k_parts)):
                        store(q_p, b.add(b.add(b.mul(g.c(I64, p), qp_part), b.mul(t, qp_rs)), b.mul(j, g.c(I64, 32))), qh)
                        # k^T's B tiles: the pair (c, c + 1) of token t at [t / 16, c / 32, (c % 32) / 2, t % 16]
                        base = b.add(b.add(b.mul(g.c(I64, p), kp_part), b.mul(b.sdiv(t, g.c(I64, 16)), kp_tt)),
                                     b.add(b.mul(b.sdiv(j, g.c(I64, 2)), g.c(I64, 1024)),
                                           b.add(b.mul(b.srem(j, g.c(I64, 2)), g.c(I64, 512)),
                                                 b.mul(b.srem(t, g.c(I64, 16)), g.c(I64, 4)))))
                        pairs = b.bitcast(kh, v8i)
                        for m in range(8):
                            store(k_p, b.add(base, g.c(I64, 64 * m)), b.extract_element(pairs, g.c(I32, m)))

                if which == 0:
                    put_qk()
                else:
                    with b.if_then(has_t1):
                        put_qk()
            # v's B tiles: tokens (t0, t1) interleaved, 16 columns of one 16-column strip
            base = b.add(b.mul(j, vp_vc), b.add(b.mul(b.sdiv(t0, g.c(I64, 32)), g.c(I64, 1024)),
                                                 b.mul(b.sdiv(b.srem(t0, g.c(I64, 32)), g.c(I64, 2)), g.c(I64, 64))))
            for p in range(2):
                mixed = g.shuffle(v_parts[0][p], v_parts[1][p], [k for i in range(16) for k in (i, 16 + i)])
                store(v_p, b.add(base, b.mul(g.c(I64, p), vp_part)), mixed)
            return acc

        _loop(g, g.c(I64, 0), d16, [g.c(I64, 0)], chunk)
        return acc

    _loop(g, g.c(I64, 0), b.sdiv(b.add(n_tok, g.c(I64, 1)), g.c(I64, 2)), [g.c(I64, 0)], step)


_pack = {}


def pack_head16():
    """numba intrinsic run(qkv, qkv_rs, n_tok, q_col, k_col, v_col, d16, scale_bits, qp, qp_part,
    qp_rs, kp, kp_part, kp_tt, vp, vp_part, vp_vc): amx_tower's pack_head for a head 16 d16
    wide, its q, k, v columns at byte offsets q_col, k_col, v_col of the rows of qkv (float32,
    qkv_rs apart): q times scale (a float32's bits) in two bf16 parts at qp (part p at p
    qp_part, token rows qp_rs apart); k and v rounded to f16, in their two parts, as the B
    tiles of k^T at kp (16-token strips kp_tt apart) and of v at vp (16-column strips vp_vc
    apart). The same bits as pack_head, vector by vector instead of value by value."""
    if "run" in _pack:
        return _pack["run"]
    name = "dasllama_tower_pack_head16"

    @intrinsic
    def run(typingctx, qkv, qkv_rs, n_tok, q_col, k_col, v_col, d16, scale_bits, qp, qp_part, qp_rs,
            kp, kp_part, kp_tt, vp, vp_part, vp_vc):
        return i64_call(17, name, _emit_pack_head)

    run._set_uuid(f"dasllama.tower_rows.{name}")
    _pack["run"] = run
    return run

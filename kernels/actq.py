"""Activation quantisers: each row of x into the format the weight's integer dot wants.

ggml quantises activations once per row to the weight type's vec_dot_type; the kind ids here
are those ggml type ids (Q8_0=8, Q8_1=9, Q8_K=15, F32=0, F16=1, BF16=30). Rounding follows
the x86 build of llama.cpp 0c1e570: quantize_row_q8_0/q8_1 multiply by 127/amax and round to
nearest even (`_mm256_round_ps`); q8_K is the reference (iscale = -127/max of the signed
extreme, nearest_int, clamp at 127).

The caller owns the buffers (T = tokens, C = features):
    xq int8 (T, C)         quants
    xd f32  (T, C // 32)   Q8_0/Q8_1: block scale (f16-rounded); Q8_K: xd[t, i] super-block scale
    xa f32  (T, C // 16)   Q8_1: xa[t, i] = f16(d * sum q) per block; Q8_K: bsums per 16
    xf f32  (T, C)         float weights: x rounded to f16 / bf16, or copied for F32
"""
import numba
import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from . import formats
from .formats.common import ACT_BF16, ACT_F16, ACT_F32, ACT_Q8_0, ACT_Q8_1, ACT_Q8_K  # noqa: F401
from .ir import F32T, I8, I32, I64, Gen, bits_f32, f16_to_f32, f32_bits, f32_to_f16, i64_call, vec
from .quants import COPY_LAYOUTS, JIT
from .simd import _loop

# qtype -> the activation format (ggml vec_dot_type id) its weights multiply with: each
# format's ACT, a copy layout its source's, -1 for what is none of them
_ACT_KIND = formats.table("ACT", default=-1)
for _layout, (_source, _) in COPY_LAYOUTS.items():
    _ACT_KIND[_layout] = _ACT_KIND[_source]


@njit(**JIT)
def act_kind(qtype):
    """The activation format (ggml vec_dot_type id) that weights of `qtype` multiply with."""
    return _ACT_KIND[qtype]


def act_buffers(n_tokens, n_cols):
    """Fresh (xq, xd, xa, xf) for up to n_tokens rows of n_cols features."""
    return (np.zeros((n_tokens, n_cols), np.int8), np.zeros((n_tokens, n_cols // 32), np.float32),
            np.zeros((n_tokens, n_cols // 16), np.float32), np.zeros((n_tokens, n_cols), np.float32))


@njit(**JIT, inline="always")
def round_f16(x):
    return f16_to_f32(f32_to_f16(x))


@njit(**JIT, inline="always")
def _round_bf16(x):
    """ggml_compute_fp32_to_bf16: nearest even, NaN kept quiet."""
    u = f32_bits(x)
    if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
        return bits_f32((u & np.uint32(0xFFFF0000)) | np.uint32(64 << 16))
    u = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    return bits_f32(u << np.uint32(16))


@njit(**JIT)
def quantize_row_q8_0(x, xq, xd, xa, with_sums):
    """One row: x (C,) f32 -> xq (C,) int8, xd (C//32,) and, for Q8_1, xa (C//32,) sums."""
    for b in range(x.shape[0] // 32):
        o = 32 * b
        amax = np.float32(0)
        for e in range(32):
            amax = max(amax, abs(x[o + e]))
        d = amax / np.float32(127)
        inv = np.float32(127) / amax if amax != 0 else np.float32(0)
        total = 0
        for e in range(32):
            q = np.rint(x[o + e] * inv)  # at most 127 in magnitude: amax * (127/amax) rounds there
            xq[o + e] = np.int8(q)
            total += np.int32(q)
        xd[b] = round_f16(d)
        if with_sums:
            xa[b] = round_f16(d * np.float32(total))


V16F, V16I, V16B8 = vec(F32T, 16), vec(I32, 16), vec(I8, 16)


def emit_q8_0_block(g, halves, q_row, d_row, kb):
    """Block kb of a row as quantize_row_q8_0 (ggml's) writes it, from its 32 floats in two
    16-lane vectors: the int8 quants at q_row + 32 kb, the f16-rounded scale as float32 at
    d_row + 4 kb (i8 pointers)."""
    b = g.b
    vmax = lambda a, c: g.intr("llvm.maxnum.v16f32", V16F, [a, c])
    abs_mask = g.c(V16I, 0x7FFFFFFF)
    mags = [b.bitcast(b.and_(b.bitcast(v, V16I), abs_mask), V16F) for v in halves]
    amax = g.reduce_tree(vmax(*mags), vmax)
    d = b.fdiv(amax, ir.Constant(F32T, 127.0))
    inv = b.select(b.fcmp_ordered("!=", amax, ir.Constant(F32T, 0.0)),
                   b.fdiv(ir.Constant(F32T, 127.0), amax), ir.Constant(F32T, 0.0))
    inv16 = g.splat(inv, 16)
    for h, v in enumerate(halves):
        q = g.intr("llvm.roundeven.v16f32", V16F, [b.fmul(v, inv16)])
        ptr = b.bitcast(g.at(q_row, b.add(b.mul(kb, g.c(I64, 32)), g.c(I64, 16 * h))), V16B8.as_pointer())
        b.store(b.trunc(b.fptosi(q, V16I), V16B8), ptr).align = 1
    d_at = b.bitcast(g.at(d_row, b.mul(kb, g.c(I64, 4))), F32T.as_pointer())
    b.store(b.fpext(b.fptrunc(d, ir.HalfType()), F32T), d_at).align = 4


def emit_q8_0_rows(g, inputs, q, q_rs, d, d_rs, n_kb, n_rows, halves_of):
    """n_rows rows quantised as quantize_row_q8_0 quantises them, block by block in registers:
    halves_of(row pointers, offsets) gives a block's 32 floats as two 16-lane vectors from the
    row's pointer into each of `inputs` ((i8 pointer, row stride in bytes) pairs) and the byte
    offsets of its halves in a float row; the quants go to q, the scales to d (emit_q8_0_block),
    rows q_rs and d_rs bytes apart."""
    b = g.b

    def row(t, acc):
        ins = [g.at(p, b.mul(t, rs)) for p, rs in inputs]
        q_row, d_row = g.at(q, b.mul(t, q_rs)), g.at(d, b.mul(t, d_rs))

        def block(kb, acc):
            offs = [b.add(b.mul(kb, g.c(I64, 128)), g.c(I64, 64 * h)) for h in range(2)]
            emit_q8_0_block(g, halves_of(ins, offs), q_row, d_row, kb)
            return acc

        _loop(g, g.c(I64, 0), n_kb, [g.c(I64, 0)], block)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


def _emit_quantize(b, args):
    """The body of quantize_q8_0_rows' function."""
    g = Gen(b)
    x, x_rs, xq, xq_rs, xd, xd_rs, n_kb, n_rows = args
    x_p, q_p, d_p = (b.inttoptr(v, I8.as_pointer()) for v in (x, xq, xd))
    emit_q8_0_rows(g, [(x_p, x_rs)], q_p, xq_rs, d_p, xd_rs, n_kb, n_rows,
                   lambda ins, offs: [g.load(ins[0], o, V16F) for o in offs])


@intrinsic
def quantize_q8_0_rows(typingctx, x, x_rs, xq, xq_rs, xd, xd_rs, n_kb, n_rows):
    """run(x, x_rs, xq, xq_rs, xd, xd_rs, n_kb, n_rows) at int64 addresses and byte strides:
    quantize_row_q8_0 (ggml's) of n_rows float32 rows of 32 n_kb at x into int8 xq and the
    blocks' f16-rounded scales, float32, at xd; bit for bit its result, a block two vectors
    (the numba loop takes 3.7 cycles a value: ~45 ms of the qwen2a tower's 190 in its
    products, 9 % of a gemma3 pp512 on one thread)."""
    return i64_call(8, "dasllama_quantize_q8_0_rows", _emit_quantize)


quantize_q8_0_rows._set_uuid("dasllama.actq.quantize_q8_0_rows")     # a stable disk-cache key


def _emit_quantize_q8_k(b, args):
    """The body of quantize_q8_k_rows' function."""
    g = Gen(b)
    x, x_rs, xq, xq_rs, xd, xd_rs, xa, xa_rs, n_sb, n_rows = args
    x_p, q_p, d_p, a_p = (b.inttoptr(v, I8.as_pointer()) for v in (x, xq, xd, xa))
    vmax = lambda a, c: g.intr("llvm.maxnum.v16f32", V16F, [a, c])
    abs_mask = g.c(V16I, 0x7FFFFFFF)
    zero, i16 = ir.Constant(F32T, 0.0), ir.IntType(16)

    def row(t, acc):
        x_row, q_row, d_row, a_row = (g.at(p, b.mul(t, rs)) for p, rs in
                                      ((x_p, x_rs), (q_p, xq_rs), (d_p, xd_rs), (a_p, xa_rs)))

        def block(sb, acc):
            vs = [g.load(x_row, b.add(b.mul(sb, g.c(I64, 1024)), g.c(I64, 64 * i)), V16F) for i in range(16)]
            mags = [b.bitcast(b.and_(b.bitcast(v, V16I), abs_mask), V16F) for v in vs]
            top = mags[0]
            for m in mags[1:]:
                top = vmax(top, m)
            amax = g.reduce_tree(top, vmax)
            # ggml's scan keeps the first value of the largest magnitude (`>`): its index is the
            # first set bit of the first vector that holds the magnitude
            at = g.c(I64, 0)
            for i in reversed(range(16)):
                hits = b.bitcast(b.fcmp_ordered("==", mags[i], g.splat(amax, 16)), i16)
                first = b.add(g.c(I64, 16 * i), b.zext(g.intr("llvm.cttz.i16", i16, [hits, ir.Constant(ir.IntType(1), 0)]), I64))
                at = b.select(b.icmp_unsigned("!=", hits, ir.Constant(i16, 0)), first, at)
            signed = g.f32(x_row, b.add(b.mul(sb, g.c(I64, 1024)), b.mul(at, g.c(I64, 4))))
            empty = b.fcmp_ordered("==", amax, zero)
            iscale = b.select(empty, zero, b.fdiv(ir.Constant(F32T, -127.0), signed))
            scale16 = g.splat(iscale, 16)
            for i, v in enumerate(vs):
                q = g.intr("llvm.roundeven.v16f32", V16F, [b.fmul(scale16, v)])
                q = b.fptosi(g.intr("llvm.minnum.v16f32", V16F, [q, g.c(V16F, 127.0)]), V16I)
                ptr = b.bitcast(g.at(q_row, b.add(b.mul(sb, g.c(I64, 256)), g.c(I64, 16 * i))), V16B8.as_pointer())
                b.store(b.trunc(q, V16B8), ptr).align = 1
                a_at = b.bitcast(g.at(a_row, b.add(b.mul(sb, g.c(I64, 64)), g.c(I64, 4 * i))), F32T.as_pointer())
                b.store(b.sitofp(g.intr("llvm.vector.reduce.add.v16i32", I32, [q]), F32T), a_at).align = 4
            d_at = b.bitcast(g.at(d_row, b.mul(sb, g.c(I64, 4))), F32T.as_pointer())
            b.store(b.select(empty, zero, b.fdiv(ir.Constant(F32T, 1.0), iscale)), d_at).align = 4
            return acc

        _loop(g, g.c(I64, 0), n_sb, [g.c(I64, 0)], block)
        return acc

    _loop(g, g.c(I64, 0), n_rows, [g.c(I64, 0)], row)


@intrinsic
def quantize_q8_k_rows(typingctx, x, x_rs, xq, xq_rs, xd, xd_rs, xa, xa_rs, n_sb, n_rows):
    """run(x, x_rs, xq, xq_rs, xd, xd_rs, xa, xa_rs, n_sb, n_rows) at int64 addresses and byte
    strides: quantize_row_q8_k of n_rows float32 rows of 256 n_sb at x (int8 quants at xq, the
    super-blocks' scales at xd, the sums per 16 as float32 at xa), bit for bit, a super-block
    sixteen vectors: the largest magnitude a max tree, its first index (the signed value
    ggml's scan keeps) the first set bit of the compare masks."""
    return i64_call(10, "dasllama_quantize_q8_k_rows", _emit_quantize_q8_k)


quantize_q8_k_rows._set_uuid("dasllama.actq.quantize_q8_k_rows")     # a stable disk-cache key


@njit(**JIT)
def quantize_row_q8_k(x, xq, xd, xa):
    """One row: x (C,) f32 -> xq (C,) int8, xd (C//256,) scales, xa (C//16,) bsums."""
    for b in range(x.shape[0] // 256):
        o = 256 * b
        amax = np.float32(0)
        vmax = np.float32(0)
        for e in range(256):
            ax = abs(x[o + e])
            if ax > amax:
                amax = ax
                vmax = x[o + e]
        if amax == 0:
            xd[b] = 0
            for e in range(256):
                xq[o + e] = 0
            for g in range(16):
                xa[16 * b + g] = 0
            continue
        iscale = np.float32(-127) / vmax
        for g in range(16):
            total = 0
            for e in range(o + 16 * g, o + 16 * g + 16):
                q = min(np.int32(np.rint(iscale * x[e])), 127)
                xq[e] = np.int8(q)
                total += q
            xa[16 * b + g] = np.float32(total)
        xd[b] = np.float32(1) / iscale


@njit(**JIT)
def _quantize_row(kind, x, xq, xd, xa, xf):
    if kind == ACT_Q8_0 or kind == ACT_Q8_1:
        quantize_row_q8_0(x, xq, xd, xa, kind == ACT_Q8_1)
    elif kind == ACT_Q8_K:
        quantize_row_q8_k(x, xq, xd, xa)
    elif kind == ACT_F16:
        for e in range(x.shape[0]):
            xf[e] = round_f16(x[e])
    elif kind == ACT_BF16:
        for e in range(x.shape[0]):
            xf[e] = _round_bf16(x[e])
    else:
        for e in range(x.shape[0]):
            xf[e] = x[e]


@njit(**JIT, inline="always")
def _quantize_rows(kind, x, xq, xd, xa, r0, n):
    """Rows r0 .. r0 + n of x into Q8_0 or Q8_K (kind) through the IR quantisers."""
    if kind == ACT_Q8_0:
        quantize_q8_0_rows(x[r0:].ctypes.data, x.strides[0], xq[r0:].ctypes.data, xq.strides[0],
                           xd[r0:].ctypes.data, xd.strides[0], x.shape[1] // 32, n)
    else:
        quantize_q8_k_rows(x[r0:].ctypes.data, x.strides[0], xq[r0:].ctypes.data, xq.strides[0],
                           xd[r0:].ctypes.data, xd.strides[0], xa[r0:].ctypes.data, xa.strides[0],
                           x.shape[1] // 256, n)


# rows from which a batch is quantised on the thread pool (rows are independent; ops.py's
# row-wise ops use the same threshold)
PAR_ROWS = 16


@njit(**JIT, parallel=True)
def quantize_act(kind, x, xq, xd, xa, xf):
    """Fill the buffers of `kind` from x (T, C) f32, for the first T rows."""
    T = x.shape[0]
    if kind == ACT_Q8_0 or kind == ACT_Q8_K:    # the rows as 16-lane IR, PAR_ROWS a call
        if T < PAR_ROWS:    # a decode step's: no parallel region
            _quantize_rows(kind, x, xq, xd, xa, 0, T)
        else:
            for t0 in numba.prange((T + PAR_ROWS - 1) // PAR_ROWS):
                _quantize_rows(kind, x, xq, xd, xa, t0 * PAR_ROWS, min(PAR_ROWS, T - t0 * PAR_ROWS))
    elif T < PAR_ROWS:
        for t in range(T):
            _quantize_row(kind, x[t], xq[t], xd[t], xa[t], xf[t])
    else:
        for t in numba.prange(T):
            _quantize_row(kind, x[t], xq[t], xd[t], xa[t], xf[t])

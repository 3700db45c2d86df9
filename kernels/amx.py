"""AMX (Sapphire Rapids' tile unit), shared by the kernels that use it: the OS's grant of the
tile state, the tile configuration, and the float32-accurate product on bf16 tiles.

The OS hands out the tile state on request (arch_prctl ARCH_REQ_XCOMP_PERM); AMX is used
only where that succeeds, and each call loads its tile configuration and releases the tiles
after, since numba's worker threads run the tiles in turn. DASLLAMA_AMX=0 turns them off
(for A/B timing, or a host whose AMX is slow).

bf16 products at float32's accuracy ("bf16 x N"): a float32 a is split into bf16 parts,
a = a[0] + a[1] (+ a[2]), each the rounded rest of the ones before; tdpbf16ps multiplies bf16
pairs exactly into float32 sums (16 x 16 x 32 products an instruction; on this project's
2-core Sapphire Rapids VM three passes give 4-6x the float32 FMA tiles' rate), so the
passes a[0]b[0] + a[0]b[1] + a[1]b[0] give a product to ~2^-17 of |ab| and the six of three
parts (PASSES_3) to ~2^-24, float32's own rounding. `split_bf16` is the split,
`bf16_gemm` the tile product one pass list runs (tests/kernels/test_amx.py drives it as a
plain matrix product against float64).
"""
import ctypes
import math
import os
import platform

import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from .cpu import llvm_has
from .ir import F32T, I8, I16, I32, I64, Gen, bits_f32, f32_bits, i64_call, vec
from .quants import JIT
from .simd import _loop

TILE = 16                   # rows of every tile; 64 bytes a row
_ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA, _SYS_ARCH_PRCTL = 0x1023, 18, 158


def _request_tiles():
    """Ask Linux for the AMX tile data state; False where that is refused or not Linux x86."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


GRANTED = os.environ.get("DASLLAMA_AMX", "1") != "0" and llvm_has("amx-tile") and _request_tiles()
INT8 = GRANTED and llvm_has("amx-int8")
BF16 = GRANTED and llvm_has("amx-bf16")

PASSES_2 = ((0, 0), (1, 0), (0, 1))                                 # hi.hi + lo.hi + hi.lo
PASSES_3 = ((0, 0), (1, 0), (2, 0), (1, 1), (0, 1), (0, 2))         # the terms above 2^-24


def configure(g, shapes=((TILE, 64),) * 8):
    """ldtilecfg of palette 1 with tile t `shapes[t]` = (rows, bytes a row); default all 8
    tiles 16 x 64 bytes."""
    b = g.b
    cfg = b.alloca(ir.ArrayType(I8, 64))
    cfg.align = 64
    p = b.bitcast(cfg, I8.as_pointer())
    for i in range(64):
        b.store(g.c(I8, 0), g.at(p, i))
    b.store(g.c(I8, 1), g.at(p, 0))
    for t, (rows, colsb) in enumerate(shapes):
        b.store(g.c(I16, colsb), b.bitcast(g.at(p, 16 + 2 * t), I16.as_pointer()))
        b.store(g.c(I8, rows), g.at(p, 48 + t))
    g.intr("llvm.x86.ldtilecfg", ir.VoidType(), [p])


# --- the bf16 tile product -------------------------------------------------------------------

_gemms = {}


def bf16_gemm(m_tiles, n_tiles, passes):
    """numba intrinsic gemm(a, a_rs, a_ks, a_part, a_outer, a_ib, b, b_rs, b_ks, b_ns, b_part,
    b_outer, b_jb, c, c_rs, c_ib, c_jb, s, s_rs, s_ib, s_jb, n_kb, n_outer, n_ib, n_jb),
    addresses and strides in bytes as int64:

    for ib < n_ib, jb < n_jb:
        C[ib, jb] = S[ib, jb] + sum over o < n_outer, kb < n_kb, (p, q) in passes of A[p, o, kb, ib] . B[q, o, kb, jb]

    C[ib, jb]: 16 m_tiles x 16 n_tiles float32 at c + ib*c_ib + jb*c_jb, rows c_rs apart; S,
    its start, the same at s with s's strides: C itself to accumulate, or a bias broadcast
    (s_rs = s_ib = 0). A[p, o, kb, ib]: 16
    m_tiles rows of 32 bf16 (the summed axis) at a + p*a_part + o*a_outer + kb*a_ks + ib*a_ib,
    rows a_rs apart (a_ks 64 for a plain row-major A). B[q, o, kb, jb]: 16 rows of pairs (summed
    indices 2r, 2r+1) of 16 n_tiles columns, the bf16 pair of column n at row r at 4n + r*b_rs,
    column tile j at j*b_ns, from b + q*b_part + o*b_outer + kb*b_ks + jb*b_jb: the 1 KB tiles
    packed (b_rs 64, b_ns 1024, ...) or a window of pairs by column (b_rs the window's row, b_ns
    64). The outer axis is a conv's taps (a_outer a dilation's rows) or 1. Parts are loaded
    once for consecutive passes that share them: order `passes` to reuse. One tile
    configuration a call: give it many blocks."""
    key = (m_tiles, n_tiles, tuple(passes))
    if key in _gemms:
        return _gemms[key]
    assert m_tiles * n_tiles + m_tiles + n_tiles <= 8
    # a tile of each part where they all fit (tiles are not renamed: a load into a tile
    # waits for the products reading it), else one that the parts take in turn
    count = n_parts(passes)
    a_slots = b_slots = count if m_tiles * n_tiles + count * (m_tiles + n_tiles) <= 8 else 1
    name = f"dasllama_amx_bf16_{m_tiles}x{n_tiles}_" + "_".join(f"{p}{q}" for p, q in passes)

    def emit(b, args):
        g = Gen(b)
        (a, a_rs, a_ks, a_part, a_outer, a_ib, bb, b_rs, b_ks, b_ns, b_part, b_outer, b_jb,
         c, c_rs, c_ib, c_jb, s, s_rs, s_ib, s_jb, n_kb, n_outer, n_ib, n_jb) = args
        a_p, b_p, c_p, s_p = (b.inttoptr(v, I8.as_pointer()) for v in (a, bb, c, s))
        configure(g)
        void = ir.VoidType()
        c_tile = lambda i, j: g.c(I8, i * n_tiles + j)
        a_tile = lambda i, p: g.c(I8, m_tiles * n_tiles + (p % a_slots) * m_tiles + i)
        b_tile = lambda j, q: g.c(I8, m_tiles * n_tiles + a_slots * m_tiles + (q % b_slots) * n_tiles + j)
        a_step, c_step, s_step = (b.mul(g.c(I64, TILE), v) for v in (a_rs, c_rs, s_rs))
        zero = [g.c(I64, 0)]

        def row_block(ib, acc):
            a_ibp, c_ibp, s_ibp = (g.at(p, b.mul(ib, st)) for p, st in ((a_p, a_ib), (c_p, c_ib), (s_p, s_ib)))
            _loop(g, g.c(I64, 0), n_jb, zero, lambda jb, acc: column_block(a_ibp, c_ibp, s_ibp, jb, acc))
            return acc

        def column_block(a_p, c_p, s_p, jb, acc):
            c_jbp, s_jbp = g.at(c_p, b.mul(jb, c_jb)), g.at(s_p, b.mul(jb, s_jb))
            c_at = lambda i, j: g.at(c_jbp, b.add(b.mul(g.c(I64, i), c_step), g.c(I64, 64 * j)))
            s_at = lambda i, j: g.at(s_jbp, b.add(b.mul(g.c(I64, i), s_step), g.c(I64, 64 * j)))
            for i in range(m_tiles):
                for j in range(n_tiles):
                    g.intr("llvm.x86.tileloadd64", void, [c_tile(i, j), s_at(i, j), s_rs])
            b_jbp = g.at(b_p, b.mul(jb, b_jb))

            def outer(o, acc):
                a_o, b_o = g.at(a_p, b.mul(o, a_outer)), g.at(b_jbp, b.mul(o, b_outer))

                def block(kb, acc):
                    a_k, b_k = g.at(a_o, b.mul(kb, a_ks)), g.at(b_o, b.mul(kb, b_ks))
                    loaded_a, loaded_b = [None] * a_slots, [None] * b_slots
                    for p, q in passes:
                        if loaded_a[p % a_slots] != p:
                            a_pk = g.at(a_k, b.mul(g.c(I64, p), a_part))
                            for i in range(m_tiles):
                                g.intr("llvm.x86.tileloadd64", void,
                                       [a_tile(i, p), g.at(a_pk, b.mul(g.c(I64, i), a_step)), a_rs])
                            loaded_a[p % a_slots] = p
                        if loaded_b[q % b_slots] != q:
                            b_qk = g.at(b_k, b.mul(g.c(I64, q), b_part))
                            for j in range(n_tiles):
                                g.intr("llvm.x86.tileloadd64", void,
                                       [b_tile(j, q), g.at(b_qk, b.mul(g.c(I64, j), b_ns)), b_rs])
                            loaded_b[q % b_slots] = q
                        for i in range(m_tiles):
                            for j in range(n_tiles):
                                g.intr("llvm.x86.tdpbf16ps", void, [c_tile(i, j), a_tile(i, p), b_tile(j, q)])
                    return acc

                return _loop(g, g.c(I64, 0), n_kb, acc, block)

            _loop(g, g.c(I64, 0), n_outer, zero, outer)
            for i in range(m_tiles):
                for j in range(n_tiles):
                    g.intr("llvm.x86.tilestored64", void, [c_tile(i, j), c_at(i, j), c_rs])
            return acc

        _loop(g, g.c(I64, 0), n_ib, zero, row_block)
        g.intr("llvm.x86.tilerelease", void, [])

    @intrinsic
    def gemm(typingctx, a, a_rs, a_ks, a_part, a_outer, a_ib, bb, b_rs, b_ks, b_ns, b_part, b_outer,
             b_jb, c, c_rs, c_ib, c_jb, s, s_rs, s_ib, s_jb, n_kb, n_outer, n_ib, n_jb):
        return i64_call(25, name, emit)

    gemm._set_uuid(f"dasllama.amx.{name}")      # stable across processes: see simd.py
    _gemms[key] = gemm
    return gemm


def empty_aligned(shape, dtype):
    """np.empty on a 64-byte boundary: a tile's rows are then whole cache lines (numpy aligns
    to 16 bytes, and a tile of rows split across lines loads at half the rate or less)."""
    dtype = np.dtype(dtype)
    n_bytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(n_bytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + n_bytes].view(dtype).reshape(shape)


def zeros_aligned(shape, dtype):
    out = empty_aligned(shape, dtype)
    out[...] = 0
    return out


# --- splitting float32 into bf16 parts --------------------------------------------------------

@njit(**JIT)
def bf16_round(v):
    """The bf16 bits nearest float32 v (ties to even), as vcvtneps2bf16 gives for finite v."""
    u = f32_bits(v)
    return np.uint16((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))


@njit(**JIT)
def bf16_value(h):
    """The float32 of bf16 bits h."""
    return bits_f32(np.uint32(h) << np.uint32(16))


@njit(**JIT, inline="always")
def bf16_hi_lo(v):
    """(hi, lo) bf16 bits of float32 v's first two parts: exactly v where v is an f16 value."""
    h = bf16_round(v)
    return h, bf16_round(v - bf16_value(h))


@njit(**JIT)
def split_bf16(x, parts):
    """parts[p] = the bf16 bits of x's p-th part: parts[0] = bf16(x), parts[p] = bf16(x minus
    the parts before), so x = sum of parts to ~2^-8 of x a part. x float32, parts uint16
    (n_parts, *x.shape), both contiguous."""
    flat = x.reshape(-1)
    out = parts.reshape(parts.shape[0], -1)
    for i in range(flat.size):
        rest = flat[i]
        for p in range(out.shape[0]):
            h = bf16_round(rest)
            out[p, i] = h
            rest = rest - bf16_value(h)


def n_parts(passes):
    """How many bf16 parts of A and of B a pass list reads."""
    return 1 + max(max(p, q) for p, q in passes)


def bf16_parts(x, count):
    """(count, *x.shape) uint16: x float32 split by split_bf16."""
    x = np.ascontiguousarray(x, np.float32)
    parts = np.empty((count,) + x.shape, np.uint16)
    split_bf16(x, parts)
    return parts


def pad_to(n, m):
    return -(-n // m) * m


_splits = {}


def split_row(n_parts):
    """numba intrinsic split(src, dst, dst_part, n, slope_bits, copy, bias), addresses and
    strides in bytes as int64: dst + p*dst_part + 2i = the bf16 bits of part p of
    leaky_relu(src[i], slope) for i < n, n a multiple of 16 (slope_bits: the float32's bits;
    1.0 for none); where copy is not 0, also copy[i] = src[i] + bias[i] (float32: a conv's
    output started as its bias plus the input as residual, in the same pass), or copy[i] +=
    that where accumulate is not 0. 16 lanes at a time: the loop numba would not vectorise."""
    if n_parts in _splits:
        return _splits[n_parts]
    name = f"dasllama_amx_split_row_{n_parts}"
    vf, vi, vh = vec(F32T, 16), vec(I32, 16), vec(I16, 16)

    def emit(b, args):
        g = Gen(b)
        src, dst, dst_part, n, slope_bits, copy, bias, accumulate = args
        s_p, d_p, c_p, b_p = (b.inttoptr(v, I8.as_pointer()) for v in (src, dst, copy, bias))
        slope = g.splat(b.bitcast(b.trunc(slope_bits, I32), F32T), 16)

        def body(copy_mode):
            def block(i, acc):
                v = g.load(s_p, b.mul(i, g.c(I64, 64)), vf)
                if copy_mode:
                    ptr = g.at(c_p, b.mul(i, g.c(I64, 64)))
                    total = b.fadd(v, g.load(b_p, b.mul(i, g.c(I64, 64)), vf))
                    if copy_mode == "accumulate":
                        total = b.fadd(total, g.load(c_p, b.mul(i, g.c(I64, 64)), vf))
                    b.store(total, b.bitcast(ptr, vf.as_pointer())).align = 4
                v = g.intr("llvm.maxnum.v16f32", vf, [v, b.fmul(v, slope)])
                for p in range(n_parts):
                    u = b.bitcast(v, vi)
                    odd = b.and_(b.lshr(u, g.c(vi, 16)), g.c(vi, 1))
                    h = b.lshr(b.add(b.add(u, g.c(vi, 0x7FFF)), odd), g.c(vi, 16))
                    ptr = g.at(d_p, b.add(b.mul(g.c(I64, p), dst_part), b.mul(i, g.c(I64, 32))))
                    b.store(b.trunc(h, vh), b.bitcast(ptr, vh.as_pointer())).align = 2
                    if p + 1 < n_parts:
                        v = b.fsub(v, b.bitcast(b.shl(h, g.c(vi, 16)), vf))
                return acc
            return block

        plain, copying, store, accum, done = (b.append_basic_block(s) for s in
                                              ("plain", "copying", "store", "accumulate", "done"))
        b.cbranch(b.icmp_signed("==", copy, g.c(I64, 0)), plain, copying)
        b.position_at_end(copying)
        b.cbranch(b.icmp_signed("==", accumulate, g.c(I64, 0)), store, accum)
        for bb, copy_mode in ((plain, None), (store, "store"), (accum, "accumulate")):
            b.position_at_end(bb)
            _loop(g, g.c(I64, 0), b.sdiv(n, g.c(I64, 16)), [g.c(I64, 0)], body(copy_mode))
            b.branch(done)
        b.position_at_end(done)

    @intrinsic
    def split(typingctx, src, dst, dst_part, n, slope_bits, copy, bias, accumulate):
        return i64_call(8, name, emit)

    split._set_uuid(f"dasllama.amx.{name}")
    _splits[n_parts] = split
    return split

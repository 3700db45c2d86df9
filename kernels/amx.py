"""AMX (Sapphire Rapids' tile unit), shared by the kernels that use it: the OS's grant of the
tile state, the tile configuration, and the float32-accurate product on bf16 tiles.

The OS hands out the tile state on request (arch_prctl ARCH_REQ_XCOMP_PERM); AMX is used
only where that succeeds, and each call loads its tile configuration and releases the tiles
after, since numba's worker threads run the tiles in turn. DASLLAMA_AMX=0 turns them off
(for A/B timing, or a host whose AMX is slow).

bf16 products at float32's accuracy ("bf16 x N"): a float32 a is split into bf16 parts,
a = a[0] + a[1] (+ a[2]), each the rounded rest of the ones before; tdpbf16ps multiplies bf16
pairs exactly into float32 sums (16 x 16 x 32 products an instruction, ~32x the FMA units'),
so the passes a[0]b[0] + a[0]b[1] + a[1]b[0] give a product to ~2^-17 of |ab| and the six of
three parts (PASSES_3) to ~2^-24, float32's own rounding. `split_bf16` is the split,
`bf16_gemm` the tile product one pass list runs, `bf16_gemm_ref` its float64 reference.
"""
import ctypes
import os
import platform

import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from .cpu import llvm_has
from .ir import I8, I16, I64, Gen, bits_f32, f32_bits, i64_call
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


def configure(g, rows_per_tile=TILE):
    """ldtilecfg of palette 1 with all 8 tiles `rows_per_tile` x 64 bytes."""
    b = g.b
    cfg = b.alloca(ir.ArrayType(I8, 64))
    cfg.align = 64
    p = b.bitcast(cfg, I8.as_pointer())
    for i in range(64):
        b.store(g.c(I8, 0), g.at(p, i))
    b.store(g.c(I8, 1), g.at(p, 0))
    for t in range(8):
        b.store(g.c(I16, 64), b.bitcast(g.at(p, 16 + 2 * t), I16.as_pointer()))
        b.store(g.c(I8, rows_per_tile), g.at(p, 48 + t))
    g.intr("llvm.x86.ldtilecfg", ir.VoidType(), [p])


# --- the bf16 tile product -------------------------------------------------------------------

_gemms = {}


def bf16_gemm(m_tiles, n_tiles, passes):
    """numba intrinsic gemm(a, a_rs, a_ks, a_part, a_outer, b, b_rs, b_ks, b_ns, b_part, b_outer,
    b_jb, c, c_rs, c_jb, n_kb, n_outer, n_jb), addresses and strides in bytes as int64:

    for jb < n_jb: C_jb += sum over o < n_outer, kb < n_kb, (p, q) in passes of A[p, o, kb] . B[q, o, kb, jb]

    C_jb: 16 m_tiles x 16 n_tiles float32 at c + jb*c_jb, rows c_rs apart, read and written
    back (the caller starts it at zero, a bias or a residual). A[p, o, kb]: 16 m_tiles rows of
    32 bf16 (the summed axis) at a + p*a_part + o*a_outer + kb*a_ks, rows a_rs apart (a_ks 64
    for a plain row-major A). B[q, o, kb, jb]: 16 rows of pairs (summed indices 2r, 2r+1) of
    16 n_tiles columns, the bf16 pair of column n at row r at 4n + r*b_rs, column tile j 64 bytes
    at j*b_ns, from b + q*b_part + o*b_outer + kb*b_ks + jb*b_jb: the 1 KB tiles packed
    (b_rs 64, b_ns 1024, ...) or a window of pairs by column (b_rs the window's row, b_ns 64).
    The outer axis is a conv's taps (b_outer a dilation's columns) or 1. Parts are loaded once
    for consecutive passes that share them: order `passes` to reuse."""
    key = (m_tiles, n_tiles, tuple(passes))
    if key in _gemms:
        return _gemms[key]
    assert m_tiles * n_tiles + m_tiles + n_tiles <= 8
    name = f"dasllama_amx_bf16_{m_tiles}x{n_tiles}_" + "_".join(f"{p}{q}" for p, q in passes)

    def emit(b, args):
        g = Gen(b)
        (a, a_rs, a_ks, a_part, a_outer, bb, b_rs, b_ks, b_ns, b_part, b_outer, b_jb,
         c, c_rs, c_jb, n_kb, n_outer, n_jb) = args
        a_p, b_p, c_p = (b.inttoptr(v, I8.as_pointer()) for v in (a, bb, c))
        configure(g)
        void = ir.VoidType()
        c_tile = lambda i, j: g.c(I8, i * n_tiles + j)
        a_tile = lambda i: g.c(I8, m_tiles * n_tiles + i)
        b_tile = lambda j: g.c(I8, m_tiles * n_tiles + m_tiles + j)
        a_step, c_step = b.mul(g.c(I64, TILE), a_rs), b.mul(g.c(I64, TILE), c_rs)
        zero = [g.c(I64, 0)]

        def column_block(jb, acc):
            c_jbp = g.at(c_p, b.mul(jb, c_jb))
            c_at = lambda i, j: g.at(c_jbp, b.add(b.mul(g.c(I64, i), c_step), g.c(I64, 64 * j)))
            for i in range(m_tiles):
                for j in range(n_tiles):
                    g.intr("llvm.x86.tileloadd64", void, [c_tile(i, j), c_at(i, j), c_rs])
            b_jbp = g.at(b_p, b.mul(jb, b_jb))

            def outer(o, acc):
                a_o, b_o = g.at(a_p, b.mul(o, a_outer)), g.at(b_jbp, b.mul(o, b_outer))

                def block(kb, acc):
                    a_k, b_k = g.at(a_o, b.mul(kb, a_ks)), g.at(b_o, b.mul(kb, b_ks))
                    loaded_a = loaded_b = None
                    for p, q in passes:
                        if p != loaded_a:
                            a_pk = g.at(a_k, b.mul(g.c(I64, p), a_part))
                            for i in range(m_tiles):
                                g.intr("llvm.x86.tileloadd64", void,
                                       [a_tile(i), g.at(a_pk, b.mul(g.c(I64, i), a_step)), a_rs])
                            loaded_a = p
                        if q != loaded_b:
                            b_qk = g.at(b_k, b.mul(g.c(I64, q), b_part))
                            for j in range(n_tiles):
                                g.intr("llvm.x86.tileloadd64", void,
                                       [b_tile(j), g.at(b_qk, b.mul(g.c(I64, j), b_ns)), b_rs])
                            loaded_b = q
                        for i in range(m_tiles):
                            for j in range(n_tiles):
                                g.intr("llvm.x86.tdpbf16ps", void, [c_tile(i, j), a_tile(i), b_tile(j)])
                    return acc

                return _loop(g, g.c(I64, 0), n_kb, acc, block)

            _loop(g, g.c(I64, 0), n_outer, zero, outer)
            for i in range(m_tiles):
                for j in range(n_tiles):
                    g.intr("llvm.x86.tilestored64", void, [c_tile(i, j), c_at(i, j), c_rs])
            return acc

        _loop(g, g.c(I64, 0), n_jb, zero, column_block)
        g.intr("llvm.x86.tilerelease", void, [])

    @intrinsic
    def gemm(typingctx, a, a_rs, a_ks, a_part, a_outer, bb, b_rs, b_ks, b_ns, b_part, b_outer,
             b_jb, c, c_rs, c_jb, n_kb, n_outer, n_jb):
        return i64_call(18, name, emit)

    gemm._set_uuid(f"dasllama.amx.{name}")      # stable across processes: see simd.py
    _gemms[key] = gemm
    return gemm


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


def bf16_float(parts):
    """float64 of bf16 bits."""
    return (parts.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def bf16_gemm_ref(a, b, passes):
    """float64 sum over passes (p, q) of A's part p @ B's part q: a (M, K), b (K, N) float32;
    what bf16_gemm sums, without its float32 rounding."""
    count = n_parts(passes)
    ap, bp = bf16_float(bf16_parts(a, count)), bf16_float(bf16_parts(b, count))
    return sum(ap[p] @ bp[q] for p, q in passes)


# --- a plain matrix product on the tiles -------------------------------------------------------

MATMUL_TILES = (2, 2)       # 2 x 2 C tiles a call: the A and B tiles of one part each fit beside


def pad_to(n, m):
    return -(-n // m) * m


def pack_rows(a, count):
    """A (M, K) float32 -> its parts (count, M padded to 32, K padded to 32) bf16 bits, zeros
    in the padding: the row-major A bf16_gemm reads."""
    m, k = a.shape
    out = np.zeros((count, pad_to(m, TILE * MATMUL_TILES[0]), pad_to(k, 32)), np.uint16)
    out[:, :m, :k] = bf16_parts(a, count)
    return out


def pack_pairs(b, count):
    """B (K, N) float32 -> its parts (count, K padded to 32 / 2, N padded to 32, 2) bf16 bits:
    element [q, r, n, e] = part q of B[2r + e, n], the rows of pairs bf16_gemm reads."""
    k, n = b.shape
    out = np.zeros((count, pad_to(k, 32), pad_to(n, TILE * MATMUL_TILES[1])), np.uint16)
    out[:, :k, :n] = bf16_parts(b, count)
    c, kp, n_p = out.shape
    return np.ascontiguousarray(out.reshape(c, kp // 2, 2, n_p).transpose(0, 1, 3, 2))


_matmuls = {}


def matmul_kernel(passes):
    """run(ap, bp, c): c (M', N') float32 += the pass list's product of pack_rows' ap and
    pack_pairs' bp (M', N' their padded sizes)."""
    passes = tuple(passes)
    if passes in _matmuls:
        return _matmuls[passes]
    m_tiles, n_tiles = MATMUL_TILES
    gemm = bf16_gemm(m_tiles, n_tiles, passes)
    rows, cols = TILE * m_tiles, TILE * n_tiles

    @njit(**JIT)
    def run(ap, bp, c):
        _, m, k = ap.shape
        n = bp.shape[2]
        a_rs, b_rs = k * 2, n * 4
        for i in range(0, m, rows):
            gemm(ap.ctypes.data + i * a_rs, a_rs, 64, m * a_rs, 0,
                 bp.ctypes.data, b_rs, 16 * b_rs, 64, (k // 2) * b_rs, 0, cols * 4,
                 c.ctypes.data + i * n * 4, n * 4, cols * 4, k // 32, 1, n // cols)

    _matmuls[passes] = run
    return run


def bf16_matmul(a, b, passes=PASSES_2):
    """a (M, K) @ b (K, N) float32 on the bf16 tiles with the given passes -> (M, N) float32."""
    count = n_parts(passes)
    ap, bp = pack_rows(a, count), pack_pairs(b, count)
    c = np.zeros((ap.shape[1], bp.shape[2]), np.float32)
    matmul_kernel(passes)(ap, bp, c)
    return c[:a.shape[0], :b.shape[1]]

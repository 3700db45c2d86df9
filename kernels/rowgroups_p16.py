"""Copies in the file's own bytes a row and block, 16 rows a group (a zmm lane a row), folded one
token at a time as the file's kernels fold it, for decode: Q6_K_P16 (210 bytes), Q5_0_P16 (22
bytes, against the 36 of the Q8_0_X16 copy Q5_0 otherwise takes) and Q4_K_P16 (144, against the
Q4_K_X16 copy's 312).

Q6_K_P16

The file's Q6_K gemv reads a row at a time, 32 elements a ymm op; Qwen2.5's down matrices
streamed at 12-13 GB/s through it where the Q8_0_X16 copy streams ~24. Q6_K_X16 (rowgroups.py)
reads 356 bytes a row and block and spells only the tiled fold of batches. This copy keeps the
file's bits (4 + 2 a quant, int8 sub-block scales, f16 d), laid out for 16 rows, and folds as
ggml's AVX2 vec dot (the one llama.cpp runs on AVX-512 too): per block, 8 int32 lanes, lane l
holding, for each 32-element group j, sc[2j + l // 4] * (the 4 products of elements
32j + 4l .. +3) minus 32 * (sc[2l] bsum[2l] + sc[2l+1] bsum[2l+1]); then
acc[l] = fma(dx * dw, f32(lane), acc[l]); at the end hsum_float_8 of the 8 lanes. The integer
lanes are exact in any order, so the 4-element groups L = e // 4 (64 a block, lane L % 8, sub-block
L // 4) are taken sub-block by sub-block here.

Layout, per group of n = 16 rows and block (210n bytes):
    0      d of the n rows, f16
    2n     the 16 sub-block scales, int8: sub-block k's n rows at 2n + n k
    18n    per sub-block k, at 18n + 12n k, three vectors of n rows x 4 bytes:
             A: groups 4k (low nibble) and 4k+1 (high nibble), the quants' low 4 bits
             B: groups 4k+2 and 4k+3 likewise
             H: the quants' high 2 bits, group 4k+m at bits 2m, 2m+1
Per group L a few byte ops make its 16 rows' 6-bit quants, one pmaddubsw takes them against the
token's 4 bytes (broadcast), one pmaddwd by the rows' scale pairs adds them to lane L % 8.
"""
import numpy as np
from numba import njit

from llvmlite import ir

from .ir import HALF, I8, I16, I64, vec
from .quants import JIT, Q4_K_P16, Q5_0_P16, Q6_K_P16
from .rowgroup_template import (AUX_BSUMS16, AUX_BSUMS32, AUX_LANE_OFFSETS, FUSED, PREFETCH_BYTES, _fused_kernel,
                                _repacker, _tile, fold_k_chunks, lane_f32)
from .simd import HAS_VNNI

WIDTH = 16
I1 = ir.IntType(1)


def _kernel(layout, block_elems, aux_kind, tile, gemv_tile=None, tag=""):
    """kernel(w, R, C, xq, xd, xa, xf, T, out) as matmul's kernels, on a copy in `layout`: its
    fused decode kernel (rowgroup_template._fused_kernel) with one matrix. A p16 copy serves
    the few tokens of a step only, which the fused kernel takes as they are, and the tile's IR is
    compiled once, in the fused kernel, not again in a kernel of its own (a first run's compile
    time). gemv_tile: as _fused_kernel's (Q4_K). tag: what tells this form of the tiles from
    the others (the kernel's disk-cache key holds the fused kernel by this name)."""
    fused = _fused_kernel(layout, block_elems, aux_kind, tile, gemv_tile, width=WIDTH)
    fused._set_uuid(f"dasllama.rowgroups_p16.fused_{layout}{tag}")    # a stable disk-cache key (see simd.py)

    @njit(**JIT)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        fused(w, n_rows, out, w, 0, out, w, 0, out, n_cols, xq, xd, xa, xf, n_tokens)
    FUSED[kernel] = fused
    return kernel


def _groups(src, n_groups, n_blocks, width, block_bytes):
    """The file's blocks as (group, row in the group, block, byte)."""
    return src.reshape(n_groups, width, n_blocks, block_bytes)


def _in_chunks(fill, block_bytes, chunk_bytes=256 * 1024):
    """fill over a few row groups at a time (all three copies keep the file's bytes a row and
    block, so a group's source and copy are as long): numpy's temporaries then stay small and
    are reused, where whole-matrix ones were fresh pages every time (Qwen2.5's 132 Q5_0 fills
    spent 2-8 s in the kernel's page faults on this VM against ~0.5 s of copying)."""
    def chunked(src, n_groups, n_blocks, out, width):
        group = width * n_blocks * block_bytes
        step = max(1, chunk_bytes // group)
        for g0 in range(0, n_groups, step):
            g1 = min(n_groups, g0 + step)
            fill(src[g0 * group:g1 * group], g1 - g0, n_blocks, out[g0 * group:g1 * group], width)
        return True
    return chunked


def _rows_last(a):
    """(group, row, block, ...) -> (group, block, ..., row): a field's n rows side by side."""
    return np.moveaxis(a, 1, -1)


def _fill(src, n_groups, n_blocks, out, width):
    """Q6_K_P16 from the Q6_K rows in src (numpy: nothing to compile on a first run). The
    nibbles and 2-bit parts move as 4-byte words (no shift crosses a byte: 3x faster than byte
    by byte)."""
    blocks = _groups(src, n_groups, n_blocks, width, 210)
    dst = out.reshape(n_groups, n_blocks, 210 * width)
    dst[..., :2 * width].view("<u2")[...] = _rows_last(blocks[..., 208:210].view("<u2")[..., 0])
    dst[..., 2 * width:18 * width] = _rows_last(blocks[..., 192:208]).reshape(n_groups, n_blocks, -1)
    nibbles, pairs = np.uint32(0x0F0F0F0F), np.uint32(0x03030303)
    ql = blocks[..., :128].view("<u4").reshape(n_groups, width, n_blocks, 2, 16)     # per 128 elements
    qh = blocks[..., 128:192].view("<u4").reshape(n_groups, width, n_blocks, 2, 8)
    lo = np.concatenate([ql & nibbles, (ql >> 4) & nibbles], axis=-1).reshape(n_groups, width, n_blocks, 16, 4)
    hi = np.concatenate([(qh >> (2 * k)) & pairs for k in range(4)], axis=-1).reshape(n_groups, width, n_blocks, 16, 4)
    parts = np.stack([lo[..., 0] | (lo[..., 1] << 4),                 # (group, row, block, sub-block, 3 words)
                      lo[..., 2] | (lo[..., 3] << 4),
                      hi[..., 0] | (hi[..., 1] << 2) | (hi[..., 2] << 4) | (hi[..., 3] << 6)], axis=-1)
    dst[..., 18 * width:].view("<u4").reshape(n_groups, n_blocks, 16, 3, width)[...] = _rows_last(parts)
    return True

def _quants(g, v, low, high):
    """The 6-bit quants of the 4 groups of a sub-block: A's and B's nibbles, H's 2-bit parts
    put at bits 4 and 5."""
    b = g.b
    a, bb, h = low[0], low[1], high
    nib, top = g.c(v.i8, 0x0F), g.c(v.i8, 0x30)
    return [b.or_(b.and_(a, nib), b.and_(b.shl(h, g.c(v.i8, 4)), top)),
            b.or_(b.lshr(a, g.c(v.i8, 4)), b.and_(b.shl(h, g.c(v.i8, 2)), top)),
            b.or_(b.and_(bb, nib), b.and_(h, top)),
            b.or_(b.lshr(bb, g.c(v.i8, 4)), b.and_(b.lshr(h, g.c(v.i8, 2)), top))]


def _block(g, v, wb, tok, blk, acc):
    """One block of the vec dot for the group's rows (aux: the token's Q8_K sums over 16
    elements, int16)."""
    b, n = g.b, v.n
    scale = b.fmul(tok.scale(blk), b.fpext(g.load(wb, 0, vec(HALF, n)), v.f32))    # ggml: y.d * x.d
    ints = [None] * 8
    mask16 = g.c(v.i32, 0xFFFF)
    for k in range(16):
        sc = b.sext(g.load(wb, 2 * n + n * k, vec(I8, n)), v.i32)
        pairs = b.bitcast(b.or_(b.shl(sc, g.c(v.i32, 16)), b.and_(sc, mask16)), v.i16)   # (sc, sc) a row
        bsum = g.load(tok.aux, b.mul(b.add(b.mul(blk, g.c(I64, 16)), g.c(I64, k)), g.c(I64, 2)), I16)
        corr = g.maddwd(pairs, g.splat(b.mul(bsum, g.c(I16, -16)), 2 * n))   # -32 sc bsum, |16 bsum| < 2**15
        lane = k // 2
        ints[lane] = corr if ints[lane] is None else b.add(ints[lane], corr)
        base = 18 * n + 12 * n * k
        quants = _quants(g, v, [g.load(wb, base, v.i8), g.load(wb, base + 4 * n, v.i8)],
                         g.load(wb, base + 8 * n, v.i8))
        for m, q in enumerate(quants):
            group = 4 * k + m
            prod = g.maddwd(g.maddubs(q, tok.lane(blk, group)), pairs)
            ints[group % 8] = b.add(ints[group % 8], prod) if ints[group % 8] is not None else prod
    return [g.fma(scale, g.cvt(i), a) for i, a in zip(ints, acc)]


def _finish(g, v, acc):
    """hsum_float_8 of each row: (0+4 + 2+6) + (1+5 + 3+7)."""
    b = g.b
    s = [b.fadd(acc[i], acc[i + 4]) for i in range(4)]
    return b.fadd(b.fadd(s[0], s[2]), b.fadd(s[1], s[3]))


def _pf(prefetch):
    """The kernel's tag part of a prefetch distance (its tiles' names carry it: _tile)."""
    return f"_pf{prefetch}" if prefetch else ""


def q6_k_p16(prefetch=0):
    """(layout, repack, kernel) of the Q6_K_P16 copy (prefetch: _tile's, bytes ahead in
    decode-sized calls)."""
    tile = _tile("q6_k_p16", Q6_K_P16, 256, 8, _block, _finish, vnni=HAS_VNNI, width=WIDTH, prefetch=prefetch)
    return (Q6_K_P16, _repacker(_in_chunks(_fill, 210), Q6_K_P16, 256, WIDTH),
            _kernel(Q6_K_P16, 256, AUX_BSUMS16, tile, tag=_pf(prefetch)))


# Q5_0_P16: per group of n = 16 rows and block (22n bytes):
#     0    d of the n rows, f16
#     2n   per lane m of 4 elements (4m .. 4m+3), 8 bytes: bit 4r + i is the high bit of row r's
#          element 4m + i (a mask register of the lane's 64 bytes)
#     6n   4 vectors of n rows x 4 bytes: vector v's byte 4r + i holds element 4v + i's low 4 bits
#          (lane v) and element 16 + 4v + i's (lane v + 4), as the file's qs do
# The fold is the Q8_0_X16 copy's (rowgroups._block_q8_0, offset form): one vpdpbusd a lane of
# the quants + 112 (= q - 16 + 128, unsigned) against the token's bytes, from -128 x the token's
# 4-element sums, so the int32 lanes, and then every rounding, are the Q8_0 copy's.

def _fill_q5_0(src, n_groups, n_blocks, out, width):
    """Q5_0_P16 from the Q5_0 rows in src (numpy), moved as 2- and 4-byte words (2.5x faster
    than byte by byte)."""
    blocks = _groups(src, n_groups, n_blocks, width, 22)
    dst = out.reshape(n_groups, n_blocks, 22 * width)
    dst[..., :2 * width].view("<u2")[...] = _rows_last(blocks[..., :2].view("<u2")[..., 0])
    qh = _rows_last(blocks[..., 2:6].view("<u4")[..., 0])                # (group, block, row)
    shifts = (4 * np.arange(8, dtype=np.uint32))[:, None]                  # lane m: elements 4m .. 4m+3
    even, odd = qh[..., None, 0::2] >> shifts, qh[..., None, 1::2] >> shifts   # (group, block, lane, row pair)
    dst[..., 2 * width:6 * width].reshape(n_groups, n_blocks, 8, width // 2)[...] = (even & 15) | ((odd & 15) << 4)
    qs = blocks[..., 6:22].view("<u4")                                     # (group, row, block, lane)
    dst[..., 6 * width:].view("<u4").reshape(n_groups, n_blocks, 4, width)[...] = _rows_last(qs)
    return True

def _block_q5_0(g, v, wb, tok, blk, acc):
    """8 lane fmas over the group's rows, as the Q8_0 copy's."""
    b, n = g.b, v.n
    scale = b.fmul(b.fpext(g.load(wb, 0, vec(HALF, n)), v.f32), tok.scale(blk))
    new = []
    for lane in range(8):
        packed = g.load(wb, 6 * n + 4 * n * (lane % 4), v.i8)
        nib = b.and_(packed, g.c(v.i8, 0x0F)) if lane < 4 else b.lshr(packed, g.c(v.i8, 4))
        low = b.or_(nib, g.c(v.i8, 0x70))
        high = b.bitcast(g.load(wb, 2 * n + 8 * lane, I64), vec(I1, 4 * n))
        u = b.select(high, b.add(low, g.c(v.i8, 0x10)), low)
        ints = g.dpbusd(b.bitcast(tok.lane(blk, lane, tok.aux), v.i32), u, tok.lane(blk, lane))
        new.append(g.fma(scale, lane_f32(g, v, ints), acc[lane]))
    return new


def q5_0_p16(step=4, prefetch=PREFETCH_BYTES):
    """(layout, repack, kernel) of the Q5_0_P16 copy. step: tokens a pass share their weights'
    loads and unpacking; at 4 a batched step's 4 tokens run level with the Q8_0_X16 copy on
    gemma3's (2048, 640) gate and 1.25x it on Qwen2.5's (4864, 896) (57 / 55 and 195 / 244 us,
    one token at a time 88 and 299), a decode step's one token 1.1x and 1.7x (load 4). prefetch:
    _tile's, bytes ahead in decode-sized calls."""
    from .rowgroups import _finish_q8_0
    tile = _tile("q5_0_p16", Q5_0_P16, 32, 8, _block_q5_0, _finish_q8_0, vnni=HAS_VNNI, width=WIDTH, step=step,
                 prefetch=prefetch)
    return (Q5_0_P16, _repacker(_in_chunks(_fill_q5_0, 22), Q5_0_P16, 32, WIDTH),
            _kernel(Q5_0_P16, 32, AUX_LANE_OFFSETS, tile, tag=_pf(prefetch)))


# Q4_K_P16: per group of n = 16 rows and block (144n bytes):
#     0     d of the n rows, f16           2n    dmin, f16
#     4n    per sub-block j, n bytes: its scale (6 bits), its min's top 2 bits at bits 6, 7
#     12n   per pair i of sub-blocks, n bytes: the low 4 bits of the mins of 2i and 2i+1
#     16n   per 64-element chunk i and lane L, n rows x 4 bytes: the file's qs bytes 32i + 4L..,
#           lane L of sub-block 2i in the low nibbles, of 2i+1 in the high ones
# The folds are llama.cpp's repacked gemv (one fma of the block's integer sum, the mins in their
# own sum: rowgroups._block_q4_k(1)), which one token, and the last T % 4 of a batch, take, and
# its repacked gemm (one fma a 64-element chunk: rowgroups._block_q4_k(4)), which the first
# T - T % 4 take: so a batched step's 4-7 tokens read the file's 144 bytes a row and block too,
# not the Q4_K_X16 copy's 312.

# Tokens a pass of the gemm's tile: a batched step's 4 share each block's loads and unpacking
# (18 gemma3 (640, 1024) o matrices at T=4, one thread, CPU time, alternated, load 5.6: 1.47 ms
# through Q4_K_X16, 1.01 through this copy a token a pass, 0.95 four a pass; (640, 2048) down:
# 2.91, 1.85, 1.62)
GEMM_STEP = 4

def _fill_q4_k(src, n_groups, n_blocks, out, width):
    """Q4_K_P16 from the Q4_K rows in src (numpy)."""
    blocks = _groups(src, n_groups, n_blocks, width, 144)
    dst = out.reshape(n_groups, n_blocks, 144 * width)
    dst[..., :4 * width].view("<u2").reshape(n_groups, n_blocks, 2, width)[...] = \
        _rows_last(blocks[..., :4].view("<u2"))                            # d, dmin
    q = blocks[..., 4:16]
    sc = np.concatenate([q[..., 0:4] & 63, (q[..., 8:12] & 15) | ((q[..., 0:4] >> 6) << 4)], axis=-1)
    mn = np.concatenate([q[..., 4:8] & 63, (q[..., 8:12] >> 4) | ((q[..., 4:8] >> 6) << 4)], axis=-1)
    dst[..., 4 * width:12 * width] = _rows_last(sc | ((mn >> 4) << 6)).reshape(n_groups, n_blocks, -1)
    dst[..., 12 * width:16 * width] = _rows_last((mn[..., 0::2] & 15) | ((mn[..., 1::2] & 15) << 4)).reshape(
        n_groups, n_blocks, -1)
    qs = blocks[..., 16:144].view("<u4")                                   # (group, row, block, lane)
    dst[..., 16 * width:].view("<u4").reshape(n_groups, n_blocks, 32, width)[...] = _rows_last(qs)
    return True

def _block_q4_k(chunks):
    """The repacked gemv's block (chunks=1) or gemm's (chunks=4) for the group's rows."""
    def block(g, v, wb, tok, blk, acc):
        return _fold_q4_k(g, v, wb, tok, blk, acc, chunks)
    return block


def _fold_q4_k(g, v, wb, tok, blk, acc, chunks):
    """One block for the group's rows (aux: the token's sums over 32 elements, int16): the
    integer sums and the mins' of each 64-element chunk, folded in `chunks` fmas each (1: the
    block's sums, 4: a chunk's)."""
    b, n = g.b, v.n
    dx = tok.scale(blk)
    d = b.fmul(b.fpext(g.load(wb, 0, vec(HALF, n)), v.f32), dx)
    dmin = b.fmul(b.fpext(g.load(wb, 2 * n, vec(HALF, n)), v.f32), dx)
    bytes_ = [b.zext(g.load(wb, 4 * n + n * j, vec(I8, n)), v.i32) for j in range(8)]
    ints, mins = [], []
    for i in range(4):
        low = b.zext(g.load(wb, 12 * n + n * i, vec(I8, n)), v.i32)
        m_a = b.or_(b.and_(low, g.c(v.i32, 15)), b.shl(b.lshr(bytes_[2 * i], g.c(v.i32, 6)), g.c(v.i32, 4)))
        m_b = b.or_(b.lshr(low, g.c(v.i32, 4)), b.shl(b.lshr(bytes_[2 * i + 1], g.c(v.i32, 6)), g.c(v.i32, 4)))
        pair = b.bitcast(b.or_(m_a, b.shl(m_b, g.c(v.i32, 16))), v.i16)
        mins.append(g.maddwd(pair, tok.pair(b.add(b.mul(blk, g.c(I64, 16)), g.c(I64, 4 * i)))))
        sums = [None, None]     # sub-blocks 2i, 2i+1: their 8 lanes in int16
        for lane in range(8):
            packed = g.load(wb, 16 * n + 4 * n * (8 * i + lane), v.i8)
            for half, q in enumerate((b.and_(packed, g.c(v.i8, 0x0F)), b.lshr(packed, g.c(v.i8, 4)))):
                p16 = g.maddubs(q, tok.lane(blk, 16 * i + 8 * half + lane))
                sums[half] = p16 if sums[half] is None else b.add(sums[half], p16)
        s32 = []
        for half in (0, 1):
            sc = b.and_(bytes_[2 * i + half], g.c(v.i32, 63))
            s32.append(g.maddwd(sums[half], b.bitcast(b.or_(sc, b.shl(sc, g.c(v.i32, 16))), v.i16)))
        ints.append(b.add(s32[0], s32[1]))
    return fold_k_chunks(g, v, ints, mins, d, dmin, acc, chunks)


def q4_k_p16(gemm_step=GEMM_STEP, prefetch=0):
    """(layout, repack, kernel) of the Q4_K_P16 copy: the gemm's tile for a batch's first
    T - T % 4 tokens (gemm_step of them a pass), the gemv's for the rest (prefetch: both
    tiles', as _tile's)."""
    from .rowgroups import _finish_scalar
    gemm = _tile("q4_k_p16_gemm", Q4_K_P16, 256, 2, _block_q4_k(4), _finish_scalar, width=WIDTH, step=gemm_step,
                 prefetch=prefetch)
    gemv = _tile("q4_k_p16", Q4_K_P16, 256, 2, _block_q4_k(1), _finish_scalar, width=WIDTH, prefetch=prefetch)
    return (Q4_K_P16, _repacker(_in_chunks(_fill_q4_k, 144), Q4_K_P16, 256, WIDTH),
            _kernel(Q4_K_P16, 256, AUX_BSUMS32, gemm, gemv, tag=f"_s{gemm_step}{_pf(prefetch)}"))

"""Weights repacked in groups of 8 (or 16) rows: one vector lane a row, the token broadcast.

Four formats have copies model.weight_copies makes at load (make_copy): Q8_0_X8 (of Q8_0
and Q5_0 weights), Q4_0_X8, Q4_K_X8 and Q6_K_X8, each with its fill and tile below (built
from the template in rowgroup_template.py), and the same four 16 rows wide (Q8_0_X16, ...:
zmm lanes, for CPUs with AVX-512 and VNNI, where a zmm operation costs what a ymm one does
and does twice the rows). Q6_K, Q5_0 and Q4_K have a third, "p16" (rowgroups_p16.py): their file's
bytes a row and block in 16-row groups, folded one token at a time as the file's vec dot, for
decode, which streams bytes. Which phases multiply through which copy is a layout choice ("x8",
"x16", "p16" or "file": LAYOUT_DEFAULTS, the tuner's, a pin).
The Q8_0 case first, which shows the idea, told for 8 rows.

The register tiles of simd.py hold one (row, token) pair per accumulator, ggml's 8 int32 lanes
of the block dot side by side; each pair's fold then needs its own scale product dw*dx spread
over 8 lanes (a vmulss and a vbroadcastss) beside psign, pmaddubsw, pmaddwd, vcvtdq2ps and
the fma: 7 vector operations a pair and block. On the Zen 3 measured here a tile's time goes
with that count (~0.45 cycles an operation), not with its shape or its spills. Here a vector
holds one lane of 8 rows instead: lane l of the 32-byte block is elements 4l..4l+3, and

    acc[l] (8 rows) += (dw[8 rows] * dx) * f32(sum over the 4 elements of w[row] * x)

is ggml's fma for that lane, for 8 rows at once, with the 4 token bytes broadcast (one
vpbroadcastd, a load) and the 8 rows' bytes of the lane one 32-byte load. The scale product
is one vmulps per block for all 8 lanes; per pair and block there remain psign, pmaddubsw,
pmaddwd, vcvtdq2ps and the fma (~2.4 cycles a lane step, against ~3 for a pair in the 4x4
tile: 1.3-1.4x the GFLOP/s on gemma3's shapes). Each row's result is then ggml's
hsum_float_8 of its 8 lanes, done across the 8 lane vectors at once. Every int32 lane and
every rounding is the gemv's (dots.dot_ref, llama.cpp's vec_dot_q8_0_q8_0 and tinyBLAS), so
results are bit for bit the plain kernels'.

The product sign goes on the weights: pmaddubsw(|x|, sign(w by x)), with |x| computed once per
call. That is exact while no weight quant is -128 (whose negation wraps); ggml's quantiser
never writes one, and the 8-row repack declines a matrix that has one, which then keeps the plain
layout.

Layout (Q8_0_X8): per group of 8 rows, per block: the 8 rows' scales as f32 (32 bytes), then
lanes 0..7, each the 8 rows' 4 bytes of that lane (32 bytes): 288 bytes, 36 a row and block.
On CPUs with VNNI the bytes are w + 128 and the sign stays on the token (_block_q8_0), as they
always are in Q8_0_X16 (16 rows: 64-byte scales and lanes, 576 bytes a block).

The K-quants' batch folds (llama.cpp's repacked Q4_K gemm, its tiled K-quant matmul) take one
exact integer sum per pair and chunk of a block, so there the lanes of a sub-block add up in
int16 before the sub-block scale, and a lane step costs ~2 operations; see their sections.
"""
import numba
import numpy as np
from numba import njit

from .dots import TILED_MIN_TOKENS
from .ir import I32, I64
from .quants import (
    JIT,
    Q4_0,
    Q4_0_X8,
    Q4_0_X16,
    Q4_K,
    Q4_K_X8,
    Q4_K_X16,
    Q5_0,
    Q6_K,
    Q6_K_X8,
    Q6_K_X16,
    Q6_K_P16,
    Q5_0_P16,
    Q4_K_P16,
    Q8_0,
    Q8_0_X8,
    Q8_0_X16,
    f16_at,
    q5_0_as_q8_0,
    u32_at,
    q_q4_0,
    q_q6_k,
    scale_min_k4,
)
from .rowgroup_template import (  # noqa: F401  (abs_quants, group_sums: the aux rows, tested here)
    AUX_ABS,
    AUX_BLOCK_SUMS8,
    AUX_BSUMS16,
    AUX_BSUMS32,
    AUX_LANE_OFFSETS,
    FUSED,
    PREFETCH_BYTES,
    RANGES,
    _kernel,
    _repacker,
    _tile,
    abs_quants,
    fold_k_chunks,
    group_sums,
    lane_f32,
)
from .simd import HAS_AVX512BW, HAS_VNNI
from . import rowgroups_p16, sidecar

# copy name -> rows a group: "x8" one ymm lane a row, "x16" one zmm lane a row (AVX-512),
# "p16" the file's bytes for 16 rows, folded one token at a time (Q6_K: rowgroups_p16.py)
WIDTHS = {"x8": 8, "x16": 16, "p16": 16}
GROUP = max(WIDTHS.values())    # a row count that groups for every width
# (file format, copy name) -> the layout of its copy (Q5_0 goes through Q8_0's)
LAYOUT_OF = {(Q8_0, "x8"): Q8_0_X8, (Q4_0, "x8"): Q4_0_X8, (Q4_K, "x8"): Q4_K_X8, (Q6_K, "x8"): Q6_K_X8,
             (Q8_0, "x16"): Q8_0_X16, (Q4_0, "x16"): Q4_0_X16, (Q4_K, "x16"): Q4_K_X16, (Q6_K, "x16"): Q6_K_X16,
             (Q6_K, "p16"): Q6_K_P16, (Q5_0, "p16"): Q5_0_P16, (Q4_K, "p16"): Q4_K_P16}
PACKED = (Q6_K_P16, Q5_0_P16, Q4_K_P16)     # the "p16" layouts: decode's, not prefill's
# the 16-row copies run where the CPU has AVX-512 with VNNI (elsewhere their zmm operations
# are spelt in plain IR: exact, for tests, not offered)
HAS_X16 = HAS_VNNI and HAS_AVX512BW


def min_tokens(layout):
    """The smallest batch that a copy in `layout` multiplies bit for bit as the file's kernels
    do: Q6_K_X* spell only llama.cpp's tiled fold, which batches of fewer than
    TILED_MIN_TOKENS do not take; the K-quant copies fold a single token as the gemv does not;
    Q8_0_X* (of Q8_0 or Q5_0 weights) and Q4_0_X* fold one token as the gemv does, and the
    "p16" copies (PACKED) are made for it (up to decode_tokens); the plain Q8_0 copy of Q5_0
    rows that do not group serves batches."""
    if layout in (Q6_K_X8, Q6_K_X16):
        return TILED_MIN_TOKENS
    if layout in (Q8_0_X8, Q8_0_X16, Q4_0_X8, Q4_0_X16) + PACKED:
        return 1
    return 2


def decode_tokens(layout):
    """The largest batch a copy that decode takes serves: the "p16" copies fold as the file's
    kernels below TILED_MIN_TOKENS (Q6_K's vec dot; Q5_0's, which tinyBLAS's batches fold
    alike; Q4_K's repacked gemv, and its gemm for the first T - T % 4), so they take a batched
    step's few tokens too; the other copies serve one token there and batches only where
    prefill takes them."""
    return TILED_MIN_TOKENS - 1 if layout in PACKED else 1


# (format, phase) -> its default layout, for the pairs a copy can serve (the tuner races the
# others: sidecar.resolve_layouts). Batches take the copies. Decode takes Q8_0's (it streams
# the copy's 36 bytes a block faster than the gemv does the file's 34: 14-17 against 16-21 GB/s
# on gemma3's layers) and Q4_0's (20 bytes a block against 18, 1.7-2.2x the file's gemv), not
# Q5_0's, which has 36/22 of its bytes. Where the CPU runs the 16-row copies (HAS_X16) they
# take the 8-row copies' place (X16_DEFAULTS): on a Zen 5, T=512 on gemma3's shapes, Q8_0 at
# 1.8-2.3x the 8-row copy's GFLOP/s, Q4_K 1.9-2.4x, Q6_K 2.2x, Q4_0 2.3-2.7x; decode streams
# 3-8 % faster, so one 16-row copy serves both phases.
LAYOUT_DEFAULTS = {(Q8_0, "decode"): "x8", (Q4_0, "decode"): "x8", (Q5_0, "decode"): "file",
                   (Q6_K, "decode"): "file", (Q4_K, "decode"): "file", **{(q, "prefill"): "x8" for q in (Q8_0, Q5_0, Q4_0, Q4_K, Q6_K)}}
X16_DEFAULTS = {pair: "x16" for pair, layout in LAYOUT_DEFAULTS.items() if layout == "x8"}
if HAS_X16:
    LAYOUT_DEFAULTS.update(X16_DEFAULTS)
    LAYOUT_DEFAULTS.update({(q, "decode"): "p16" for q in (Q6_K, Q5_0, Q4_K)})


# How far ahead (bytes) a copy's tiles prefetch their weight stream in decode-sized calls
# (rowgroup_template._tile's prefetch) where neither a tune on this machine nor a shipped profile
# chose it for the format (sidecar key "decode prefetch"; `tune` races PREFETCH_CHOICES on the
# copies decode takes): the 16-row Q8_0 copy and Q5_0_P16 PREFETCH_BYTES (measured on a
# Sapphire Rapids: rowgroup_template.py), the others none. A choice is the format's, for each of
# its copies (Q5_0's 8- and 16-row copies are Q8_0's, and take Q8_0's).
PREFETCH_DEFAULTS = {Q8_0_X16: PREFETCH_BYTES, Q5_0_P16: PREFETCH_BYTES}
PREFETCH_CHOICES = (0, 1152, PREFETCH_BYTES, 6912)


def layout_choices(qtype, phase):
    """The layouts offered for a format's weights in a phase: the file's blocks, and each copy
    that folds that phase's batches as the file's kernels do (the 16-row ones where HAS_X16)."""
    if (qtype, phase) not in LAYOUT_DEFAULTS:
        return ()
    names = [name for name in WIDTHS if name == "x8" or HAS_X16]
    layouts = {name: copy_layout(qtype, GROUP, name) for name in names}
    batch = 1 if phase == "decode" else TILED_MIN_TOKENS
    return ("file",) + tuple(n for n, lay in layouts.items()
                             if lay is not None and min_tokens(lay) <= batch and (phase == "decode" or lay not in PACKED))


def copy_layout(qtype, n_rows, name="x8"):
    """The layout of the `name` copy ("x8", "x16") of an (n_rows, n) matrix in `qtype`, or
    None: Q5_0 goes through Q8_0 (the same f16 scale, quants - 16), as plain Q8_0 where its
    rows do not group."""
    source = Q8_0 if qtype == Q5_0 and (qtype, name) not in _copies() else qtype
    if (source, name) not in _copies():
        return None
    if n_rows % WIDTHS[name]:
        return Q8_0 if qtype == Q5_0 else None
    return _copies()[source, name][0]


def make_copy(qtype, blocks, n_rows, n_cols, out=None, name="x8"):
    """The `name` copy of a matrix in `qtype` (into `out` if given, of rows *
    row_bytes(layout)), or None where it has none: a layout that declines it (copy_layout, or
    a Q8_0 quant of -128 in the 8-row copy without VNNI)."""
    layout = copy_layout(qtype, n_rows, name)
    if layout is None:
        return None
    if qtype == Q5_0 and layout in (Q8_0_X8, Q8_0_X16):
        return _copies()[Q8_0, name][1].of_q5_0(blocks, n_rows, n_cols, out=out)
    if qtype == Q5_0 and layout != Q5_0_P16:
        blocks, qtype = q5_0_as_q8_0(blocks), Q8_0
    if layout == Q8_0:
        if out is None:
            return np.array(blocks, np.uint8).reshape(-1)
        out[:] = blocks
        return out
    return _copies()[qtype, name][1](blocks, n_rows, n_cols, out=out)


# --- Q8_0 (and Q5_0 as Q8_0) -----------------------------------------------------------------

@njit(**JIT, parallel=True)
def _fill_q8_0(src, n_groups, n_blocks, out, width, flip, q5=False):
    """Q8_0_X8/X16 from the Q8_0 rows in src (q5: the Q5_0 rows, each quant its 5-bit value
    - 16, as quants.q5_0_as_q8_0 rewrites them, without that copy), each quant byte xor flip
    (0x80: w + 128, unsigned); False if a quant is -128 and kept signed. A row's lane of 4
    quants is 4 bytes in and 4 out, in order: numba's byte-by-byte scatter of the 32 quants
    took 1.5 s of CPU of a Qwen2.5 prompt's first batch (its Q5_0 matrices)."""
    src_bytes = 22 if q5 else 34
    bad = 0
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * 36 * width
            scales = out[o:o + 4 * width].view(np.float32)
            for r in range(width):
                p = ((grp * width + r) * n_blocks + blk) * src_bytes
                scales[r] = f16_at(src, p)
                qh = u32_at(src, p + 2) if q5 else np.uint32(0)
                for lane in range(8):
                    at = o + 4 * width * (1 + lane) + 4 * r
                    for k in range(4):
                        e = 4 * lane + k
                        if q5:
                            nib = (np.int32(src[p + 6 + (e & 15)]) >> (4 * (e >> 4))) & 0xF
                            q = np.uint8((nib + np.int32(((qh >> np.uint32(e)) & np.uint32(1)) << np.uint32(4)) - 16) & 0xFF)
                        else:
                            q = src[p + 2 + e]
                            if flip == 0:
                                bad += q == 0x80
                        out[at + k] = q ^ flip
    return bad == 0 or flip != 0


def _block_q8_0(offset):
    """8 lane fmas over the group's rows. offset=False: pmaddubsw(|x|, w signed by x) and
    pmaddwd (aux holds |x|). offset=True: the weights are stored as w + 128 (unsigned) and one
    vpdpbusd takes them against the token's signed bytes, each lane's sum starting from -128 x
    the token's sum over those 4 elements (aux, with F32_INT_BIAS: lane_f32 makes the sums
    floats): the same int32s without a psign, and a -128 quant is no exception."""
    def block(g, v, wb, tok, blk, acc):
        b = g.b
        scale = b.fmul(g.load(wb, 0, v.f32), tok.scale(blk))
        new = []
        for lane in range(8):
            w = g.load(wb, 4 * v.n * (1 + lane), v.i8)
            if offset:
                ints = g.dpbusd(b.bitcast(tok.lane(blk, lane, tok.aux), v.i32), w, tok.lane(blk, lane))
                new.append(g.fma(scale, lane_f32(g, v, ints), acc[lane]))
            else:
                ints = g.lanes(tok.lane(blk, lane, tok.aux), g.psign(w, tok.lane(blk, lane)))
                new.append(g.fma(scale, g.cvt(ints), acc[lane]))
        return new
    return block


def _finish_q8_0(g, v, acc):
    """hsum_float_8 of each row, lanes (0+4 + 2+6) + (1+5 + 3+7), then + 0.0 as the gemv's
    fold adds its (empty) leftover sum."""
    b = g.b
    s = [b.fadd(acc[i], acc[i + 4]) for i in range(4)]
    return b.fadd(b.fadd(b.fadd(s[0], s[2]), b.fadd(s[1], s[3])), g.c(v.f32, 0.0))


# With VNNI the quants are stored offset (vpdpbusd sums u8 x s8 in int32, so w + 128 cannot
# overflow a pair): a lane step is vpdpbusd, a subtraction (lane_f32: the conversion) and fma;
# without, psign, pmaddubsw, pmaddwd, cvt and fma. Either way every int32 lane is ggml's. The
# 16-row copy has only the offset form (zmm has no psign), which is why it needs VNNI to be fast.
def q8_0_x8(vnni, width=8, step=1, prefetch=0):
    """(repack, kernel) of Q8_0_X8 (width 8: in its form for a CPU with or without VNNI) or
    Q8_0_X16 (width 16: the offset form; vpdpbusd in plain IR without VNNI). Tests build the
    other forms too."""
    offset = vnni or width == 16
    layout = LAYOUT_OF[Q8_0, f"x{width}"]
    flip = 0x80 if offset else 0
    rep = _repacker(lambda src, n_groups, n_blocks, out, w: _fill_q8_0(src, n_groups, n_blocks, out, w, flip),
                    layout, 32, width)
    # the same copy of Q5_0 rows (make_copy)
    rep.of_q5_0 = _repacker(lambda src, n_groups, n_blocks, out, w: _fill_q8_0(src, n_groups, n_blocks, out, w, flip,
                                                                               True), layout, 32, width)
    tile = _tile("q8_0_x8", layout, 32, 8, _block_q8_0(offset), _finish_q8_0, vnni=vnni, width=width, step=step,
                 prefetch=prefetch)
    return rep, _kernel(layout, 32, AUX_LANE_OFFSETS if offset else AUX_ABS, tile, width=width)


# --- Q4_0 ------------------------------------------------------------------------------------
#
# Q4_0_X8: per group of 8 rows, per block (160 bytes, 20 a row and block against the file's
# 18): the 8 rows' scales as f32 (32 bytes), then 4 vectors of packed nibbles, u = q + 8 in
# [0, 15] as stored: vector v holds, for each row, lane v (elements 4v..4v+3) in the low
# nibbles and lane v + 4 in the high ones. A mask and a shift unpack two lanes of 8 rows, so
# the copy streams nearly the file's bytes and serves decode too (1.7-2.2x the file's gemv on
# gemma3's shapes) while prefill keeps the speed of a byte a quant. Q4_0_X16 is the same for
# 16 rows (320 bytes a block, zmm vectors).
# llama.cpp multiplies Q4_0 weights whose rows come in eights with its repacked kernels, one
# fma per pair and block of the exact integer sum (dots.dot_scalar), so the 8 lanes add up in
# int16 (|sum| <= 8 * 2 * 15 * 127 < 2**15), one pmaddwd makes each row's sum of u * x, and
# 8 * (the token's block sum) comes off it.

@njit(**JIT, parallel=True)
def _fill_q4_0(src, n_groups, n_blocks, out, width):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * 20 * width
            scales = out[o:o + 4 * width].view(np.float32)
            for r in range(width):
                p = ((grp * width + r) * n_blocks + blk) * 18
                scales[r] = f16_at(src, p)
                for v in range(4):
                    for k in range(4):
                        lo = q_q4_0(src, p, 4 * v + k) + 8
                        hi = q_q4_0(src, p, 4 * (v + 4) + k) + 8
                        out[o + 4 * width * (1 + v) + 4 * r + k] = np.uint8(lo | (hi << 4))
    return True


def _block_q4_0(g, v, wb, tok, blk, acc):
    """One fma of the block's integer sum, 8 * the token's block sum (aux) taken off."""
    b = g.b
    scale = b.fmul(g.load(wb, 0, v.f32), tok.scale(blk))
    low = g.c(v.i8, 0x0F)
    sums = []     # int16 pairs of each packed vector, or with vnni its int32 lanes
    for k in range(4):
        packed = g.load(wb, 4 * v.n * (1 + k), v.i8)
        high = b.bitcast(b.lshr(b.bitcast(packed, v.i16), g.c(v.i16, 4)), v.i8)
        lo, hi = b.and_(packed, low), b.and_(high, low)
        if g.vnni:      # one vpdpbusd chain of 2 per packed vector: short enough for a gemv
            sums.append(g.lanes(hi, tok.lane(blk, k + 4), g.lanes(lo, tok.lane(blk, k))))
        else:
            sums.append(b.add(g.maddubs(lo, tok.lane(blk, k)), g.maddubs(hi, tok.lane(blk, k + 4))))
    total = b.add(b.add(sums[0], sums[1]), b.add(sums[2], sums[3]))
    offset = g.splat(g.load(tok.aux, b.mul(blk, g.c(I64, 4)), I32), v.n)
    if g.vnni:
        ints = b.sub(total, offset)
    else:
        ints = b.sub(g.maddwd(total, g.c(v.i16, 1)), offset)
    return [g.fma(b.sitofp(ints, v.f32), scale, acc[0])]


def _finish_scalar(g, v, acc):
    """The repacked kernels' acc - their min sum (empty for Q4_0: 0.0)."""
    return g.b.fsub(acc[0], acc[1] if len(acc) > 1 else g.c(v.f32, 0.0))


def q4_0_x8_kernel(vnni, width=8, step=1, prefetch=0):
    """The Q4_0_X8 (or, width 16, Q4_0_X16) kernel in its form for a CPU with or without
    VNNI (the layout is one)."""
    layout = LAYOUT_OF[Q4_0, f"x{width}"]
    return _kernel(layout, 32, AUX_BLOCK_SUMS8,
                   _tile("q4_0_x8", layout, 32, 1, _block_q4_0, _finish_scalar, vnni=vnni, width=width, step=step,
                         prefetch=prefetch),
                   width=width)


# --- Q4_K ------------------------------------------------------------------------------------
#
# Q4_K_X8: per group of n = 8 rows, per 256-element block (312n = 2496 bytes):
#   0     d of the n rows, f32            4n    dmin, f32
#   8n    the 8 sub-block scales: per sub-block 2n int16, row r's scale at 2r and 2r+1
#   40n   the mins: per 64-element chunk k 2n int16, row r's min of sub-blocks 2k, 2k+1 at 2r, 2r+1
#   56n   the quants (0..15, a byte each) in 64 lanes of 4 elements, n rows x 4 bytes a lane
# (Q4_K_X16: the same with n = 16.) The nibbles stay unsigned, so pmaddubsw takes them
# against the token's bytes as they are (no psign), and a sub-block's 8 lanes add up in int16
# (|sum| <= 8 * 2 * 15 * 128 < 2**15) before one pmaddwd by the scales: ~2 operations a lane
# step against Q8_0's 5.

@njit(**JIT, parallel=True)
def _fill_q4_k(src, n_groups, n_blocks, out, width):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * 312 * width
            d = out[o:o + 8 * width].view(np.float32)
            sc = out[o + 8 * width:o + 56 * width].view(np.int16)
            for r in range(width):
                p = ((grp * width + r) * n_blocks + blk) * 144
                d[r] = f16_at(src, p)
                d[width + r] = f16_at(src, p + 2)
                for j in range(8):
                    s, m = scale_min_k4(src, p + 4, j)
                    sc[2 * width * j + 2 * r] = s
                    sc[2 * width * j + 2 * r + 1] = s
                    sc[16 * width + 2 * width * (j // 2) + 2 * r + j % 2] = m
                for e in range(256):
                    j = e // 32
                    q = (src[p + 16 + 32 * (j // 2) + e % 32] >> (4 * (j % 2))) & 0xF
                    out[o + 56 * width + 4 * width * (e // 4) + 4 * r + e % 4] = q
    return True


def _block_q4_k(chunks):
    """chunks=4 folds as llama.cpp's repacked gemm (ggml_gemm_q4_K_8x8_q8_K: one fma per
    64-element chunk), chunks=1 as its repacked gemv (one per block); both as dots.dot_scalar,
    ints and mins in their own sums (aux: the token's sums over 32 elements, int16)."""
    def block(g, v, wb, tok, blk, acc):
        b, n = g.b, v.n
        dx = tok.scale(blk)
        d, dmin = b.fmul(g.load(wb, 0, v.f32), dx), b.fmul(g.load(wb, 4 * n, v.f32), dx)
        ints, mins = [], []
        for k in range(4):
            chunk = None
            for sub in (2 * k, 2 * k + 1):
                sum16 = None
                for lane in range(8 * sub, 8 * sub + 8):
                    p16 = g.maddubs(g.load(wb, 56 * n + 4 * n * lane, v.i8), tok.lane(blk, lane))
                    sum16 = p16 if sum16 is None else b.add(sum16, p16)
                s32 = g.maddwd(sum16, g.load(wb, 8 * n + 4 * n * sub, v.i16))
                chunk = s32 if chunk is None else b.add(chunk, s32)
            ints.append(chunk)
            pair = tok.pair(b.add(b.mul(blk, g.c(I64, 16)), g.c(I64, 4 * k)))
            mins.append(g.maddwd(g.load(wb, 40 * n + 4 * n * k, v.i16), pair))
        return fold_k_chunks(g, v, ints, mins, d, dmin, acc, chunks)
    return block


def q4_k_x8_kernel(width=8, step=1, prefetch=0):
    """The Q4_K_X8 (or, width 16, Q4_K_X16) kernel: the repacked gemm's tile, the gemv's for
    the tokens past it."""
    layout = LAYOUT_OF[Q4_K, f"x{width}"]
    return _kernel(layout, 256, AUX_BSUMS32,
                   _tile("q4_k_x8_gemm", layout, 256, 2, _block_q4_k(4), _finish_scalar, width=width, step=step,
                         prefetch=prefetch),
                   _tile("q4_k_x8_gemv", layout, 256, 2, _block_q4_k(1), _finish_scalar, width=width,
                         prefetch=prefetch),
                   width=width)


# --- Q6_K ------------------------------------------------------------------------------------
#
# Q6_K_X8: per group of n = 8 rows, per 256-element block (356n = 2848 bytes):
#   0     d of the n rows, f32
#   4n    the 16 sub-block scales: per sub-block 2n int16, row r's scale at 2r and 2r+1
#   68n   the scales again in pairs: per i 2n int16, row r's scales 2i, 2i+1 at 2r, 2r+1
#   100n  the quants (0..63, unsigned as stored) in 64 lanes of 4 elements, n rows x 4 bytes
# (Q6_K_X16: the same with n = 16.) Only llama.cpp's tiled fold (batches of
# TILED_MIN_TOKENS or more) is spelt here:
#   s = sum_j sc_j * sum (q - 32) x = sum_j sc_j * sum q x - 32 * sum_j sc_j * bsum16_j,
#   res = f32(s) * d, acc = fma(res, dx, acc)   (dots.dot_tiled)
# pmaddubsw takes the unsigned quants as they are; two lanes add up in int16
# (|sum| <= 2 * 2 * 63 * 128 < 2**15) before a pmaddwd by the scale.

@njit(**JIT, parallel=True)
def _fill_q6_k(src, n_groups, n_blocks, out, width):
    for grp in numba.prange(n_groups):
        for blk in range(n_blocks):
            o = (grp * n_blocks + blk) * 356 * width
            d = out[o:o + 4 * width].view(np.float32)
            sc = out[o + 4 * width:o + 100 * width].view(np.int16)
            for r in range(width):
                p = ((grp * width + r) * n_blocks + blk) * 210
                d[r] = f16_at(src, p + 208)
                for j in range(16):
                    s = np.int16(np.int8(src[p + 192 + j]))
                    sc[2 * width * j + 2 * r] = s
                    sc[2 * width * j + 2 * r + 1] = s
                    sc[32 * width + 2 * width * (j // 2) + 2 * r + j % 2] = s
                for e in range(256):
                    out[o + 100 * width + 4 * width * (e // 4) + 4 * r + e % 4] = np.uint8(q_q6_k(src, p, e))
    return True


def _block_q6_k(g, v, wb, tok, blk, acc):
    """The tiled fold of one block (aux: the token's Q8_K sums over 16 elements, int16)."""
    b, n = g.b, v.n
    total = None
    for sub in range(16):
        for half in (0, 1):
            sum16 = None
            for lane in range(4 * sub + 2 * half, 4 * sub + 2 * half + 2):
                p16 = g.maddubs(g.load(wb, 100 * n + 4 * n * lane, v.i8), tok.lane(blk, lane))
                sum16 = p16 if sum16 is None else b.add(sum16, p16)
            s32 = g.maddwd(sum16, g.load(wb, 4 * n + 4 * n * sub, v.i16))
            total = s32 if total is None else b.add(total, s32)
    corr = None
    for i in range(8):
        pair = tok.pair(b.add(b.mul(blk, g.c(I64, 32)), g.c(I64, 4 * i)))
        s32 = g.maddwd(g.load(wb, 68 * n + 4 * n * i, v.i16), pair)
        corr = s32 if corr is None else b.add(corr, s32)
    ints = b.sub(total, b.shl(corr, g.c(v.i32, 5)))
    res = b.fmul(b.sitofp(ints, v.f32), g.load(wb, 0, v.f32))
    return [g.fma(res, tok.scale(blk), acc[0])]


def q6_k_x8_kernel(width=8, step=1, prefetch=0):
    """The Q6_K_X8 (or, width 16, Q6_K_X16) kernel: llama.cpp's tiled fold."""
    layout = LAYOUT_OF[Q6_K, f"x{width}"]
    return _kernel(layout, 256, AUX_BSUMS16,
                   _tile("q6_k_x8_tiled", layout, 256, 1, _block_q6_k, lambda g, v, acc: acc[0], width=width,
                         step=step, prefetch=prefetch),
                   width=width)


# --- the copies: one (repack, kernel) per format and width, from the template -------------

# Tokens a pass of the 16-row tiles, measured on a Zen 5 at T=512 (gemma3's shapes): Q8_0 2
# (16 zmm accumulators; 1.1-1.5x one a pass, 3 spills), Q4_0 6 (1.5x), Q6_K 6 (2.1x), Q4_K 1
# (more ran 0.5-0.7x: its sub-block sums already fill the registers). The 8-row tiles take
# one (AVX2 has 16 registers).
_STEPS = {Q8_0: 2, Q4_0: 6, Q4_K: 1, Q6_K: 6}


def _copy(qtype, width, prefetch):
    """(layout, repack, kernel) of the `width`-row copy of `qtype` weights, in the form for
    this CPU, its tiles prefetching `prefetch` bytes ahead in decode-sized calls."""
    layout, step = LAYOUT_OF[qtype, f"x{width}"], _STEPS[qtype] if width == 16 else 1
    if qtype == Q8_0:
        return (layout, *q8_0_x8(HAS_VNNI, width, step, prefetch))
    block_elems, fill, kernel = {Q4_0: (32, _fill_q4_0, lambda: q4_0_x8_kernel(HAS_VNNI, width, step, prefetch)),
                                 Q4_K: (256, _fill_q4_k, lambda: q4_k_x8_kernel(width, step, prefetch)),
                                 Q6_K: (256, _fill_q6_k, lambda: q6_k_x8_kernel(width, step, prefetch))}[qtype]
    return layout, _repacker(fill, layout, block_elems, width), kernel()


_forms = {}     # (qtype, copy name, prefetch) -> (layout, repack, kernel)


def copy_form(qtype, name, prefetch):
    """(layout, repack, kernel) of the `name` copy of `qtype` weights whose tiles prefetch
    `prefetch` bytes ahead in decode-sized calls: the model's (the prefetch in force) or a
    contender of the tuner's race. Built once each (its kernel compiles on first call)."""
    key = (qtype, name, prefetch)
    if key not in _forms:
        if name == "p16":
            make = {Q6_K: rowgroups_p16.q6_k_p16, Q5_0: rowgroups_p16.q5_0_p16, Q4_K: rowgroups_p16.q4_k_p16}[qtype]
            _forms[key] = make(prefetch=prefetch)
        else:
            _forms[key] = _copy(qtype, WIDTHS[name], prefetch)
    return _forms[key]


def prefetch_in_force(qtype, name, chosen=None):
    """The bytes ahead the tiles of the (qtype, name) copy prefetch (a Q5_0 copy other than
    p16 is Q8_0's): the format's choice (chosen: {qtype: bytes} from
    sidecar.prefetch_in_force, read when not given) or its layout's default."""
    if (qtype, name) not in LAYOUT_OF:
        qtype = Q8_0
    if chosen is None:
        chosen = sidecar.prefetch_in_force(COPIED, PREFETCH_CHOICES)
    return chosen.get(qtype, PREFETCH_DEFAULTS.get(LAYOUT_OF[qtype, name], 0))


COPIED = tuple(dict.fromkeys(qtype for qtype, _ in LAYOUT_OF))     # the formats with copies of their own
_built = {}


def _copies():
    """{(qtype, copy name): (layout, repack, kernel)} of the file formats with copies, with the
    prefetch in force, built on first use (importing this module builds no kernel). Q5_0 takes
    Q8_0's through its Q8_0 copy (quants.q5_0_as_q8_0)."""
    if not _built:
        chosen = sidecar.prefetch_in_force(COPIED, PREFETCH_CHOICES)
        _built.update({(qtype, name): copy_form(qtype, name, prefetch_in_force(qtype, name, chosen))
                       for qtype, name in LAYOUT_OF})
    return _built


def __getattr__(name):
    """COPIES: (qtype, copy name) -> (layout, repack); KERNELS: layout -> the kernel that
    multiplies a copy in it (matmul's dispatch, the tuner's races); FUSED_KERNELS: layout -> its
    fused decode kernel (matmul's fused dispatch); ROWS_KERNELS: layout -> (its rows function,
    the aux kind its tiles read, rows a group): a range of row groups (matmul's rows dispatch, the compiled
    decode step's). Built on first use (PEP 562)."""
    if name == "COPIES":
        return {key: (layout, repack) for key, (layout, repack, _) in _copies().items()}
    if name == "KERNELS":
        return {layout: kernel for layout, _, kernel in _copies().values()}
    if name == "FUSED_KERNELS":
        return {layout: FUSED[kernel] for layout, _, kernel in _copies().values()}
    if name == "ROWS_KERNELS":
        return {layout: RANGES[FUSED[kernel]] for layout, _, kernel in _copies().values()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

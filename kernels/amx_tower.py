"""Q8_0 matrix products of the media towers on AMX-INT8 tiles (Sapphire Rapids' tile unit).

The activations are quantised to Q8_0 blocks exactly as ggml's quantize_row_q8_0 does (actq),
so each block's int32 sum of 32 int8 x int8 products is the one libmtmd forms; tdpbssd makes
16 x 16 such sums at once (A: 16 tokens x 32 bytes of one block, B: that block of 16 output
rows, 8 quads x 16 rows x 4 bytes), and the fold adds float(sum) * (dx * dw) to a float32
accumulator per block, as ggml's vec_dot_q8_0_q8_0 does, but per output rather than per lane
of one dot: the sums of blocks come in another order, so the result is not ggml's to the bit.
That suits the towers, whose parity is a relative error bound; NOT the LLM, whose matmuls
must stay bit-exact with llama.cpp's (kernels/matmul.py).

A call of the tile intrinsic makes one 32 tokens x 32 outputs block over the whole summed
axis: 2 x 2 C tiles, their block sums stored to a scratch tile each block and folded with
AVX-512 into the accumulator. The weights are repacked once at load (`pack_q8_0`): per 16
output rows and block, the 512-byte B tile and the 16 scales as float32.

F16 matrices run on AMX-BF16 (kernels/amx.py's bf16 tile GEMM): ggml converts the
activations to f16 for an F16 matrix, and an f16 value is exactly the sum of two bf16 parts
(its 11 significant bits: the nearest bf16, then the rest), so the passes hi.hi + lo.hi + hi.lo
+ lo.lo (F16_EXACT) give each f16 x f16 product exactly, summed in float32 in another order
than ggml's. The towers run F16_PASSES, without lo.lo (|lo| <= 2^-9 of its f16 value, so a
product is off by at most 2^-18 of itself): 1.3-2.2x faster, and 2.9e-6 relative to the float64
product on a (128, 1152) x (1152, 3456), where the exact passes give 2.2e-7.

The tile state is granted by the OS on request (kernels/amx.py: INT8, BF16; DASLLAMA_AMX=0
off); each call loads its own tile configuration and releases the tiles after.
"""
import threading

import numpy as np
from llvmlite import ir
from numba import njit
from numba.extending import intrinsic

from . import amx, tower_rows
from .actq import quantize_q8_0_rows, quantize_row_q8_0, round_f16
from .ir import F32T, I8, I32, I64, Gen, f16_to_f32, f32_bits, i64_call, vec
from .quants import JIT
from .simd import _loop

INT8, BF16 = amx.INT8, amx.BF16
F16_EXACT = ((0, 0), (1, 0), (1, 1), (0, 1))    # the f16 products exactly: see the docstring
F16_PASSES = ((0, 0), (1, 0), (0, 1))           # without lo.lo: 2^-18 of a product, 1.3-2.2x faster

BLOCK = 32                  # a Q8_0 block: the summed length of one tdpbssd here
TILE = 16                   # rows of an A / C tile, columns of a C tile
SPAN = 32                   # tokens and outputs of one call: 2 x 2 C tiles
B_TILE = 8 * 64             # bytes of one B tile: 8 quads x 16 outputs x 4
V16F = vec(F32T, 16)
V16I = vec(I32, 16)


TILE_SHAPES = [(16, 64)] * 4 + [(16, 32)] * 2 + [(8, 64)] * 2   # C 0-3, A 4-5 (16 x 32 bytes), B 6-7


EPILOGUES = ("bias", "residual", "gelu_erf")   # y = acc + bias as stored; out + y; GELU(y)


def _emit_q8_tile(epilogue, b, args):
    """tile(xq, x_rs, xd, xd_rs, wq, wd, out, out_rs, n_kb, bias, n_out): see q8_tile."""
    g = Gen(b)
    xq, x_rs, xd, xd_rs, wq, wd, out, out_rs, n_kb, bias, n_out = args
    ptr = lambda v: b.inttoptr(v, I8.as_pointer())
    xq_p, xd_p, wq_p, wd_p, out_p, bias_p = map(ptr, (xq, xd, wq, wd, out, bias))
    void = ir.VoidType()
    amx.configure(g, TILE_SHAPES)
    acc = b.alloca(ir.ArrayType(F32T, SPAN * SPAN))          # (token, output) float32
    acc.align = 64
    acc_p = b.bitcast(acc, I8.as_pointer())
    scratch = b.alloca(ir.ArrayType(I32, 4 * TILE * TILE))  # the 4 C tiles' int32 sums
    scratch.align = 64
    s_p = b.bitcast(scratch, I8.as_pointer())
    zero = g.c(V16F, 0.0)
    for r in range(SPAN * 2):
        st = b.store(zero, b.bitcast(g.at(acc_p, 64 * r), V16F.as_pointer()))
        st.align = 64
    c_tile = lambda i, j: g.c(I8, 2 * i + j)
    a_tile = lambda i: g.c(I8, 4 + i)
    b_tile = lambda j: g.c(I8, 6 + j)
    nb_bytes = b.mul(n_kb, g.c(I64, B_TILE))                 # one 16-output strip of B tiles
    nb_scales = b.mul(n_kb, g.c(I64, 64))
    a_rows = [g.at(xq_p, b.mul(g.c(I64, 16 * i), x_rs)) for i in range(2)]
    d_rows = [[g.at(xd_p, b.mul(g.c(I64, 16 * i + r), xd_rs)) for r in range(16)] for i in range(2)]

    def block(kb, carry):
        for i in range(2):
            for j in range(2):
                g.intr("llvm.x86.tilezero", void, [c_tile(i, j)])
        for i in range(2):
            g.intr("llvm.x86.tileloadd64", void, [a_tile(i), g.at(a_rows[i], b.mul(kb, g.c(I64, BLOCK))), x_rs])
        w_off = b.mul(kb, g.c(I64, B_TILE))
        for j in range(2):
            g.intr("llvm.x86.tileloadd64", void,
                   [b_tile(j), g.at(wq_p, b.add(b.mul(g.c(I64, j), nb_bytes), w_off)), g.c(I64, 64)])
        for i in range(2):
            for j in range(2):
                g.intr("llvm.x86.tdpbssd", void, [c_tile(i, j), a_tile(i), b_tile(j)])
                g.intr("llvm.x86.tilestored64", void,
                       [c_tile(i, j), g.at(s_p, (2 * i + j) * 1024), g.c(I64, 64)])
        s_off = b.mul(kb, g.c(I64, 64))
        dw = [g.load(wd_p, b.add(b.mul(g.c(I64, j), nb_scales), s_off), V16F) for j in range(2)]
        d_off = b.mul(kb, g.c(I64, 4))
        for i in range(2):
            for r in range(16):
                dx = g.splat(g.f32(d_rows[i][r], d_off), 16)
                for j in range(2):
                    sums = b.sitofp(g.load(s_p, (2 * i + j) * 1024 + 64 * r, V16I), V16F)
                    a_ptr = b.bitcast(g.at(acc_p, ((16 * i + r) * SPAN + 16 * j) * 4), V16F.as_pointer())
                    old = b.load(a_ptr)
                    old.align = 64
                    st = b.store(g.fma(sums, b.fmul(dx, dw[j]), old), a_ptr)
                    st.align = 64
        return carry

    _loop(g, g.c(I64, 0), n_kb, [g.c(I64, 0)], block)
    g.intr("llvm.x86.tilerelease", void, [])
    bias_v = [g.load(bias_p, 64 * j, V16F) for j in range(2)]
    for r in range(SPAN):
        with b.if_then(b.icmp_signed("<", g.c(I64, r), n_out)):
            for j in range(2):
                v = b.load(b.bitcast(g.at(acc_p, (r * SPAN + 16 * j) * 4), V16F.as_pointer()))
                o = b.bitcast(g.at(out_p, b.add(b.mul(g.c(I64, r), out_rs), g.c(I64, 64 * j))), V16F.as_pointer())
                y = b.fadd(v, bias_v[j])
                if epilogue == "residual":
                    before = b.load(o)
                    before.align = 4
                    y = b.fadd(before, y)
                elif epilogue == "gelu_erf":
                    y = tower_rows.gelu_erf16(g, y)
                b.store(y, o).align = 4


def q8_tile(epilogue):
    """numba intrinsic tile(xq, x_rs, xd, xd_rs, wq, wd, out, out_rs, n_kb, bias, n_out): out
    (the first n_out of 32 tokens x 32 outputs float32, rows out_rs bytes apart) <- y, the
    Q8_0 product of the tokens' quants xq (int8, rows x_rs apart; 32 n_kb of them) with scales
    xd (float32 a block, rows xd_rs apart) and two 16-output strips of pack_q8_0's tiles at wq
    (scales at wd), the second n_kb * 512 bytes (n_kb * 64 of scales) after the first, plus
    the 32 float32 at bias; or out + y ("residual"), or GELU-erf(y) ("gelu_erf"): the pass a
    tower would make over y next, while it is in registers."""
    name = f"dasllama_amx_q8_tile_{epilogue}"

    @intrinsic
    def tile(typingctx, xq, x_rs, xd, xd_rs, wq, wd, out, out_rs, n_kb, bias, n_out):
        return i64_call(11, name, lambda b, args: _emit_q8_tile(epilogue, b, args))

    tile._set_uuid(f"dasllama.amx_tower.{name}")     # stable across processes: see simd.py
    return tile


# --- packing ---------------------------------------------------------------------------------

def pack_q8_0(raw, n_rows, n_cols):
    """Q8_0 rows (uint8, n_rows x row bytes: per block an f16 scale and 32 int8) -> (wq, wd):
    wq int8 (N / 16, n_kb, 8, 16, 4), element [s, kb, q, n, i] = w[16 s + n, 32 kb + 4 q + i],
    the B tiles tdpbssd reads; wd float32 (N / 16, n_kb, 16) their scales. N is n_rows
    rounded up to 32, the rows past n_rows zero."""
    n_kb = n_cols // BLOCK
    n_pad = -(-n_rows // SPAN) * SPAN
    wq = amx.zeros_aligned((n_pad // TILE, n_kb, 8, TILE, 4), np.int8)
    wd = np.zeros((n_pad // TILE, n_kb, TILE), np.float32)
    _pack_q8_0(np.asarray(raw, np.uint8).reshape(n_rows, n_kb * (2 + BLOCK)), wq, wd)
    return wq, wd


@njit(**JIT)
def _pack_q8_0(rows, wq, wd):
    """pack_q8_0's one pass over the file's blocks (at load: 27 SigLIP layers in well under
    a second, where numpy's transposes took seconds)."""
    for r in range(rows.shape[0]):
        s, n = r // TILE, r % TILE
        for kb in range(wq.shape[1]):
            o = kb * (2 + BLOCK)
            wd[s, kb, n] = f16_to_f32(np.uint16(rows[r, o]) | (np.uint16(rows[r, o + 1]) << np.uint16(8)))
            for e in range(BLOCK):
                wq[s, kb, e // 4, n, e % 4] = np.int8(rows[r, o + 2 + e])


# --- the driver ------------------------------------------------------------------------------

_scratch = threading.local()


def _buffers(key, make):
    """This thread's scratch arrays for `key`, made once by make(): a tower's products run in
    blocks of one size on its pool, and fresh arrays each call cost page faults."""
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    if key not in bufs:
        bufs[key] = make()
    return bufs[key]


@njit(**JIT)
def _store(tiles, out, bias):
    """out (T, N) <- the first T x N of tiles (T', N'), plus bias (N,) where it has N."""
    n_tok, n_rows = out.shape
    with_bias = bias.shape[0] == n_rows
    for t in range(n_tok):
        for r in range(n_rows):
            out[t, r] = tiles[t, r] + bias[r] if with_bias else tiles[t, r]


quantize_rows = quantize_q8_0_rows


def _q8_driver(epilogue):
    tile = q8_tile(epilogue)

    @njit(**JIT)
    def run(x, wq, wd, xq, xd, out, bias):
        """out (T, N') <- x (T, K) quantised into xq, xd (T', K), (T', K / 32), times the
        packed Q8_0 matrix, + bias (N',), through the epilogue; N' the packed outputs (a
        multiple of 32); xq's rows past T are the scratch's (left from before: not written out)."""
        n_tok, n_cols = x.shape
        n_kb = n_cols // BLOCK
        n_pad = wq.shape[0] * TILE
        quantize_rows(x.ctypes.data, n_cols * 4, xq.ctypes.data, n_cols, xd.ctypes.data, n_kb * 4, n_kb, n_tok)
        strip = n_kb * B_TILE
        out_rs = out.strides[0]
        for nt in range(n_pad // SPAN):
            w0 = wq.ctypes.data + 2 * nt * strip
            d0 = wd.ctypes.data + 2 * nt * n_kb * 64
            for mt in range((n_tok + SPAN - 1) // SPAN):
                tile(xq.ctypes.data + mt * SPAN * n_cols, n_cols, xd.ctypes.data + mt * SPAN * n_kb * 4,
                     n_kb * 4, w0, d0, out.ctypes.data + mt * SPAN * out_rs + nt * SPAN * 4, out_rs, n_kb,
                     bias.ctypes.data + nt * SPAN * 4, min(SPAN, n_tok - mt * SPAN))

    return run


_q8_tiles = {e: _q8_driver(e) for e in EPILOGUES}


_NO_BIAS = np.zeros(0, np.float32)


def q8_matmul(x, wq, wd, n_rows, out=None, bias=None, epilogue="bias"):
    """out (T, n_rows) float32 (made if None) = y, x (T, K) times the packed Q8_0 matrix
    (pack_q8_0's), x quantised to Q8_0 first, + bias (n_rows,) if given; or out + y
    ("residual"), or GELU-erf(y) ("gelu_erf"); single-threaded (the tower's pool shares
    tokens out). Where n_rows is the packed width (a multiple of 32) the tiles write out
    directly, else a scratch that is copied."""
    x = np.ascontiguousarray(x)
    n_tok, n_cols = x.shape
    t_pad, n_pad = -(-n_tok // SPAN) * SPAN, wq.shape[0] * TILE
    xq, xd, zeros = _buffers(("q8", t_pad, n_cols, n_pad), lambda: (
        amx.zeros_aligned((t_pad, n_cols), np.int8), np.zeros((t_pad, n_cols // BLOCK), np.float32),
        np.zeros(n_pad, np.float32)))
    out = np.empty((n_tok, n_rows), np.float32) if out is None else out
    if n_rows == n_pad and out.strides[1] == 4:
        _q8_tiles[epilogue](x, wq, wd, xq, xd, out, zeros if bias is None else np.ascontiguousarray(bias, np.float32))
        return out
    (tiles,) = _buffers(("q8 tiles", t_pad, n_pad), lambda: (amx.zeros_aligned((t_pad, n_pad), np.float32),))
    _q8_tiles["bias"](x, wq, wd, xq, xd, tiles, zeros)
    y = np.empty_like(out) if epilogue == "residual" else out
    _store(tiles, y, _NO_BIAS if bias is None else bias)
    if epilogue == "residual":
        out += y
    elif epilogue == "gelu_erf":
        tower_rows.bias_gelu_erf_rows(out, zeros)
    return out


def q8_matmul_ref(x, raw, n_rows, n_cols):
    """float64 reference: x quantised to Q8_0 as ggml does, times the dequantised weights."""
    n_kb = n_cols // BLOCK
    xq = np.zeros(x.shape, np.int8)
    xd = np.zeros((len(x), n_kb), np.float32)
    for t in range(len(x)):
        quantize_row_q8_0(x[t], xq[t], xd[t], xd[t], False)
    blocks = np.asarray(raw, np.uint8).reshape(n_rows, n_kb, 2 + BLOCK)
    w = blocks[:, :, 2:].view(np.int8).astype(np.float64)
    dw = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16)[:, :, 0].astype(np.float64)
    xs = xq.reshape(len(x), n_kb, BLOCK).astype(np.float64)
    sums = np.einsum("tkb,nkb->tnk", xs, w)                      # exact block sums
    return np.einsum("tnk,tk,nk->tn", sums, xd.astype(np.float64), dw)


# --- F16 matrices on the bf16 tiles ----------------------------------------------------------

F16_SPAN = 32               # rows and columns of one bf16 GEMM call: 2 x 2 C tiles


def pack_f16(rows):
    """F16 rows (n_rows, n_cols) -> the two bf16 parts of W^T in 1 KB B tiles, per 32-column
    block contiguous so it stays in cache while the tokens pass: uint16 (2, N / 32, K / 32, 2,
    16, 16, 2), element [q, jb, kb, j, r, n, e] = part q of W[32 jb + 16 j + n, 32 kb + 2 r + e];
    N and K padded to 32 with zeros."""
    n_rows, n_cols = rows.shape
    n_pad, k_pad = -(-n_rows // F16_SPAN) * F16_SPAN, -(-n_cols // 32) * 32
    bp = amx.zeros_aligned((2, n_pad // 32, k_pad // 32, 2, 16, 16, 2), np.uint16)
    _pack_f16(np.ascontiguousarray(rows, np.float16).view(np.uint16), bp)
    return bp


@njit(**JIT)
def _pack_f16(bits, bp):
    """pack_f16's one pass over the f16 bits (n_rows, n_cols): each value is exactly its two
    bf16 parts."""
    for w in range(bits.shape[0]):
        jb, j, n = w // 32, (w % 32) // 16, w % 16
        for k in range(bits.shape[1]):
            hi, lo = amx.bf16_hi_lo(f16_to_f32(bits[w, k]))
            bp[0, jb, k // 32, j, (k % 32) // 2, n, k % 2] = hi
            bp[1, jb, k // 32, j, (k % 32) // 2, n, k % 2] = lo


@njit(**JIT)
def split_f16_rows(x, ap):
    """ap (2, T', K') uint16 <- the two bf16 parts of x (T, K) rounded to f16 (nearest even,
    as ggml converts activations for an F16 matrix); exact: f16's 11 bits fit two bf16s.
    The padding past T and K is left as it is (zeros)."""
    for t in range(x.shape[0]):
        for k in range(x.shape[1]):
            ap[0, t, k], ap[1, t, k] = amx.bf16_hi_lo(round_f16(x[t, k]))


_ZERO = amx.zeros_aligned((2, 16), np.float32)   # a row of zeros for 2 C tiles: S with stride 0


def _f16_kernel(passes):
    gemm = amx.bf16_gemm(2, 2, passes)

    @njit(**JIT)
    def run(x, bp, ap, c, zero):
        """c (T', N') <- x (T, K) split into ap (2, T', K') times bp; ap's columns past K stay
        zero (the scratch is made so), its rows past T are left from before (not read back);
        each C block starts from zero's stride-0 rows."""
        _, n_jb, n_kb = bp.shape[:3]
        t_pad, k_pad = ap.shape[1], ap.shape[2]
        split_f16_rows(x, ap)
        a_rs, c_rs = k_pad * 2, n_jb * F16_SPAN * 4
        b_ks = 2 * 1024
        b_jb = n_kb * b_ks
        for jb in range(n_jb):             # a column block's B tiles stay in cache over the tokens
            gemm(ap.ctypes.data, a_rs, 64, t_pad * a_rs, 0, F16_SPAN * a_rs,
                 bp.ctypes.data + jb * b_jb, 64, b_ks, 1024, n_jb * b_jb, 0, 0,
                 c.ctypes.data + jb * F16_SPAN * 4, c_rs, F16_SPAN * c_rs, 0,
                 zero.ctypes.data, 0, 0, 0, n_kb, 1, t_pad // F16_SPAN, 1)

    return run


_f16_kernels = {}


def f16_matmul(x, bp, n_rows, passes=F16_PASSES, out=None, bias=None):
    """out (T, n_rows) float32 (made if None) = x (T, K) rounded to f16 times the pack_f16
    matrix bp, on the bf16 tiles, + bias (n_rows,) if given; single-threaded (the tower's
    pool shares tokens out)."""
    passes = tuple(passes)
    if passes not in _f16_kernels:
        _f16_kernels[passes] = _f16_kernel(passes)
    x = np.ascontiguousarray(x)
    t_pad = -(-len(x) // F16_SPAN) * F16_SPAN
    k_pad, n_pad = bp.shape[2] * 32, bp.shape[1] * F16_SPAN
    ap, c = _buffers(("f16", t_pad, k_pad, n_pad), lambda: (
        amx.zeros_aligned((2, t_pad, k_pad), np.uint16), amx.zeros_aligned((t_pad, n_pad), np.float32)))
    _f16_kernels[passes](x, bp, ap, c, _ZERO)
    out = np.empty((len(x), n_rows), np.float32) if out is None else out
    _store(c, out, _NO_BIAS if bias is None else bias)
    return out


def f16_matmul_ref(x, rows):
    """float64 reference: x rounded to f16 times the F16 rows' transpose."""
    return x.astype(np.float16).astype(np.float64) @ np.asarray(rows, np.float64).T


# --- attention on the bf16 tiles -------------------------------------------------------------

ATT_PASSES = ((0, 0), (1, 0), (0, 1))   # hi.hi + lo.hi + hi.lo: 2^-17 of a product
PV_PASSES = ATT_PASSES                  # exps x values; ((0, 0), (0, 1)): the exps' hi part only
Q_TILE = 128                            # queries a job
KEY_BLOCK = 512                         # keys a step: the block's scores, exps and k, v tiles stay in L2


def pad32(n):
    return (n + 31) // 32 * 32


def _attention_kernels(pv_passes):
    qk_gemm = amx.bf16_gemm(2, 2, ATT_PASSES)
    pv_gemm = amx.bf16_gemm(2, 2, pv_passes)
    softmax = tower_rows.softmax_block(amx.n_parts(pv_passes) > 1)

    @njit(**JIT)
    def pack_head(qkv, h, d, scale, qp, kp, vp):
        """Head h (width d) of the projections qkv (T, 3 n), q | k | v, into its tiles: q
        times scale (float32, as the BLAS path scales it) in two bf16 parts, qp (2, T', d')
        row-major; k and v rounded to f16 as libmtmd's flash attention casts them, in their
        two exact parts, as the GEMM's B tiles of k^T (d, T) and of v (T, d), a 16-column
        strip's tiles contiguous: kp, vp (2, N' / 16, K' / 32, 16, 16, 2), [q, t, kb, r, c, e]
        = part q of B[32 kb + 2 r + e, 16 t + c]. One pass over the head's columns instead of
        a transpose, a scaling and a rounding pass over all of qkv."""
        n = qkv.shape[1] // 3
        for t in range(qkv.shape[0]):
            row = qkv[t]
            tb, tr, te, tt, tn = t // 32, (t % 32) // 2, t % 2, t // 16, t % 16
            for c in range(d):
                qp[0, t, c], qp[1, t, c] = amx.bf16_hi_lo(row[h * d + c] * scale)
                kb, kr, ke = c // 32, (c % 32) // 2, c % 2
                kp[0, tt, kb, kr, tn, ke], kp[1, tt, kb, kr, tn, ke] = amx.bf16_hi_lo(round_f16(row[n + h * d + c]))
                vc, vn = c // 16, c % 16
                vp[0, vc, tb, tr, vn, te], vp[1, vc, tb, tr, vn, te] = amx.bf16_hi_lo(round_f16(row[2 * n + h * d + c]))

    @njit(**JIT)
    def tile(qp, kp, vp, t0, n_tok, out, s, p, o, m, l, zero):
        """out (q_tile', d) <- softmax(q k^T) v of the queries from t0 (out's rows) on the head
        packed in qp (2, T', d'), kp (B tiles of k (d, T)), vp (B tiles of v^T (T, d)), a key
        block at a time (online softmax, as flash attention); the scratch of the caller's
        thread, whose shapes set the tile: s (q_tile, key_block) scores, p (2, q_tile,
        key_block) their exps' bf16 parts, o (q_tile, d'), m, l (q_tile,); zero: 128 bytes of
        zeros the scores start from (a stride-0 load: no pass to clear them)."""
        d_pad = qp.shape[2]
        n_q, d = out.shape
        n_kd, n_kt = d_pad // 32, vp.shape[2]                          # 32-blocks of d, of keys
        k_strip, v_strip = n_kd * 1024, n_kt * 1024                      # a 16-column strip of B
        q_tile, key_block = s.shape                                   # the scratch's sizes
        q_rs, s_rs, p_rs, o_rs = d_pad * 2, key_block * 4, key_block * 2, d_pad * 4
        o[:] = 0
        m[:] = -np.inf
        l[:] = 0
        for k0 in range(0, n_tok, key_block):
            nk = min(key_block, n_tok - k0)
            nb = (nk + 31) // 32
            qk_gemm(qp.ctypes.data + t0 * q_rs, q_rs, 64, qp.shape[1] * q_rs, 0, 32 * q_rs,     # s = q k^T
                    kp.ctypes.data + (k0 // 16) * k_strip, 64, 1024, k_strip, kp.shape[1] * k_strip, 0, 2 * k_strip,
                    s.ctypes.data, s_rs, 32 * s_rs, 128, zero.ctypes.data, 0, 0, 0,
                    n_kd, 1, q_tile // 32, nb)
            softmax(s.ctypes.data, s_rs, nk, nb * 32, p.ctypes.data, q_tile * p_rs, p_rs,       # p = e^(s - max)
                    m.ctypes.data, l.ctypes.data, o.ctypes.data, o_rs, d_pad, q_tile)
            pv_gemm(p.ctypes.data, p_rs, 64, q_tile * p_rs, 0, 32 * p_rs,                     # o += p v
                    vp.ctypes.data + (k0 // 32) * 1024, 64, 1024, v_strip, vp.shape[1] * v_strip, 0, 2 * v_strip,
                    o.ctypes.data, o_rs, 32 * o_rs, 128, o.ctypes.data, o_rs, 32 * o_rs, 128,
                    nb, 1, q_tile // 32, d_pad // 32)
        for t in range(n_q):
            for c in range(d):
                out[t, c] = o[t, c] / l[t]

    return pack_head, tile


_pack16 = tower_rows.pack_head16()


@njit(**JIT)
def pack_head16(qkv, h, d, scale, qp, kp, vp):
    """pack_head's result for a head width d that is a multiple of 16, 16 columns at a time
    in IR (tower_rows.pack_head16): ~5 ms of a qwen2a layer's 30 on one thread value by value."""
    n = qkv.shape[1] // 3
    _pack16(qkv.ctypes.data, qkv.strides[0], qkv.shape[0], h * d * 4, (n + h * d) * 4, (2 * n + h * d) * 4,
            d // 16, np.int64(f32_bits(scale)), qp.ctypes.data, qp.strides[0], qp.strides[1],
            kp.ctypes.data, kp.strides[0], kp.strides[1], vp.ctypes.data, vp.strides[0], vp.strides[1])


_att = {}


_heads = threading.local()


def _head_buffers(n_tok, n_head, t_pad, d_pad):
    """Each head's packed q, k, v, kept by the calling thread for its next call of the shape
    (a tower's next layer, its next window): fresh zeroed arrays were ~10 MB of page faults a
    qwen2a layer, 5 ms of its 30. Reuse is safe because pack_head writes the same positions
    each time, the padding past T and d never."""
    key = (n_tok, n_head, t_pad, d_pad)
    entry = getattr(_heads, "entry", None)
    if entry is None or entry[0] != key:
        entry = _heads.entry = key, [(amx.zeros_aligned((2, t_pad, d_pad), np.uint16),
                                      amx.zeros_aligned((2, pad32(n_tok) // 16, d_pad // 32, 16, 16, 2), np.uint16),
                                      amx.zeros_aligned((2, d_pad // 16, pad32(n_tok) // 32, 16, 16, 2), np.uint16))
                                     for _ in range(n_head)]
    return entry[1]


def attention(qkv, n_head, pool, pv_passes=PV_PASSES, q_tile=None, key_block=None):
    """encoder_attention's result on the bf16 tiles, from the projections qkv (T, 3 n), rows
    q | k | v unscaled: q scaled by 1/sqrt(d) and split in two bf16 parts (2^-17), k and v
    rounded to f16 (exactly two parts each), the exps of the scores split likewise: each
    product to 2^-17, float32 sums. -> o (T, n)."""
    pv_passes = tuple(pv_passes)
    if pv_passes not in _att:
        _att[pv_passes] = _attention_kernels(pv_passes)
    pack_head, tile = _att[pv_passes]
    n_tok, n3 = qkv.shape
    n = n3 // 3
    d = n // n_head
    scale = np.float32(1.0 / np.sqrt(d))
    q_tile, key_block = q_tile or Q_TILE, key_block or KEY_BLOCK
    t_pad, d_pad = pad32(n_tok) + q_tile, pad32(d)        # queries past T read zero rows
    heads = _head_buffers(n_tok, n_head, t_pad, d_pad)
    qkv = np.ascontiguousarray(qkv)
    pack = pack_head16 if d % 16 == 0 else pack_head
    list(pool.map(lambda h: pack(qkv, h, d, scale, *heads[h]), range(n_head)))
    out = np.empty((n_tok, n), np.float32)

    def job(hj):
        h, t0 = hj
        bufs = _buffers(("attention", d_pad, q_tile, key_block), lambda: (
            amx.zeros_aligned((q_tile, key_block), np.float32), amx.zeros_aligned((2, q_tile, key_block), np.uint16),
            amx.zeros_aligned((q_tile, d_pad), np.float32), np.zeros(q_tile, np.float32), np.zeros(q_tile, np.float32)))
        tile(*heads[h], t0, n_tok, out[t0:min(n_tok, t0 + q_tile), h * d:(h + 1) * d], *bufs, _ZERO)

    list(pool.map(job, [(h, t0) for h in range(n_head) for t0 in range(0, n_tok, q_tile)]))
    return out

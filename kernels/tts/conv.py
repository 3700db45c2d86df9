"""1-D convolutions on register tiles: out (C_out, T) = bias + residual + sum over taps k of
taps[k] (C_out, C_in) @ act(x) shifted by k * dilation, for the VITS flow and HiFi-GAN.

Each tile is fa_tiles.outer_tile: CONV_ROWS output channels x CONV_COLS frames of
accumulators held in registers over the C_in loop of one tap (4 x 3 ymm on AVX2, 4 x 3 zmm
with AVX-512), loaded from and stored to `out`, which starts as bias (+ residual). The input is
copied once into zero-padded windows with the activation applied (leaky ReLU, slope 1 for
none), so a resblock's `x + conv(leaky_relu(x))` is one pass over x and one over the taps.
Each window is the C_in x (CONV_COLS + reach) block one column of tiles reads, contiguous:
rows of the whole padded input were a page apart, one TLB entry per channel a tap, and
ran 9-22 % slower (the windows repeat `reach` columns each, a pass over x's size).
The BLAS path (ops.conv1d: one sgemm per tap over a shifted view) reads and writes the whole
output once per tap; here the output tile stays in L1 across taps. `conv_kernel` is the one
template the variants come from; `conv1d_ref` beside it is the plain reference.
"""
import numpy as np
from numba import njit

from ..cpu import probe
from ..fa_tiles import outer_tile
from ..quants import JIT

CONV_LANES = 16 if "avx512f" in probe().features else 8
CONV_ROWS = 4      # 4 x CONV_WIDTH accumulators, CONV_WIDTH input vectors and a broadcast: 16 registers
CONV_WIDTH = 3
CONV_COLS = CONV_WIDTH * CONV_LANES
# input channels a pass of the tiles sums before the next: 128 x (48 + reach) floats of the
# window, ~25-50 KB, stay in L1 (one thread, C_in 256: 109-116 -> 123-141 GF/s; 32 and 64 slower)
CIN_BLOCK = 128


@njit(**JIT)
def _pad_activate(x, pad_left, slope, cols, xb):
    """xb[b, :, i] = leaky_relu(x, slope) at padded column b * cols + i (x's column that
    minus pad_left, zero outside x): xb (n_blocks, C_in, cols + reach), each block the whole
    window a column of tiles reads, contiguous."""
    c_in, n = x.shape
    n_blocks, _, width = xb.shape
    for b in range(n_blocks):
        for c in range(c_in):
            row = xb[b, c]
            for i in range(width):
                j = b * cols + i - pad_left
                if 0 <= j < n:
                    v = x[c, j]
                    row[i] = max(v, v * slope)
                else:
                    row[i] = 0.0


@njit(**JIT)
def _init(bias, residual, n_valid, out):
    """out[c, t] = bias[c] + residual[c, t] (residual (0, 0) for none; zero past n_valid)."""
    c_out, n_cols = out.shape
    has_residual = residual.shape[0] == c_out
    for c in range(c_out):
        b = bias[c]
        for t in range(n_cols):
            out[c, t] = b + residual[c, t] if has_residual and t < n_valid else b


_kernels = {}


def conv_kernel(rows, width, lanes):
    """The tiled conv driver for one tile shape: run(xb, taps, dilation, out, co_lo, co_hi)
    adds sum_k taps[k] @ x[:, k*dilation : k*dilation + n_cols] into rows co_lo..co_hi of
    out (C_out, n_cols), with those bounds and C_out multiples of rows, n_cols of
    width * lanes, the padded input x given as its windows xb (n_cols / (width * lanes),
    C_in, width * lanes + dilation * (K - 1)), one a block of output columns."""
    key = (rows, width, lanes)
    if key in _kernels:
        return _kernels[key]
    tile = outer_tile(rows, width, lanes)
    cols = width * lanes

    @njit(**JIT)
    def run(xb, taps, dilation, out, co_lo, co_hi):
        n_taps, c_out, c_in = taps.shape
        n_cols = out.shape[1]
        n_blocks, _, width = xb.shape
        x_rs, c_rs = width * 4, n_cols * 4
        xa, wa, oa = xb.ctypes.data, taps.ctypes.data, out.ctypes.data
        for blk in range(n_blocks):
            x_blk = xa + blk * c_in * x_rs
            for c0 in range(0, c_in, CIN_BLOCK):   # this part of the window stays in L1 over all C_out
                n_c = min(CIN_BLOCK, c_in - c0)
                for co in range(co_lo, co_hi, rows):
                    c = oa + (co * n_cols + blk * cols) * 4
                    for k in range(n_taps):
                        tile(wa + ((k * c_out + co) * c_in + c0) * 4, c_in * 4, 4,
                             x_blk + c0 * x_rs + k * dilation * 4, x_rs, c, c_rs, n_c)

    _kernels[key] = run
    return run


_run = conv_kernel(CONV_ROWS, CONV_WIDTH, CONV_LANES)
_EMPTY = np.zeros((0, 0), np.float32)


def tiled(taps, groups=1):
    """Whether conv1d_tiled takes this conv (dense, C_out a multiple of the tile's rows)."""
    return groups == 1 and taps.shape[1] % CONV_ROWS == 0


def conv1d_tiled(x, taps, bias, pads, dilation=1, slope=1.0, residual=None, pool=None, n_parts=1):
    """residual + conv1d(leaky_relu(x, slope)): x (C_in, T), taps (K, C_out, C_in) contiguous,
    bias (C_out,) or None, residual (C_out, n_out) or None -> (C_out, n_out) with
    n_out = T + pads - dilation * (K - 1). The result is a view of a buffer CONV_COLS wide.
    pool: an executor to split the output channels over in n_parts (the kernel frees the GIL)."""
    n_taps, c_out, c_in = taps.shape
    reach = dilation * (n_taps - 1)
    n_out = x.shape[1] + pads[0] + pads[1] - reach
    n_blocks = -(-n_out // CONV_COLS)
    n_cols = n_blocks * CONV_COLS
    xb = np.empty((n_blocks, c_in, CONV_COLS + reach), np.float32)
    _pad_activate(x, pads[0], np.float32(slope), CONV_COLS, xb)
    out = np.empty((c_out, n_cols), np.float32)
    _init(np.zeros(c_out, np.float32) if bias is None else bias,
          _EMPTY if residual is None else residual, n_out, out)
    n_parts = min(n_parts, c_out // CONV_ROWS) if pool is not None else 1
    if n_parts > 1:
        bounds = [CONV_ROWS * (c_out // CONV_ROWS * i // n_parts) for i in range(n_parts + 1)]
        list(pool.map(lambda i: _run(xb, taps, dilation, out, bounds[i], bounds[i + 1]), range(n_parts)))
    else:
        _run(xb, taps, dilation, out, 0, c_out)
    return out[:, :n_out]


def conv1d_ref(x, taps, bias, pads, dilation=1, slope=1.0, residual=None):
    """The plain reference of conv1d_tiled, in float64."""
    x = np.maximum(x, x * slope).astype(np.float64)
    x = np.pad(x, ((0, 0), (pads[0], pads[1])))
    n_taps = taps.shape[0]
    n_out = x.shape[1] - dilation * (n_taps - 1)
    out = sum(taps[k].astype(np.float64) @ x[:, k * dilation:k * dilation + n_out] for k in range(n_taps))
    if bias is not None:
        out = out + bias[:, None]
    return out if residual is None else out + residual

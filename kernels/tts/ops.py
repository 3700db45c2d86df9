"""The VITS network's ops over (channels, frames) float32 arrays.

Convolutions go through BLAS: a K-tap conv is K matrix products of the weight's tap with a
shifted view of the padded input, accumulated, so no (C_in * K, T) im2col copy is made; a
transposed conv is one product whose K taps are then overlapped row by row (overlap_add). The spline is VITS' inverse
rational-quadratic transform with linear tails (`transforms.py` there), row by row.
"""
import math

import numpy as np
from numba import njit, prange, vectorize

from ..quants import JIT

MIN_BIN_WIDTH = 1e-3       # VITS transforms.py defaults
MIN_BIN_HEIGHT = 1e-3
MIN_DERIVATIVE = 1e-3
TAIL_BOUND = 5.0           # ConvFlow's tail_bound
SEARCH_EPS = 1e-6          # searchsorted's nudge of the last bin edge


def conv_taps(weight):
    """A conv weight (C_out, C_in / groups, K) as contiguous taps (K, C_out, C_in / groups):
    BLAS takes a tap only when its rows are contiguous (numpy's own loop is ~20x slower)."""
    return np.ascontiguousarray(weight.transpose(2, 0, 1), dtype=np.float32)


def conv1d(x, taps, bias, pads, dilation=1, groups=1):
    """x (C_in, T), taps (K, C_out, C_in / groups) -> (C_out, T + pads - dilation * (K - 1))."""
    k, c_out, c_group = taps.shape
    x = np.pad(x, ((0, 0), (pads[0], pads[1]))) if pads[0] or pads[1] else np.ascontiguousarray(x)
    n_out = x.shape[1] - dilation * (k - 1)
    if groups == 1:
        out = taps[0] @ x[:, :n_out]
        for tap in range(1, k):
            out += taps[tap] @ x[:, tap * dilation:tap * dilation + n_out]
    elif groups == c_out and c_group == 1:                    # depth-wise
        out = taps[0] * x[:, :n_out]
        for tap in range(1, k):
            out += taps[tap] * x[:, tap * dilation:tap * dilation + n_out]
    else:
        raise ValueError(f"grouped conv with {groups} groups of {c_group} is not supported")
    if bias is not None:
        out += bias[:, None]
    return out


@njit(**JIT, parallel=True)
def overlap_add(taps, stride, pad_left, bias, out):
    """A transposed conv's products taps (C, K, T) laid into out (C, N): position
    i * stride + tap - pad_left gets taps[c, tap, i], summed from zero in tap order, then
    + bias[c] (unless bias is empty): the bits of K strided numpy adds into zeros and a bias
    add, each row done while it is in cache."""
    c_out, k, n_in = taps.shape
    n_out = out.shape[1]
    with_bias = bias.shape[0] == c_out
    for c in prange(c_out):
        row = out[c]
        for j in range(n_out):
            row[j] = 0.0
        for tap in range(k):
            i_lo = max(0, -((tap - pad_left) // stride))                 # first i landing at >= 0
            i_hi = min(n_in, (n_out - 1 + pad_left - tap) // stride + 1)
            for i in range(i_lo, i_hi):
                row[i * stride + tap - pad_left] += taps[c, tap, i]
        if with_bias:
            b = bias[c]
            for j in range(n_out):
                row[j] += b


_NO_BIAS = np.zeros(0, np.float32)


def conv_transpose1d(x, weight, bias, stride, pad, pad_right=None):
    """x (C_in, T), weight (C_in, C_out, K) -> (C_out, (T - 1) * stride + K - pad - pad_right),
    pad_right = pad unless given."""
    c_in, c_out, k = weight.shape
    n_in = x.shape[1]
    taps = (weight.reshape(c_in, c_out * k).T @ x).reshape(c_out, k, n_in)
    n_out = (n_in - 1) * stride + k - pad - (pad if pad_right is None else pad_right)
    out = np.empty((c_out, n_out), np.float32)
    overlap_add(np.ascontiguousarray(taps, np.float32), stride, pad,
                _NO_BIAS if bias is None else np.asarray(bias, np.float32), out)
    return out


def layer_norm(x, gamma, beta, eps=1e-5):
    """Normalise each frame over its channels: x (C, T)."""
    mean = x.mean(axis=0, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=0, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma[:, None] + beta[:, None]


@vectorize(["float32(float32)", "float64(float64)"], cache=True)
def gelu(x):
    """The exact (erf) GELU, as torch's F.gelu."""
    return 0.5 * x * (1.0 + math.erf(x * 0.7071067811865476))


def leaky_relu(x, slope):
    """max(x, slope * x): the leaky ReLU for 0 < slope < 1, in two passes instead of where's four."""
    return np.maximum(x, x * np.float32(slope))


@njit(**JIT)
def _spline_row(x, uw, uh, ud):
    if x < -TAIL_BOUND or x > TAIL_BOUND:                    # linear tails: identity
        return x
    n_bins = uw.shape[0]
    widths = np.exp(uw - uw.max())
    widths = MIN_BIN_WIDTH + (1 - MIN_BIN_WIDTH * n_bins) * widths / widths.sum()
    heights = np.exp(uh - uh.max())
    heights = MIN_BIN_HEIGHT + (1 - MIN_BIN_HEIGHT * n_bins) * heights / heights.sum()
    cumw = np.empty(n_bins + 1, np.float32)
    cumh = np.empty(n_bins + 1, np.float32)
    cumw[0] = cumh[0] = 0.0
    for b in range(n_bins):
        cumw[b + 1] = cumw[b] + widths[b]
        cumh[b + 1] = cumh[b] + heights[b]
    for b in range(n_bins + 1):
        cumw[b] = 2 * TAIL_BOUND * cumw[b] - TAIL_BOUND
        cumh[b] = 2 * TAIL_BOUND * cumh[b] - TAIL_BOUND
    cumw[0] = cumh[0] = -TAIL_BOUND
    cumw[n_bins] = cumh[n_bins] = TAIL_BOUND
    # derivatives at the n_bins + 1 knots: the ends padded with the constant that softplus
    # maps to 1 - min_derivative, so the tails join with slope 1
    end = math.log(math.exp(1 - MIN_DERIVATIVE) - 1)
    derivs = np.empty(n_bins + 1, np.float32)
    for b in range(n_bins + 1):
        u = end if b == 0 or b == n_bins else ud[b - 1]
        derivs[b] = MIN_DERIVATIVE + (math.log1p(math.exp(-abs(u))) + max(u, 0.0))
    edge = cumh.copy()
    edge[n_bins] += SEARCH_EPS
    idx = -1
    for b in range(n_bins + 1):
        if x >= edge[b]:
            idx += 1
    idx = min(max(idx, 0), n_bins - 1)
    in_cumw, in_w = cumw[idx], cumw[idx + 1] - cumw[idx]
    in_cumh, in_h = cumh[idx], cumh[idx + 1] - cumh[idx]
    delta = in_h / in_w
    d0, d1 = derivs[idx], derivs[idx + 1]
    dy = x - in_cumh
    a = dy * (d0 + d1 - 2 * delta) + in_h * (delta - d0)
    b = in_h * d0 - dy * (d0 + d1 - 2 * delta)
    c = -delta * dy
    disc = b * b - 4 * a * c
    root = (2 * c) / (-b - math.sqrt(max(disc, 0.0)))
    return root * in_w + in_cumw


@njit(**JIT)
def _spline_rows(x, uw, uh, ud, out):
    for t in range(x.shape[0]):
        out[t] = _spline_row(x[t], uw[t], uh[t], ud[t])


def rq_spline_inverse(x, uw, uh, ud):
    """Inverse monotonic rational-quadratic spline on [-5, 5], identity outside.
    x (T,), unnormalised widths / heights (T, n_bins), inner derivatives (T, n_bins - 1)."""
    out = np.empty(x.shape[0], np.float32)
    _spline_rows(np.ascontiguousarray(x, np.float32), np.ascontiguousarray(uw, np.float32),
                 np.ascontiguousarray(uh, np.float32), np.ascontiguousarray(ud, np.float32), out)
    return out

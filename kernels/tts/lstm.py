"""The recurrence of ONNX Runtime's DynamicQuantizeLSTM in compiled code: at every step the
hidden state is quantised to uint8 as DynamicQuantizeLinear does (quant.py), multiplied by the int8
recurrent weights exactly (intdot's tile, the activations broadcast over the output lanes),
scaled and added to the input's part of the gates; the two directions run on two threads.
A Python loop over the steps cost ~50 us a step in numpy calls for ~2 us of arithmetic.
"""
import numpy as np
from numba import njit, prange

from ..quants import JIT
from .intdot import LANES, VNNI, as_signed, matmul_int_ref, quad_tile
from .quant import params_of, quantize_one, range_of

F32 = np.float32
_GEMV_WIDTH = 4                 # 4 accumulators of the output lanes, 4 weight vectors
_gemv = quad_tile(1, _GEMV_WIDTH, LANES, VNNI, True)


def recurrent_weights(r, zero_point):
    """R (D, H, 4H) int8/uint8 and its zero point (per direction: scalar or (4H,)) ->
    (packed (D, H/4 rounded up, n_out, 4) int8, zero (D, n_out) int32, sums (D, n_out) int32),
    n_out = 4H rounded up to a whole tile: packed[d, k // 4, n, k % 4] = R[d, k, n]."""
    n_dir, n_in, n_gates = r.shape
    span = _GEMV_WIDTH * LANES
    n_out = -(-n_gates // span) * span
    n_quads = -(-n_in // 4)
    packed = np.zeros((n_dir, n_quads * 4, n_out), np.int8)
    zero = np.zeros((n_dir, n_out), np.int32)
    sums = np.zeros((n_dir, n_out), np.int32)
    zps = np.asarray(zero_point)
    for d in range(n_dir):
        ws, zp = as_signed(r[d], zps[d] if zps.ndim else zps, n_gates)
        packed[d, :n_in, :n_gates] = ws
        zero[d, :n_gates] = zp
        sums[d, :n_gates] = ws.sum(0, dtype=np.int64).astype(np.int32)
    packed = np.ascontiguousarray(packed.reshape(n_dir, n_quads, 4, n_out).transpose(0, 1, 3, 2))
    return packed, zero, sums


@njit(**JIT)
def _sigmoid(x):
    return F32(1.0) / (F32(1.0) + np.exp(-x))


@njit(**JIT)
def _direction(gates_x, packed, zero, sums, r_scale, bias, h, c, reverse, y, hq, acc, g):
    """One direction over the sequence: gates_x (seq, 4H) the input's scaled gates, h, c (H,)
    the state (updated), y (seq, H) the outputs; hq (quads * 4,) uint8, acc (n_out,) int32,
    g (4H,) float32 scratch."""
    seq, n_gates = gates_x.shape
    hidden = h.shape[0]
    n_quads, n_out = packed.shape[0], packed.shape[1]
    span = _GEMV_WIDTH * LANES
    pa, qa, aa = packed.ctypes.data, hq.ctypes.data, acc.ctypes.data
    p_rs = packed.strides[0]
    for step in range(seq):
        t = seq - 1 - step if reverse else step
        lo, hi = range_of(h, 0, hidden)
        h_scale, h_zp = params_of(lo, hi)
        h_sum = np.int64(0)
        for k in range(hidden):
            q = quantize_one(h[k], h_scale, h_zp)
            hq[k] = q
            h_sum += np.int64(q)
        zp = np.int64(h_zp)
        for n in range(n_out):      # the zero-point terms (see intdot), then the tiles add sum h r
            acc[n] = np.int32(zp * (np.int64(hidden) * zero[n] - sums[n]) - zero[n] * h_sum)
        for n0 in range(0, n_out, span):
            _gemv(qa, 0, pa + n0 * 4, p_rs, aa + n0 * 4, 0, 1, n_quads, 1, 0, 0)
        scale = h_scale * r_scale
        for n in range(n_gates):
            g[n] = gates_x[t, n] + F32(acc[n]) * scale + bias[n]
        for k in range(hidden):         # ONNX's gate order: i o f c
            c[k] = _sigmoid(g[2 * hidden + k]) * c[k] + _sigmoid(g[k]) * np.tanh(g[3 * hidden + k])
            h[k] = _sigmoid(g[hidden + k]) * np.tanh(c[k])
            y[t, k] = h[k]


@njit(**JIT, parallel=True)
def lstm(gates_x, packed, zero, sums, r_scale, bias, h, c, y):
    """Every direction d of a quantised LSTM (d = 1 runs backwards): gates_x (D, seq, 4H)
    float32, packed/zero/sums from recurrent_weights, r_scale (D,) float32, bias (D, 4H)
    float32 (both of ONNX's biases summed), h, c (D, H) the initial state, left final;
    y (D, seq, H) float32 out."""
    for d in prange(gates_x.shape[0]):
        hq = np.zeros(packed.shape[1] * 4, np.uint8)
        acc = np.empty(packed.shape[2], np.int32)
        g = np.empty(gates_x.shape[2], F32)
        _direction(gates_x[d], packed[d], zero[d], sums[d], r_scale[d], bias[d], h[d], c[d],
                   d == 1, y[d], hq, acc, g)


def lstm_ref(gates_x, r, r_zero_point, r_scale, bias, h, c, reverse=False):
    """The plain reference of one direction, numpy over the steps: gates_x (seq, 4H), R (H, 4H)
    int8 with its zero point, h, c (H,) -> y (seq, H) float32."""
    hidden = h.shape[0]
    h, c = h.astype(F32), c.astype(F32)
    y = np.empty((gates_x.shape[0], hidden), F32)
    sig = lambda v: F32(1.0) / (F32(1.0) + np.exp(-v))     # noqa: E731
    for t in (range(gates_x.shape[0] - 1, -1, -1) if reverse else range(gates_x.shape[0])):
        lo, hi = min(F32(h.min()), F32(0.0)), max(F32(h.max()), F32(0.0))
        scale = F32(1.0) if hi == lo else F32((hi - lo) / F32(255.0))
        zp = np.rint(np.clip(F32(0.0) - lo / scale, F32(0.0), F32(255.0)))
        hq = np.clip(np.rint(h / scale) + zp, 0, 255).astype(np.uint8)[None]
        g = gates_x[t] + matmul_int_ref(hq, int(zp), r, r_zero_point)[0].astype(F32) * (scale * r_scale) + bias
        i, o, f, cc = (g[k * hidden:(k + 1) * hidden] for k in range(4))
        c = sig(f) * c + sig(i) * np.tanh(cc)
        y[t] = h = (sig(o) * np.tanh(c)).astype(F32)
    return y

"""StyleTTS2's element-wise chains over (channels, frames) float32 tensors, each one compiled
pass (a thread per slab of channels, the chain in registers, no temporaries):

- snake:    y = x + inv_alpha * sin(alpha * x) ** 2          (the HiFi-GAN generator's Snake)
- adain:    y = gamma1 * ((x - mean) / sqrt(var + eps)) + beta  (AdaIN: instance norm over
            frames, the style's scale (1 + gamma) and shift), optionally followed by snake.

Every float32 rounding the ONNX graph makes between its nodes is made here too, in the same
order, so results differ from the node-by-node run only where the graph's own ops are not
correctly rounded: sin (here from a float64 polynomial, so correctly rounded but for ties
within 1e-9 of a float32 midpoint; numpy's and ORT's float32 sin are within an ulp or two)
and the means (float64 sums here, float32 pairwise or vector sums there).
`*_ref` beside each is the plain numpy chain, node by node.
"""
import numpy as np
from numba import njit, prange

from ..quants import JIT

F32 = np.float32

# fdlibm's __kernel_sin / __kernel_cos on [-pi/4, pi/4] (double precision) and its split pi/2
_S1, _S2, _S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
_S4, _S5, _S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
_C1, _C2, _C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
_C4, _C5, _C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11
_INV_PIO2 = 6.36619772367581382433e-01
_PIO2_1 = 1.57079632673412561417e+00          # first 33 bits of pi/2: j * _PIO2_1 is exact
_PIO2_1T = 6.07710050650619224932e-11         # pi/2 - _PIO2_1


@njit(**JIT, inline="always")
def sin_f32(v):
    """sin of a float32 through float64, branch-free so a loop of it vectorises. Its argument
    reduction is exact to ~1e-16 relative for |v| < 2**20 (audio's alpha * x is far below);
    NaN and inf give NaN (and -0 gives +0: Snake squares it)."""
    x = np.float64(v)
    j = np.rint(x * _INV_PIO2)
    r = (x - j * _PIO2_1) - j * _PIO2_1T
    r2 = r * r
    s = r + r * r2 * (_S1 + r2 * (_S2 + r2 * (_S3 + r2 * (_S4 + r2 * (_S5 + r2 * _S6)))))
    c = 1.0 - 0.5 * r2 + r2 * r2 * (_C1 + r2 * (_C2 + r2 * (_C3 + r2 * (_C4 + r2 * (_C5 + r2 * _C6)))))
    quadrant = j - 4.0 * np.floor(j * 0.25)              # 0..3 as a float: no int of inf or NaN
    y = c if quadrant == 1.0 or quadrant == 3.0 else s
    return F32(-y if quadrant >= 2.0 else y)


@njit(**JIT, inline="always")
def _snake_row(x, alpha, inv_alpha, out):
    for t in range(x.shape[0]):
        v = x[t]
        s = sin_f32(alpha * v)
        out[t] = v + inv_alpha * (s * s)


@njit(**JIT, parallel=True)
def snake(x, alpha, inv_alpha, out):
    """out = x + inv_alpha * sin(alpha * x)**2; x, out (C, T), alpha and inv_alpha (C,)."""
    for c in prange(x.shape[0]):
        _snake_row(x[c], alpha[c], inv_alpha[c], out[c])


# the sums in any order (float64 lanes, so vectorised): reassociation only, no contraction
_SUMS = dict(JIT, fastmath={"reassoc"})


@njit(**_SUMS)
def _row_mean(x):
    total = 0.0
    for t in range(x.shape[0]):
        total += np.float64(x[t])
    return F32(total / x.shape[0])


@njit(**_SUMS)
def _row_variance(x, mean):
    """mean of (x - mean)**2, each square rounded to float32 as the graph's Mul makes it."""
    total = 0.0
    for t in range(x.shape[0]):
        d = x[t] - mean
        total += np.float64(d * d)
    return F32(total / x.shape[0])


@njit(**JIT, parallel=True)
def adain(x, gamma1, beta, eps, alpha, inv_alpha, out):
    """out = gamma1 * ((x - mean) / sqrt(var + eps)) + beta by row of x (C, T), the mean and
    (biased) variance over T; then snake with alpha, inv_alpha (C,) unless alpha is empty."""
    with_snake = alpha.shape[0] == x.shape[0]
    for c in prange(x.shape[0]):
        row, dst = x[c], out[c]
        mean = _row_mean(row)
        std = np.sqrt(_row_variance(row, mean) + eps)
        g, b = gamma1[c], beta[c]
        if with_snake:
            a, inv_a = alpha[c], inv_alpha[c]
            for t in range(row.shape[0]):
                y = g * ((row[t] - mean) / std) + b
                s = sin_f32(a * y)
                dst[t] = y + inv_a * (s * s)
        else:
            for t in range(row.shape[0]):
                dst[t] = g * ((row[t] - mean) / std) + b


def snake_ref(x, alpha, inv_alpha):
    """The graph's nodes: Mul(alpha, x) > Sin > Pow 2 > Mul(inv_alpha) > Add(x)."""
    return x + inv_alpha[:, None] * np.sin(alpha[:, None] * x) ** 2


def adain_ref(x, gamma1, beta, eps):
    """The graph's nodes: ReduceMean > Sub > Mul > ReduceMean > Add eps > Sqrt > Div > Mul > Add."""
    d = x - x.mean(axis=1, keepdims=True)
    return gamma1[:, None] * (d / np.sqrt((d * d).mean(axis=1, keepdims=True) + eps)) + beta[:, None]

"""Element-wise numpy ufuncs over the big tensors of a graph, split across threads.

Kokoro's decoder runs ~400 element-wise nodes (AdaIN, Snake, the quantised convs' scales)
on (channels, ~30000 frames) tensors, each one numpy pass on one core. numpy frees the GIL
inside a ufunc's loop, so slabs of the output along its longest axis run side by side on a
small pool, every element computed by the same loop as before: the same bits.
"""
import math
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

SPLIT_ELEMENTS = 1 << 18         # below this a ufunc call is shorter than handing out the slabs

_pools = {}


def _pool(n):
    if n not in _pools:
        _pools[n] = ThreadPoolExecutor(n, thread_name_prefix="dasllama-ew")
    return _pools[n]


def _slab(x, shape, axis, lo, hi):
    """x's part that output rows lo:hi along `axis` read (x broadcast to `shape`)."""
    x = np.asarray(x)
    ax = axis - (len(shape) - x.ndim)
    if ax < 0 or x.shape[ax] == 1:
        return x
    index = [slice(None)] * x.ndim
    index[ax] = slice(lo, hi)
    return x[tuple(index)]


def apply(ufunc, *args):
    """ufunc(*args), on numba's thread count of slabs when the output is big."""
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    n_threads = numba.get_num_threads()
    if n_threads < 2 or math.prod(shape) < SPLIT_ELEMENTS:
        return ufunc(*args)
    dtype = ufunc(*(np.asarray(a).reshape(-1)[:1] for a in args)).dtype
    out = np.empty(shape, dtype)
    axis = int(np.argmax(shape))
    bounds = [shape[axis] * i // n_threads for i in range(n_threads + 1)]
    errors = np.geterr()            # numpy's error handling is per thread: the caller's applies

    def part(i):
        lo, hi = bounds[i], bounds[i + 1]
        with np.errstate(**errors):
            ufunc(*(_slab(a, shape, axis, lo, hi) for a in args), out=_slab(out, shape, axis, lo, hi))

    list(_pool(n_threads).map(part, range(n_threads)))
    return out

"""Arrays that touch a page the process may not read: a kernel that loads or stores one byte
past either end of its buffer faults at once, where a heap buffer would let it read its
neighbour's bytes and pass (tests/kernels/test_bounds.py)."""
import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
PROT_NONE = 0
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def fenced(a, side):
    """A copy of `a` (C-contiguous) whose first byte (side="start") or last byte ("end")
    borders an unreadable page."""
    a = np.ascontiguousarray(a)
    span = -(-max(a.nbytes, 1) // PAGE) * PAGE
    region = mmap.mmap(-1, span + 2 * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    for guard in (base, base + PAGE + span):
        if _libc.mprotect(guard, PAGE, PROT_NONE) != 0:
            raise OSError(ctypes.get_errno(), "mprotect failed")
    offset = PAGE + (0 if side == "start" else span - a.nbytes)
    out = np.frombuffer(region, np.uint8, a.nbytes, offset).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out

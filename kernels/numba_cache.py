"""numba's on-disk cache, made safe for processes that share it.

numba saves a compiled function by reading the function's index, taking the first data file
name the index does not list, writing the index and then the data. Two processes that save
entries of one function at once (every matmul variant is a closure of one template function,
so all of them share one index) can take the same name: the index then sends one variant to
the machine code of another, say a Q6_K kernel for Q5_0 weights, which reads ten times past
them (the segfault of issue 27) or returns wrong numbers. A process killed between the two
writes leaves the same kind of lie behind, pointing at a stale file of an older build.

`install()` replaces that save: under an exclusive lock on the cache folder it reads the index
afresh, writes the data, and only then the index that names it. numba's readers need no lock:
both files are replaced atomically, and an index never names a file that holds another key.
"""
import contextlib
import itertools
import os

from numba.core import caching

NUMBA_SAVE = caching.IndexDataCacheFile.save   # numba's own, for the test that shows its race
_NEEDS = ("_load_index", "_save_index", "_save_data", "_data_name")


@contextlib.contextmanager
def folder_lock(folder):
    """An exclusive lock on `folder` between processes (a `.lock` file inside it)."""
    with open(os.path.join(folder, ".lock"), "a+b") as f:
        if os.name == "nt":
            import msvcrt
            f.seek(0)
            msvcrt.locking(f.fileno(), msvcrt.LK_LOCK, 1)
        else:
            import fcntl
            fcntl.flock(f, fcntl.LOCK_EX)
        yield   # closing the file releases the lock


def _locked_save(self, key, data):
    """IndexDataCacheFile.save: the data first, then the index, one process at a time."""
    with folder_lock(self._cache_path):
        overloads = self._load_index()
        name = overloads.get(key)
        if name is None:
            used = set(overloads.values())
            name = next(n for n in map(self._data_name, itertools.count(1)) if n not in used)
        self._save_data(name, data)
        overloads[key] = name
        self._save_index(overloads)


def installed():
    return caching.IndexDataCacheFile.save is _locked_save


def install():
    """Make numba's cache saves process-safe (idempotent). A numba whose cache lacks the parts
    this relies on raises ImportError rather than run with the race."""
    missing = [name for name in _NEEDS if not hasattr(caching.IndexDataCacheFile, name)]
    if missing:
        raise ImportError(f"dasllama needs numba's IndexDataCacheFile.{missing[0]}, which this numba "
                          f"lacks: install a numba dasllama supports (pip install 'numba<0.70')")
    caching.IndexDataCacheFile.save = _locked_save

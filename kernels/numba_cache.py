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

It also keys dasllama's entries by content, so a reinstall reuses them (issue 25): numba
names a file's cache folder after a hash of the file's absolute directory (a wheel installed
into another venv would recompile everything) and, before 0.68, stamps its index with the
file's mtime (a reinstall in place would too). Inside dasllama's tree the folder is the
file's path relative to the package (the folder above it is already named by a hash of the
compiled sources, kernels/__init__.py) and the stamp is a sha256 of the file's bytes.

And it names dasllama's compiled functions by content. numba names a function's machine code
after its qualified name and a counter of the functions this process has compiled
(`kernel$15`), and marks the callees it links into a caller as one-definition-rule symbols: a
process that loads two cached libraries defining the same name runs the first one loaded for
both. Two closures of one template (the Q4_0 and the Q8_0 kernels of simd.make_kernel),
compiled by two processes that had each compiled the same number of functions before, get the
same name; a third process that loads the Q4_0 kernel and then the Q8_0 dispatch multiplied
Q8_0 weights with the Q4_0 code (NaNs, reads past the buffers), on any host whose cache grew
over several runs. `_named_by_content` puts a hash of the function's code and closure into
the name, so equal names mean equal code.
"""
import contextlib
import functools
import hashlib
import itertools
import marshal
import os
from pathlib import Path

from numba.core import bytecode, caching, serialize

NUMBA_SAVE = caching.IndexDataCacheFile.save   # numba's own, for the test that shows its race
NUMBA_IDENTITY = bytecode.FunctionIdentity.from_function   # numba's naming, likewise
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


PACKAGE_ROOT = Path(__file__).resolve().parent.parent   # the dasllama package: kernels/, core/


def _in_package(py_file):
    """py_file's path relative to the dasllama package, or None outside it."""
    try:
        return Path(py_file).resolve().relative_to(PACKAGE_ROOT)
    except ValueError:
        return None


@functools.lru_cache(maxsize=None)
def _content_hash(path, st_mtime, st_size):   # mtime and size: a file edited in-process rehashes
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).digest()


def _content_stamp(self, numba_stamp):
    if _in_package(self._py_file) is None:
        return numba_stamp(self)
    st = os.stat(self._py_file)
    return _content_hash(self._py_file, st.st_mtime, st.st_size)


def _package_subpath(py_file, numba_subpath):
    relative = _in_package(py_file)
    if relative is None:
        return numba_subpath(py_file)
    return "_".join(("dasllama",) + relative.parent.parts)


def _key_by_content():
    mixin = caching._SourceFileBackedLocatorMixin
    if getattr(mixin.get_source_stamp, "dasllama", False):
        return
    numba_stamp = mixin.get_source_stamp

    def get_source_stamp(self):
        return _content_stamp(self, numba_stamp)
    get_source_stamp.dasllama = True
    mixin.get_source_stamp = get_source_stamp

    locator = getattr(caching, "UserProvidedCacheLocator", None) or caching._UserProvidedCacheLocator
    numba_subpath = locator.get_suitable_cache_subpath
    locator.get_suitable_cache_subpath = classmethod(
        lambda cls, py_file: _package_subpath(py_file, numba_subpath))


def _content_tag(func):
    """A hash of what decides a function's machine code besides its module's source: its code
    object (constants, names and nested code included) and its closure's values, pickled as
    numba pickles them for its cache key; None where they do not pickle (numba caches no such
    function either)."""
    try:
        cells = tuple(c.cell_contents for c in func.__closure__ or ())
        return hashlib.sha256(marshal.dumps(func.__code__) + serialize.dumps(cells)).hexdigest()[:16]
    except Exception:       # noqa: BLE001  (anything unpicklable: leave numba's name)
        return None


def _named_by_content():
    original = bytecode.FunctionIdentity.from_function
    if getattr(original, "dasllama", False):
        return

    def from_function(cls, pyfunc):
        self = original.__func__(cls, pyfunc)
        if _in_package(self.filename) is not None:
            tag = _content_tag(self.func)
            if tag is not None:
                self.func_qualname = f"{self.func_qualname}__{tag}"
                self.unique_name = f"{self.func_qualname}${self.unique_id}"
        return self
    from_function.dasllama = True
    bytecode.FunctionIdentity.from_function = classmethod(from_function)


def installed():
    return caching.IndexDataCacheFile.save is _locked_save and \
        getattr(bytecode.FunctionIdentity.from_function, "dasllama", False)


def install():
    """Make numba's cache saves process-safe and dasllama's entries keyed by content
    (idempotent). A numba whose cache lacks the parts this relies on raises ImportError rather
    than run with the race."""
    missing = [name for name in _NEEDS if not hasattr(caching.IndexDataCacheFile, name)]
    if missing:
        raise ImportError(f"dasllama needs numba's IndexDataCacheFile.{missing[0]}, which this numba "
                          f"lacks: install a numba dasllama supports (pip install 'numba<0.70')")
    caching.IndexDataCacheFile.save = _locked_save
    _key_by_content()
    _named_by_content()

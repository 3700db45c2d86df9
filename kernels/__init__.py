"""numba kernels: pure functions over caller-owned arrays, each with a plain reference beside it.

Importing this package points numba's on-disk cache at dasllama's own cache dir, so compiled
kernels survive between runs (cold compile is seconds per kernel) without littering
`__pycache__` in site-packages. numba invalidates a cached function only when its own source
file changes, not when a function it calls does; so the cache lives in a folder named after a
hash of every compiled source file (kernels/, and each file of core/ that compiles numba code:
the decode step in core/llm/forward.py links in core/llm/kvcache.py's cell placement, for
one), and an edited or upgraded kernel never runs stale code.
"""
import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import platformdirs

CACHE_DIR = os.environ.get("DASLLAMA_CACHE") or platformdirs.user_cache_dir("dasllama")


def _source_hash():
    h = hashlib.sha256()

    def add(f, data):
        h.update(f.name.encode())
        h.update(data)
    # the tuner's own files compile nothing the decode step links in (cpu.py does: the
    # features it reads fix constants compiled into the kernels, such as ops.EXP_LANES)
    for f in sorted(Path(__file__).parent.rglob("*.py")):
        if f.name not in ("tune.py", "race.py", "sidecar.py", "bench_matmul.py"):
            add(f, f.read_bytes())
    core = importlib.util.find_spec("dasllama.core")   # the spec only: core's import needs us
    if core is not None and core.submodule_search_locations:
        for f in sorted(f for root in core.submodule_search_locations for f in Path(root).rglob("*.py")):
            data = f.read_bytes()       # read once: filtered and hashed from the same bytes
            if b"njit" in data:
                add(f, data)
    return h.hexdigest()[:16]


from .sidecar import selection_tag  # noqa: E402  (plain Python: reads the choices, not numba)


def _numba_folder():
    """The numba cache folder of this build: a folder named by the sources' hash and the chosen
    variants (the compiled decode step links them in: one cache per choice), under dasllama's
    cache dir, or under NUMBA_CACHE_DIR where the user set one. A fixed NUMBA_CACHE_DIR taken
    as it is served a compiled forward with the kernels it had inlined before an edit (stale
    figures, NaN logits and segfaults in the fourth session of 2026-12-06). A child process
    (the first run's compile helper, tune's warm-up) inherits the folder in NUMBA_CACHE_DIR and
    DASLLAMA_NUMBA_FOLDER alike, and names its own beside it: the same one unless its sources
    or variants differ; a NUMBA_CACHE_DIR that differs from DASLLAMA_NUMBA_FOLDER is a user's
    (or a test's) and the base."""
    own = os.environ.get("DASLLAMA_NUMBA_FOLDER")
    user = os.environ.get("NUMBA_CACHE_DIR")
    if user and user != own:
        base = user
    elif own:
        base = os.path.dirname(own)
    else:
        base = os.path.join(CACHE_DIR, "numba")
    return os.path.join(base, _source_hash() + selection_tag())


os.environ["NUMBA_CACHE_DIR"] = os.environ["DASLLAMA_NUMBA_FOLDER"] = _numba_folder()

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is set)

numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

from . import numba_cache  # noqa: E402

numba_cache.install()  # processes running dasllama at once share that cache


def _arraymath_without_scipy_blas():
    """numba's first compile or cache load in a process imports numba.np.arraymath, which asks
    scipy for BLAS (for np.convolve's inner product only: np.dot asks again when it is typed)
    and so imports all of scipy.linalg where scipy is installed: 0.4-1.1 s of every warm start
    here (2026-12-06, a loaded 2-core host), for nothing our kernels call. Import it with that
    one module hidden, unless scipy.linalg is loaded already (then the check costs nothing)."""
    if "scipy.linalg" in sys.modules or "numba.np.arraymath" in sys.modules:
        return
    sys.modules["scipy.linalg.cython_blas"] = None       # `import` of it raises ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        del sys.modules["scipy.linalg.cython_blas"]


_arraymath_without_scipy_blas()

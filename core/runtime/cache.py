"""dasllama's cache dir (models assembled from packages, converted Whisper bins, the reference
build, numba's compiled kernels) and the notice a first run gives while it compiles."""
import sys
import time
from pathlib import Path

from dasllama import kernels


def cache_dir():
    """DASLLAMA_CACHE, else the platform's user cache dir (kernels/__init__.py decides it)."""
    return Path(kernels.CACHE_DIR)


def first_compile_notice(compiled, what="its kernels"):
    """At a model's load, when this process has not run `compiled` (a numba dispatcher) yet and
    the numba cache lacks it: say on stderr that it is compiling (a minute or two on 2 cores,
    once), rather than sit silent. Returns what to call when the first run is done (it times
    the compile and marks the cache), or None when there is nothing to say."""
    import numba
    if compiled.signatures:
        return None
    # the qualified name: an LLM step's carries its set of formats (llm/step.py), and a model of
    # another set compiles a step of its own
    marker = Path(numba.config.CACHE_DIR) / f"{getattr(compiled, '__qualname__', compiled.__name__)}.compiled"
    if marker.exists():
        return None
    print(f"dasllama: first run with this engine build: compiling {what} for this CPU "
          f"(once; cached in {numba.config.CACHE_DIR})", file=sys.stderr)
    start = time.perf_counter()

    def done():
        print(f"dasllama: compiled in {time.perf_counter() - start:.0f} s", file=sys.stderr)
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
    return done

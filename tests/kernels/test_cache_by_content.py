"""dasllama's numba cache is keyed by the compiled files' content, not their path and mtime
(issue 25): a reinstall (same bytes, new mtime, another venv) reuses the compiled kernels, an
edit recompiles them. Each step is a fresh process over one cache dir; the module stands in
for a file of the package (numba_cache.PACKAGE_ROOT points at its tree)."""
import json
import os
import shutil
import subprocess
import sys

MODULE = """
from numba import njit

@njit(cache=True)
def f(x):
    return x * 3 + 1
"""

# imports tree/pkg/mod.py as a file of dasllama's package, calls f, prints its cache stats
STEP = """
import json, sys
from pathlib import Path
from dasllama.kernels import numba_cache
numba_cache.PACKAGE_ROOT = Path(sys.argv[1]).resolve()
sys.path.insert(0, sys.argv[1])
from pkg.mod import f
assert f(2) == int(sys.argv[2])
print(json.dumps({"hits": sum(f.stats.cache_hits.values()), "misses": sum(f.stats.cache_misses.values())}))
"""


def _run(tree, cache, expected=7):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    out = subprocess.run([sys.executable, "-c", STEP, str(tree), str(expected)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.splitlines()[-1])


def _write_tree(tree, source):
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "__init__.py").write_text("")
    (tree / "pkg" / "mod.py").write_text(source)
    return tree / "pkg" / "mod.py"


def test_same_bytes_reuse_the_cache_and_an_edit_recompiles(tmp_path):
    cache = tmp_path / "cache"
    first = tmp_path / "venv1"
    mod = _write_tree(first, MODULE)
    assert _run(first, cache) == {"hits": 0, "misses": 1}
    assert _run(first, cache) == {"hits": 1, "misses": 0}

    st = mod.stat()
    os.utime(mod, (st.st_atime + 3600, st.st_mtime + 3600))    # a reinstall in place
    assert _run(first, cache) == {"hits": 1, "misses": 0}

    second = tmp_path / "venv2"                                # a reinstall elsewhere
    shutil.copytree(first, second)
    os.utime(second / "pkg" / "mod.py", None)
    assert _run(second, cache) == {"hits": 1, "misses": 0}

    mod.write_text(MODULE.replace("x * 3 + 1", "x * 3 + 2"))     # an upgrade that edits it
    assert _run(first, cache, expected=8) == {"hits": 0, "misses": 1}

"""The first-run notice: a model's load says on stderr when the engine is about to be compiled
(an empty numba cache), times it, and stays silent once the cache holds it."""
import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import numba
import pytest

from dasllama.core.runtime.cache import first_compile_notice


def test_compile_notice_speaks_once_per_cache(monkeypatch, tmp_path, capsys):
    compiled = SimpleNamespace(signatures=[], __name__="forward")
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    done = first_compile_notice(compiled)
    assert done is not None and "compiling" in capsys.readouterr().err
    done()
    err = capsys.readouterr().err
    assert "compiled in" in err and (tmp_path / "numba" / "forward.compiled").exists()
    assert first_compile_notice(compiled) is None
    assert capsys.readouterr().err == ""


def test_no_notice_once_this_process_runs_the_engine(monkeypatch, tmp_path, capsys):
    compiled = SimpleNamespace(signatures=["compiled"], __name__="forward")
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    assert first_compile_notice(compiled) is None
    assert capsys.readouterr().err == ""


def test_a_kernels_first_call_leaves_scipy_linalg_unloaded():
    """numba's BLAS check would import all of scipy.linalg at a process's first kernel (0.4-1 s
    of a warm start); kernels/__init__.py hides it, and np.dot in numba code still finds BLAS."""
    import importlib.util
    import subprocess
    import sys
    import pytest
    if importlib.util.find_spec("scipy") is None:
        pytest.skip("no scipy here: numba's check fails fast without it")
    code = ("import sys, numpy as np, numba\n"
            "from dasllama.kernels.matmul import matmul_f32\n"
            "matmul_f32(1, np.ones((32, 64), np.float16), 32, 64, np.ones((4, 64), np.float32))\n"
            "print('scipy.linalg' in sys.modules)\n"
            "print(numba.njit(lambda a: np.dot(a, a))(np.ones(8)))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["False", "8.0"], r.stdout

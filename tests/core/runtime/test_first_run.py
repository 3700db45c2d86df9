"""The first-run notice: a model's load says on stderr when the engine is about to be compiled
(an empty numba cache), times it, and stays silent once the cache holds it."""
from types import SimpleNamespace

import numba

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

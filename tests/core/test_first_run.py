"""The first-run notice: a model's load says on stderr when the engine is about to be compiled
(an empty numba cache), times it, and stays silent once the cache holds it."""
from types import SimpleNamespace

import numba

from dasllama.core import model as model_mod


def test_compile_notice_speaks_once_per_cache(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(model_mod.fw, "forward", SimpleNamespace(signatures=[]))
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    done = model_mod.first_compile_notice()
    assert done is not None and "compiling" in capsys.readouterr().err
    done()
    err = capsys.readouterr().err
    assert "compiled in" in err and (tmp_path / "numba" / "forward.compiled").exists()
    assert model_mod.first_compile_notice() is None
    assert capsys.readouterr().err == ""


def test_no_notice_once_this_process_runs_the_engine(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(model_mod.fw, "forward", SimpleNamespace(signatures=["compiled"]))
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path / "numba"))
    assert model_mod.first_compile_notice() is None
    assert capsys.readouterr().err == ""

"""The threading setup every model runs under: libgomp's spin before it sleeps."""
import numba

from dasllama.core.runtime import threads


def test_libgomp_spins_as_the_load_allows_unless_the_user_set_its_wait(monkeypatch):
    priority = list(numba.config.THREADING_LAYER_PRIORITY)
    monkeypatch.setattr(numba.config, "THREADING_LAYER_PRIORITY", priority)
    for var in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER",
                "NUMBA_THREADING_LAYER_PRIORITY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (7.0, 7.0, 7.0))     # a busy host
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.GOMP_SPINCOUNT
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.2, 0.3, 0.3))     # a quiet one
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.GOMP_SPINCOUNT_QUIET
    assert int(threads.GOMP_SPINCOUNT_QUIET) > int(threads.GOMP_SPINCOUNT)
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == "300000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    threads.prefer_threading_layers()
    assert "GOMP_SPINCOUNT" not in threads.os.environ

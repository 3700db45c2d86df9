"""The threading setup every model runs under: libgomp's spin before it sleeps."""
import os
import subprocess
import sys
import time

import numba
import pytest

from dasllama.core.runtime import threads


def test_libgomp_spins_as_the_host_allows_unless_the_user_set_its_wait(monkeypatch):
    priority = list(numba.config.THREADING_LAYER_PRIORITY)
    monkeypatch.setattr(numba.config, "THREADING_LAYER_PRIORITY", priority)
    for var in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "NUMBA_THREADING_LAYER",
                "NUMBA_THREADING_LAYER_PRIORITY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(threads, "free_cores", lambda **kw: 0.2)      # a busy host
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.GOMP_SPINCOUNT
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setattr(threads, "free_cores", lambda **kw: 1.9)      # a quiet one
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.GOMP_SPINCOUNT_QUIET
    assert int(threads.GOMP_SPINCOUNT_QUIET) > int(threads.GOMP_SPINCOUNT)
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setattr(threads, "free_cores", lambda **kw: None)     # no /proc/stat: the load average
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (7.0, 7.0, 7.0))
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == threads.GOMP_SPINCOUNT
    monkeypatch.setenv("GOMP_SPINCOUNT", "300000")
    threads.prefer_threading_layers()
    assert threads.os.environ["GOMP_SPINCOUNT"] == "300000"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "active")
    threads.prefer_threading_layers()
    assert "GOMP_SPINCOUNT" not in threads.os.environ


def test_a_process_started_beside_busy_cores_takes_the_short_spin(monkeypatch):
    """With a busy loop on every core since the process started, far less than half a core is
    left to it, however low the minute's load average (which lags) still reads."""
    if not os.path.exists("/proc/stat"):
        pytest.skip("free_cores reads Linux's /proc/stat")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
    try:
        time.sleep(0.3)
        monkeypatch.setattr(threads, "_START", (threads._cpu_ticks(), time.monotonic()))
        monkeypatch.setattr(threads.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
        assert threads.gomp_spincount() == threads.GOMP_SPINCOUNT
    finally:
        for p in busy:
            p.kill()
            p.wait()

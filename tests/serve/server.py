"""A real `dasllama serve` process on a free loopback port, for the server tests."""
import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request

START_TIMEOUT_S = 900      # a first run compiles the engine's kernels (minutes on 2 busy cores)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(*args, log=None):
    """Yield the base URL (http://127.0.0.1:PORT) of `dasllama serve ARGS` once /health
    answers; the process is stopped (SIGTERM, then SIGKILL) afterwards."""
    port = free_port()
    cmd = [sys.executable, "-m", "dasllama_cli.main", "serve", "--port", str(port), *map(str, args)]
    err = open(log, "wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"dasllama serve exited with {proc.returncode} before it answered "
                                   f"(stderr in {log})")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"dasllama serve did not answer /health in {START_TIMEOUT_S} s")
            time.sleep(0.5)
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log:
            err.close()

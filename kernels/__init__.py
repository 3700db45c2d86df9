"""numba kernels: pure functions over caller-owned arrays, each with a plain reference beside it.

Importing this package points numba's on-disk cache at dasllama's own cache dir, so compiled
kernels survive between runs (cold compile is seconds per kernel) without littering
`__pycache__` in site-packages.
"""
import os

import platformdirs

CACHE_DIR = os.environ.get("DASLLAMA_CACHE") or platformdirs.user_cache_dir("dasllama")
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(CACHE_DIR, "numba"))

import numba  # noqa: E402  (after NUMBA_CACHE_DIR is set)

numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

"""What every product of the engine shares: thread pools and numba's threading layer, the cache
dir, the first-run compile notice. The CPU probe is kernels/cpu.py (the kernels choose their
code by it before anything here runs)."""

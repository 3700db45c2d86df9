"""Thread counts and numba's threading layer, for every model the engine runs."""
import os
import sys

# numba picks its threading layer at the first parallel launch in a process. A decode step
# runs tens (Whisper) to hundreds (an LLM) of short parallel regions back to back: libgomp's
# workers spin through the serial gaps between them, tbb's fall asleep and are woken each
# time. tg128 on gemma3-270m Q4_K_M: omp ahead of tbb in 7 of 7 interleaved pairs, +4.5 % on
# average; a Whisper tiny.en step 2.5 -> 2.0 ms (2 cores). Spinning workers would take a core
# from a BLAS pool running beside them, so Whisper's encoder keeps numba's threads out of it.
DECODE_LAYERS = ("omp", "tbb", "workqueue")


def set_threads(n_threads):
    """Size numba's pool (and keep OpenBLAS to the same count, so the two never oversubscribe)."""
    import numba
    n = max(1, min(int(n_threads or os.cpu_count() or 1), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    return n


def prefer_threading_layers(order=DECODE_LAYERS):
    """Ask numba for the first available of `order` at its first parallel launch, unless the
    user chose (NUMBA_THREADING_LAYER[_PRIORITY]); no effect once threads run."""
    import numba
    if os.environ.get("NUMBA_THREADING_LAYER") or os.environ.get("NUMBA_THREADING_LAYER_PRIORITY"):
        return
    numba.config.THREADING_LAYER_PRIORITY = list(order)


_warned = []


def warn_slow_threading():
    """numba without tbb or libgomp falls back to its workqueue layer: ~54 us per parallel
    region instead of ~2 us, which a decode step with ~150 regions cannot afford."""
    import numba
    if _warned:
        return
    _warned.append(True)
    try:
        layer = numba.threading_layer()
    except ValueError:
        return
    if layer == "workqueue":
        print("dasllama: numba runs on its slow 'workqueue' threading layer; "
              "pip install tbb (or install libgomp) for full speed.", file=sys.stderr)


def ram_bytes():
    """Physical memory, for budgets (8 GiB where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30

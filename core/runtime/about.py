"""What a bug report needs to say about this install: dasllama's version and commit, numba's
and llvmlite's, the CPU and its class, and the threading layers numba can use."""
import importlib
import importlib.metadata
import platform
import subprocess
from pathlib import Path

from .threads import DECODE_LAYERS

DISTRIBUTION = "dasllama-toolkit"     # the PyPI name (`dasllama` there is another product)


def version():
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def commit():
    """The git commit of the checkout this code runs from (an editable install), with
    "+dirty" when it has local changes; "unknown" for an installed wheel."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "-C", str(here), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if sha.returncode:
            return "unknown"
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return sha.stdout.strip() + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def threading_layers():
    """numba's threading layers that load here, in the order the engine asks for them."""
    modules = {"omp": "numba.np.ufunc.omppool", "tbb": "numba.np.ufunc.tbbpool",
               "workqueue": "numba.np.ufunc.workqueue"}
    found = []
    for layer in DECODE_LAYERS:
        try:
            importlib.import_module(modules[layer])
            found.append(layer)
        except (ImportError, OSError):
            pass
    return found


def report():
    """The lines `dasllama --version` prints."""
    import llvmlite
    import numba
    import numpy

    from dasllama.kernels.cpu import probe
    cpu = probe()
    layers = threading_layers()
    return [
        f"dasllama {version()} (commit {commit()})",
        f"python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"numba {numba.__version__}, llvmlite {llvmlite.__version__}, numpy {numpy.__version__}",
        f"cpu {cpu.model} (class {cpu.cpu_class})",
        f"threading layer {layers[0] if layers else 'none'} (available: {', '.join(layers) or 'none'})",
    ]

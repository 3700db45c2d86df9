"""What a figure needs beside it to be believed and re-run elsewhere: the machine (CPU, cores,
SIMD features, memory, load), the software (versions and commits), and the exact inputs
(sha256). `dasllama bench` writes one with every run.
"""
import hashlib
import importlib.metadata
import json
import importlib.util
import os
import platform
import subprocess
import time
from pathlib import Path

# CPU features the kernels (ours and llama.cpp's) choose code paths by; /proc/cpuinfo spelling
# (pni is SSE3).
SIMD_FLAGS = ("pni", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "bmi2",
              "avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
              "avx512vbmi", "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16",
              "asimd", "asimddp", "asimdhp", "i8mm", "bf16", "sve", "sve2", "sme")

PACKAGE_ROOT = Path(__file__).resolve().parents[2]   # the checkout: core/tools/receipt.py


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def probe_hardware():
    """CPU model, logical and physical cores, SIMD features, memory, OS, and the load now."""
    info = _cpuinfo()
    flags = set(info.get("flags", info.get("Features", "")).split())
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "cpu_model": info.get("model name") or info.get("Model") or platform.processor() or platform.machine(),
        "machine": platform.machine(),
        "logical_cpus": os.cpu_count(),
        "physical_cores": physical_cores(),
        "cpu_features": [f for f in SIMD_FLAGS if f in flags],
        "memory_bytes": memory,
        "os": platform.platform(),
        "loadavg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def _cpuinfo():
    """Fields of the first processor in /proc/cpuinfo (empty off Linux)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def physical_cores():
    """Distinct (package, core) pairs in /proc/cpuinfo; the logical count where that is absent.
    llama-bench's default thread count is this number."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.cpu_count()
    cores = set()
    for block in text.split("\n\n"):
        fields = dict((k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in block.splitlines()))
        if "core id" in fields:
            cores.add((fields.get("physical id"), fields["core id"]))
    return len(cores) or os.cpu_count()


def software_versions():
    """Python and the packages the numbers depend on, and the dasllama checkout's commit."""
    out = {"python": platform.python_version()}
    for name in ("dasllama", "numpy", "numba", "llvmlite", "gguf", "tbb", "pywhispercpp"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    out.update(dasllama_commit())
    try:
        import numba
        out["numba_threading_layer"] = numba.threading_layer()
    except (ImportError, ValueError):   # ValueError: no parallel region has run yet
        out["numba_threading_layer"] = None
    return out


def dasllama_commit():
    """{"dasllama_commit": sha, "dasllama_dirty": bool} when dasllama runs from a git checkout."""
    if not (PACKAGE_ROOT / ".git").exists():
        return {"dasllama_commit": None}
    def git(*args):
        return subprocess.run(["git", "-C", str(PACKAGE_ROOT), *args], capture_output=True,
                              text=True).stdout.strip()
    return {"dasllama_commit": git("rev-parse", "HEAD") or None,
            "dasllama_dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def tune_sidecar():
    """The kernel choices in force: the tune sidecar used (path, sha256) or why it was refused,
    the DASLLAMA_KERNELS pin, and per weight format and phase (and tuned shape) the variant
    that runs and which layer chose it; "none" in a dasllama without the tuner."""
    if importlib.util.find_spec("dasllama.kernels.sidecar") is None:
        return "none"
    from dasllama.kernels import matmul, sidecar
    doc, refusal = sidecar.read()
    path = sidecar.sidecar_path()
    record = {"sidecar": {"path": str(path), "sha256": sha256_file(path)} if doc else None,
              "refused": str(refusal) if refusal else None,
              "pin": os.environ.get(sidecar.PIN_ENV) or None}
    try:
        choices, notes = sidecar.resolve(matmul.VARIANTS)
    except Exception as e:   # the engine then runs the defaults (sidecar.in_force); say why
        record["error"] = f"{type(e).__name__}: {e}"
        return record
    def name(key):                   # (qtype, phase[, n_rows, n_cols]) -> "Q4_K prefill 640x1024"
        qtype, phase, *shape = key
        return " ".join([sidecar.type_name(qtype), phase] + (["x".join(map(str, shape))] if shape else []))
    record["in_force"] = {name(key): f"{c.variant} ({c.source})" for key, c in choices.items()}
    record["notes"] = notes
    return record


def build_receipt(commands, inputs, reference=None, hardware=None):
    """The receipt: command lines run, input files with sha256, software, hardware (probed
    now unless given), reference."""
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commands": commands,
        "inputs": [{"path": os.fspath(p), "bytes": os.path.getsize(p), "sha256": sha256_file(p)}
                   for p in dict.fromkeys(os.fspath(p) for p in inputs)],
        "software": software_versions(),
        "tune_sidecar": tune_sidecar(),
        "hardware": hardware or probe_hardware(),
        "reference": reference,
    }


def build_info(hardware):
    """The short build identity both benches stamp on every record: our commit and the CPU."""
    return {"commit": (dasllama_commit().get("dasllama_commit") or "unknown")[:7],
            "cpu_info": hardware["cpu_model"]}


def write_results(path, records, receipt):
    """The results with their receipt, as one JSON file."""
    with open(path, "w") as f:
        json.dump({"results": records, "receipt": receipt}, f, indent=2)
        f.write("\n")

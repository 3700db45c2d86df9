"""What CPU this is: model name, instruction-set features, and the class its tuned profile is
shipped for; and what LLVM will compile for (`llvm_has`), which the IR kernels choose their
instructions by. The one place the engine asks. Plain Python (no numba): the kernel package
reads it while choosing variants, before anything is compiled.
"""
import os
import platform
from dataclasses import dataclass

# Classes from the most specific down; a class's profile applies to every CPU that has all
# the features it names. "generic" needs nothing and is always last.
CLASSES = (
    # Intel's AMX cores (Sapphire Rapids on): here decode streams Q5_0 faster through its
    # 16-row Q8_0 copy than from the file's blocks, where Zen 4 (x86-avx512-vnni) does not
    ("x86-avx512-amx", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "amx_int8"})),
    ("x86-avx512-vnni", frozenset({"avx512f", "avx512bw", "avx512vl", "avx512_vnni"})),
    ("x86-avx512", frozenset({"avx512f", "avx512bw", "avx512vl"})),
    ("x86-avx2", frozenset({"avx2", "fma", "f16c"})),
    ("arm-neon-dotprod", frozenset({"asimd", "asimddp"})),
    ("arm-neon", frozenset({"asimd"})),
    ("generic", frozenset()),
)

# The features that change which code the kernels get; the rest of a flags line (virtualization,
# mitigations, power states) says nothing about speed and would make every VM "another machine".
# avx512dq: ggml's 16-lane float loops (ggml_v_expf, SwiGLU, soft_max) need it beside avx512f,
# so the lanes the kernels model (ops.EXP_LANES) follow it.
RELEVANT = frozenset().union(*(f for _, f in CLASSES)) | {
    "sse4_1", "sse4_2", "avx", "bmi2", "avx512dq", "avx512_bf16", "avx512_vbmi", "avx_vnni", "amx_int8",
    "sve", "i8mm", "bf16"}


@dataclass(frozen=True)
class CpuInfo:
    model: str             # "AMD EPYC 9R14", "Apple M2", ... as the OS names it
    features: frozenset    # lower-case flags from RELEVANT that this CPU has
    machine: str           # platform.machine(): x86_64, aarch64, arm64

    @property
    def cpu_class(self):
        return classes_of(self.features)[0]


def build_key(info=None):
    """One line naming what native code built here may use: the machine and the RELEVANT
    features. A build made with -march=native (the llama.cpp reference) is kept under it, and
    another CPU with a different key must not run it (an AVX-512 build dies of SIGILL on AVX2)."""
    info = info or probe()
    return f"{info.machine}:{','.join(sorted(info.features))}"


def classes_of(features):
    """Every class whose features this CPU has, most specific first (ends with "generic")."""
    return [name for name, need in CLASSES if need <= features]


def probe(cpuinfo_path="/proc/cpuinfo"):
    """This machine's CpuInfo, from /proc/cpuinfo where there is one."""
    fields = _first_processor(cpuinfo_path)
    model = (fields.get("model name") or fields.get("Hardware") or fields.get("CPU part")
             or platform.processor() or platform.machine() or "unknown")
    flags = (fields.get("flags") or fields.get("Features") or "").lower().split()
    return CpuInfo(model=model.strip(), features=frozenset(flags) & RELEVANT,
                   machine=platform.machine())


def _first_processor(path):
    """key -> value of the first processor stanza (features are the same on every core)."""
    if not os.path.exists(path):
        return {}
    fields = {}
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if fields:
                    break
                continue
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    return fields


def llvm_has(*features):
    """The CPU numba compiles for has every one of `features` (LLVM's names: avx512vnni,
    avx512bw, ...): the instructions the IR kernels may emit, whatever the OS reports. That is
    the host's, or what numba's NUMBA_CPU_FEATURES names ("+avx2,-avx512f,..."), which
    compiles for another CPU (an AVX2 build on an AVX-512 machine: tests of the AVX2 paths)."""
    import llvmlite.binding as llvm
    named = os.environ.get("NUMBA_CPU_FEATURES", "")
    if named:
        have = {f[1:]: f[0] == "+" for f in named.split(",") if f[:1] in "+-" and len(f) > 1}
    else:
        have = llvm.get_host_cpu_features()
    return all(have.get(f, False) for f in features)

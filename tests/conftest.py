"""Fixtures shared by the test layers: the llama.cpp reference, tiny random-weight GGUFs, and
the real models several layers use (skipped with the reason when a registry is unreachable)."""
import os

import pytest

from tests import assets, gguf_factory, whisper_assets

# A first compile's second process (core/llm/step.py FirstCompile) turns itself on where a core
# is idle; the suite compiles many models' steps one after another, and a test that wants the
# helper (test_step.py) asks for it.
os.environ.setdefault("DASLLAMA_COMPILE_HELPER", "0")


@pytest.fixture(scope="session")
def smollm2():
    """SmolLM2-135M-Instruct Q4_1 (llama family, gpt2 BPE, a chat template)."""
    return assets.or_skip(assets.smollm2_q4_1)


@pytest.fixture(scope="session")
def tiny_en_dir():
    """Whisper tiny.en as a faster-whisper (CT2) dir."""
    return assets.or_skip(whisper_assets.tiny_en)


@pytest.fixture(scope="session")
def llama_bin():
    """Bin dir of the llama.cpp reference, built into the cache dir on first use."""
    bindir = assets.llama_cpp_bin()
    if bindir is None:
        pytest.skip("the llama.cpp reference could not be built (.ci/build-llama-cpp failed)")
    return bindir


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """tiny_model(arch, qtype="F32", **dims) -> Path of a random-weight GGUF, one per session."""
    root = tmp_path_factory.mktemp("gguf")

    def make(arch, qtype="F32", **kwargs):
        try:
            return gguf_factory.write_model(root, arch, qtype, **kwargs)
        except assets.AssetUnavailable as e:
            pytest.skip(str(e))

    return make

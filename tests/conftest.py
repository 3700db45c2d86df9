"""Fixtures shared by the test layers: the llama.cpp reference and tiny random-weight GGUFs."""
import pytest

from tests import assets, gguf_factory


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

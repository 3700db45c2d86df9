"""Model families, picked by the GGUF `general.architecture` through a small registry."""
from . import gemma2, gemma3, llama, phi3, qwen2, qwen2vl, qwen3
from .base import UnsupportedModel

FAMILIES = {m.ARCH: m for m in (llama, qwen2, qwen2vl, qwen3, gemma2, gemma3, phi3)}
ALIASES = {alias: m for m in FAMILIES.values() for alias in m.ALIASES}


def family(arch):
    """The family module for an architecture name, or UnsupportedModel listing what is."""
    if not isinstance(arch, str):
        what = "names no" if arch is None else "has a number, not a name, for its"
        raise UnsupportedModel(f"the GGUF {what} general.architecture (the model family); the "
                               "file is incomplete or corrupt.")
    found = FAMILIES.get(arch) or ALIASES.get(arch)
    if found is None:
        known = ", ".join(sorted(FAMILIES) + sorted(ALIASES))
        raise UnsupportedModel(f"architecture '{arch}' is not supported; dasllama runs: {known}.")
    return found

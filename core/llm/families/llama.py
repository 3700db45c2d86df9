"""llama family: RMSNorm, SwiGLU FFN, RoPE on adjacent pairs (SmolLM2, Llama 2/3, Mistral)."""
from .base import Flags, Hparams

ARCH = "llama"
ALIASES = ("mistral",)


def describe(g):
    return Hparams.from_gguf(g), Flags(rope_mode=0)

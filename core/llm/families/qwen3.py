"""qwen3 family: NeoX RoPE, per-head RMSNorm of q and k before RoPE, no q/k/v biases."""
from .base import Flags, Hparams

ARCH = "qwen3"
ALIASES = ()


def describe(g):
    return Hparams.from_gguf(g), Flags(rope_mode=2, qk_norm=True)

"""qwen2 family: llama with q/k/v biases and NeoX RoPE (Qwen2, Qwen2.5)."""
from .base import Flags, Hparams

ARCH = "qwen2"
ALIASES = ()


def describe(g):
    return Hparams.from_gguf(g), Flags(rope_mode=2)

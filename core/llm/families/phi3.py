"""phi3 family: fused q/k/v and gate/up projections, NeoX RoPE, queries scaled before attention.
The long-context RoPE factors (Phi-3 128k) are not supported."""
import math

from .base import Flags, Hparams, UnsupportedModel

ARCH = "phi3"
ALIASES = ()


def describe(g):
    if "rope_factors_long.weight" in g.tensors or "blk.0.rope_factors_long.weight" in g.tensors:
        raise UnsupportedModel(f"{g.path}: Phi-3 long-context RoPE factors are not supported yet; "
                               "use a 4k-context Phi-3 model.")
    # llama.cpp 0c1e570 runs phi3 without a sliding window whatever the file says
    hp = Hparams.from_gguf(g, n_swa=0, swa_layers=())
    flags = Flags(rope_mode=2, q_scale=1.0 / math.sqrt(hp.head_dim), kq_scale=1.0)
    return hp, flags

"""gemma3 family: scaled embeddings, QK-norm, pre and post norms, GELU gate, tied output,
five sliding-window layers (RoPE base 10000) to every global one."""
import math

from .. import forward as fw
from .base import Flags, Hparams

ARCH = "gemma3"
ALIASES = ()
SWA_PATTERN = 6


def describe(g):
    hp = Hparams.from_gguf(g, swa_pattern=SWA_PATTERN)
    # gemma_pytorch: queries scaled by query_pre_attn_scalar**-0.5 (= head_dim but for 27B)
    q_scale = (1.0 / math.sqrt(hp.n_embd / hp.n_head) if hp.n_layer == 62
               else 1.0 / math.sqrt(hp.head_dim))
    flags = Flags(rope_mode=2, act=fw.ACT_GELU, embd_scale=math.sqrt(hp.n_embd),
                  q_scale=q_scale, kq_scale=1.0, post_norms=True, qk_norm=True)
    return hp, flags

"""gemma2 family: gemma3 without QK-norm, with attention (50) and final (30) logit
softcapping, and every other layer sliding (window 4096) at the global RoPE base."""
import math

from gguf.constants import Keys

from .. import forward as fw
from .base import Flags, Hparams

ARCH = "gemma2"
ALIASES = ()
SWA_PATTERN = 2


def describe(g):
    arch = g.architecture
    meta = g.metadata
    base = float(meta.get(Keys.Rope.FREQ_BASE.format(arch=arch), 10000.0))
    hp = Hparams.from_gguf(
        g, swa_pattern=SWA_PATTERN,
        n_swa=int(meta.get(Keys.Attention.SLIDING_WINDOW.format(arch=arch), 4096)),
        freq_base_swa=float(meta.get(Keys.Rope.FREQ_BASE_SWA.format(arch=arch), base)),
        attn_softcap=float(meta.get(Keys.LLM.ATTN_LOGIT_SOFTCAPPING.format(arch=arch), 50.0)),
        final_softcap=float(meta.get(Keys.LLM.FINAL_LOGIT_SOFTCAPPING.format(arch=arch), 30.0)))
    if not hp.swa_layers:
        hp = Hparams(**{**hp.__dict__, "swa_layers": tuple(il % 2 < 1 for il in range(hp.n_layer))})
    q_scale = (1.0 / math.sqrt(hp.n_embd / hp.n_head) if hp.n_layer == 46
               else 1.0 / math.sqrt(hp.head_dim))
    flags = Flags(rope_mode=2, act=fw.ACT_GELU, embd_scale=math.sqrt(hp.n_embd),
                  q_scale=q_scale, kq_scale=1.0, post_norms=True)
    return hp, flags

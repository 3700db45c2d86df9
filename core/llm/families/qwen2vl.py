"""qwen2vl family: Qwen2-VL's text model, qwen2 whose RoPE is M-RoPE. Its rotated pairs fall in
sections (rope.dimension_sections: time, row, column, extra) that turn by the token's position
in that plane; a text token's planes are all its position, so text alone runs as qwen2's NeoX
RoPE, and only an image's rows (Model.eval_embd with their grid) and the text after one differ."""
from gguf.constants import Keys

from .base import Flags, Hparams, UnsupportedModel

ARCH = "qwen2vl"
ALIASES = ()


def describe(g):
    key = Keys.Rope.DIMENSION_SECTIONS.format(arch=g.architecture)
    if key not in g.metadata:
        raise UnsupportedModel(f"{g.path}: a qwen2vl model without {key}; the converter that wrote "
                               "it is incomplete.")
    sections = tuple(int(s) for s in g.metadata[key])[:4]
    return Hparams.from_gguf(g, extra={"rope_sections": sections}), Flags(rope_mode=2)

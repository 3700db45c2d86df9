"""The mmproj GGUF (a vision tower and its projector, as llama.cpp's converter writes it):
hyper-parameters from the `clip.*` keys, weights by their `v.*` / `mm.*` tensor names."""
from dataclasses import dataclass

import numpy as np
from gguf.constants import Keys

from dasllama.formats.gguf import GGUFError, open_gguf
from dasllama.kernels.quants import F16, F32

SUPPORTED = ("gemma3",)
# the text families each projector's splice is made for (its markers, its non-causal image span)
TEXT_FAMILIES = {"gemma3": ("gemma3",)}


class MmprojError(ValueError):
    """An mmproj file dasllama cannot use; the message is one sentence for the user."""


@dataclass(frozen=True)
class VisionHParams:
    """clip.vision.* of an mmproj, with llama.cpp's defaults for what the converter omits."""
    projector: str        # clip.projector_type
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    image_size: int
    patch_size: int
    eps: float            # layer norm epsilon (also the gemma3 projector's RMS norm)
    image_mean: tuple
    image_std: tuple
    n_merge: int          # gemma3: the avg-pool kernel, 4 unless the file says otherwise
    n_embd_text: int      # the projector's output width: the text model's n_embd

    @property
    def n_patches_side(self):
        return self.image_size // self.patch_size

    @property
    def n_tokens(self):
        """Image tokens the projector gives per image."""
        return (self.n_patches_side // self.n_merge) ** 2


class Mmproj:
    """An open mmproj: `hparams` and the tensors, read in place from the memory map."""

    def __init__(self, path):
        try:
            self.file = open_gguf(path)
        except GGUFError as e:
            raise MmprojError(str(e)) from None
        self.path = str(path)
        self.hparams = _hparams(self.file, self.path)

    def f32(self, name):
        """A tensor as float32 in numpy order (GGUF ne reversed)."""
        info = self._info(name)
        if info.qtype != F32:
            raise MmprojError(f"{self.path}: tensor {name} is {info.type_name}, dasllama reads it as F32 only.")
        return self.file.tensor_bytes(name).view(np.float32).reshape(tuple(reversed(info.shape)))

    def matrix(self, name):
        """A weight matrix (n_rows, n_cols) as (qtype, raw rows) for the matmul kernels."""
        info = self._info(name)
        if info.qtype not in (F16, F32):
            raise MmprojError(f"{self.path}: tensor {name} is {info.type_name}; dasllama reads "
                              "mmproj matrices in F16 or F32.")
        dtype = np.float16 if info.qtype == F16 else np.float32
        rows = self.file.tensor_bytes(name).view(dtype).reshape(tuple(reversed(info.shape)))
        return info.qtype, rows

    def _info(self, name):
        info = self.file.tensors.get(name)
        if info is None:
            raise MmprojError(f"{self.path} lacks the tensor {name} its projector "
                              f"'{self.hparams.projector}' needs: the converter that wrote it is incomplete.")
        return info


def _hparams(f, path):
    projector = f.get(Keys.Clip.PROJECTOR_TYPE) or f.get(Keys.ClipVision.PROJECTOR_TYPE)
    if f.architecture != "clip" or projector is None:
        raise MmprojError(f"{path} is not an mmproj file (no {Keys.Clip.PROJECTOR_TYPE} key): pass "
                          "the mmproj GGUF written beside the model by llama.cpp's converter.")
    if projector not in SUPPORTED:
        raise MmprojError(f"{path} has projector type '{projector}'; dasllama supports "
                          f"{', '.join(SUPPORTED)}.")
    if not f.get(Keys.Clip.HAS_VISION_ENCODER, False):
        raise MmprojError(f"{path} has no vision encoder (clip.has_vision_encoder).")

    def need(key):
        if key not in f.metadata:
            raise MmprojError(f"{path} lacks the key {key}: the converter that wrote it is incomplete.")
        return f.metadata[key]

    v, a = Keys.ClipVision, Keys.ClipVision.Attention
    hp = VisionHParams(
        projector=projector, n_embd=int(need(v.EMBEDDING_LENGTH)), n_ff=int(need(v.FEED_FORWARD_LENGTH)),
        n_layer=int(need(v.BLOCK_COUNT)), n_head=int(need(a.HEAD_COUNT)),
        image_size=int(need(v.IMAGE_SIZE)), patch_size=int(need(v.PATCH_SIZE)),
        eps=float(need(a.LAYERNORM_EPS)),
        image_mean=tuple(float(x) for x in need(v.IMAGE_MEAN)),
        image_std=tuple(float(x) for x in need(v.IMAGE_STD)),
        n_merge=int(f.get(v.Projector.SCALE_FACTOR, 4)),
        n_embd_text=int(need(v.PROJECTION_DIM)))
    if hp.n_patches_side % hp.n_merge or hp.n_embd % hp.n_head:
        raise MmprojError(f"{path}: {hp.n_patches_side} patches a side do not pool by {hp.n_merge}, "
                          f"or {hp.n_embd} wide does not split into {hp.n_head} heads.")
    return hp

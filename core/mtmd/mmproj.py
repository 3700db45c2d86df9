"""The mmproj GGUF (a vision or audio tower and its projector, as llama.cpp's converter writes
it): hyper-parameters from the `clip.*` keys (`clip.vision.*`, `clip.audio.*`), weights by their
`v.*` / `a.*` / `mm.*` / `mm.a.*` tensor names."""
from dataclasses import dataclass

import numpy as np
from gguf.constants import Keys

from dasllama.formats.gguf import GGUFError, open_gguf
from dasllama.kernels.quants import BF16, F16, F32, SUPPORTED as MATMUL_QTYPES, row_bytes, type_name

# projector type -> the medium its tower takes
SUPPORTED = {"gemma3": "image", "idefics3": "image", "qwen2vl_merger": "image", "qwen2.5vl_merger": "image",
             "qwen2a": "audio", "ultravox": "audio"}
# the image towers whose rows the text model places by row and column (M-RoPE)
MROPE_PROJECTORS = ("qwen2vl_merger", "qwen2.5vl_merger")
# the text families each projector's splice is made for (its markers, its non-causal media span)
TEXT_FAMILIES = {"gemma3": ("gemma3",), "idefics3": ("llama",), "qwen2vl_merger": ("qwen2vl",),
                 "qwen2.5vl_merger": ("qwen2vl",),
                 "qwen2a": ("qwen2", "qwen2vl"), "ultravox": ("llama",)}   # qwen2vl: Qwen2.5-Omni's


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
    n_merge: int          # gemma3: the avg-pool kernel, 4 unless the file says otherwise;
                          # idefics3: the pixel shuffle's factor per side
    n_embd_text: int      # the projector's output width: the text model's n_embd
    longest_edge: int = 0 # idefics3: the image's longest side before it is cut into tiles
    n_wa_pattern: int = 0 # qwen2.5vl: every n_wa_pattern-th layer attends to the whole image,
                          # the others within their window

    @property
    def n_patches_side(self):
        return self.image_size // self.patch_size

    @property
    def n_tokens(self):
        """Image tokens the projector gives per image (idefics3: per tile)."""
        return (self.n_patches_side // self.n_merge) ** 2


@dataclass(frozen=True)
class AudioHParams:
    """clip.audio.* of an mmproj: a Whisper-style encoder (two convolutions, pre-norm blocks)
    and its projector. mtmd fixes the front end for these projectors: 16 kHz, 30 s windows of
    3000 mel frames (n_fft 400, hop 160)."""
    projector: str        # clip.audio.projector_type, else clip.projector_type
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_mel: int            # clip.audio.num_mel_bins
    eps: float            # the encoder's layer norm epsilon
    stack_factor: int     # ultravox: frames stacked into one projector row (1: none)
    n_embd_text: int      # the projector's output width: the text model's n_embd

    n_frames = 3000       # mel frames in one window (mtmd splits the mel into these)

    @property
    def n_tokens(self):
        """Audio tokens the projector gives per 30 s window: 1500 frames after the stride-2
        convolution, halved by qwen2a's pool, or stacked by ultravox's factor with the last
        stack zero-padded. (llama.cpp's clip_n_output_tokens stacks before halving, so for a
        factor that does not divide 1500, such as Ultravox's real 8, it counts 187 where its
        graph gives 188, and aborts; this count is the graph's.)"""
        n = self.n_frames // 2                    # the second convolution's stride
        if self.projector == "qwen2a":
            n //= 2                               # its average pool
        elif self.projector == "ultravox":
            n = -(-n // self.stack_factor)
        return n


class Mmproj:
    """An open mmproj: `vision` and `audio` hparams (None where the file has no such tower;
    `hparams` is the vision one) and the tensors, read in place from the memory map."""

    def __init__(self, path):
        try:
            self.file = open_gguf(path)
        except GGUFError as e:
            raise MmprojError(str(e)) from None
        self.path = str(path)
        self.vision, self.audio = _hparams(self.file, self.path)
        self.hparams = self.vision

    @property
    def media(self):
        """What the file's towers take: a tuple of "image" / "audio"."""
        return tuple(m for m, hp in (("image", self.vision), ("audio", self.audio)) if hp is not None)

    @property
    def quantised(self):
        """Whether any matrix is in a quantised format (not F16 / F32 / BF16)."""
        return any(t.qtype not in (F16, F32, BF16) for t in self.file.tensors.values())

    def f32(self, name):
        """A tensor as float32 in numpy order (GGUF ne reversed); F16 vectors are widened."""
        info = self._info(name)
        if info.qtype not in (F16, F32):
            raise MmprojError(f"{self.path}: tensor {name} is {info.type_name}, dasllama reads it as F32 or F16 only.")
        dtype = np.float16 if info.qtype == F16 else np.float32
        data = self.file.tensor_bytes(name).view(dtype).reshape(tuple(reversed(info.shape)))
        return data if info.qtype == F32 else data.astype(np.float32)

    def matrix(self, name):
        """A weight matrix (n_rows, n_cols) as (qtype, rows) for the matmul kernels: float16 or
        float32 rows, or for a quantised format (a Q8_0 mmproj, as the converter's
        `--outtype q8_0` writes it) its raw blocks, uint8 (n_rows, row bytes)."""
        info = self._info(name)
        n_cols, n_rows = info.shape[0], int(np.prod(info.shape[1:]))
        if info.qtype not in MATMUL_QTYPES:
            raise MmprojError(f"{self.path}: tensor {name} is {info.type_name}; dasllama reads mmproj "
                              f"matrices in {', '.join(type_name(q) for q in MATMUL_QTYPES)}.")
        raw = self.file.tensor_bytes(name)
        if info.qtype in (F16, F32):
            rows = raw.view(np.float16 if info.qtype == F16 else np.float32)
            return info.qtype, rows.reshape(tuple(reversed(info.shape)))
        return info.qtype, raw.view(np.uint8).reshape(n_rows, row_bytes(info.qtype, n_cols))

    def _info(self, name):
        info = self.file.tensors.get(name)
        if info is None:
            projector = " / ".join(hp.projector for hp in (self.vision, self.audio) if hp)
            raise MmprojError(f"{self.path} lacks the tensor {name} its projector "
                              f"'{projector}' needs: the converter that wrote it is incomplete.")
        return info


def _supported():
    return ", ".join(f"{p} ({m})" for p, m in SUPPORTED.items()) + ", qwen2.5o (image and audio)"


def _hparams(f, path):
    """(VisionHParams or None, AudioHParams or None) as clip.cpp reads them: the projector type
    from clip.vision.projector_type / clip.audio.projector_type where the file has both towers,
    else clip.projector_type."""
    common = f.get(Keys.Clip.PROJECTOR_TYPE)
    has_vision = bool(f.get(Keys.Clip.HAS_VISION_ENCODER, False))
    has_audio = bool(f.get(Keys.Clip.HAS_AUDIO_ENCODER, False))
    v_proj = f.get(Keys.ClipVision.PROJECTOR_TYPE) or common
    a_proj = f.get(Keys.ClipAudio.PROJECTOR_TYPE) or common
    if v_proj == "qwen2.5o":        # Qwen2.5-Omni's one type for both towers, as clip.cpp reads it
        v_proj = "qwen2.5vl_merger"
    if a_proj == "qwen2.5o":
        a_proj = "qwen2a"
    if f.architecture != "clip" or (v_proj is None and a_proj is None):
        raise MmprojError(f"{path} is not an mmproj file (no {Keys.Clip.PROJECTOR_TYPE} key): pass "
                          "the mmproj GGUF written beside the model by llama.cpp's converter.")
    if not has_vision and not has_audio:
        raise MmprojError(f"{path} has neither a vision nor an audio encoder "
                          "(clip.has_vision_encoder, clip.has_audio_encoder).")
    for has, proj, medium in ((has_vision, v_proj, "image"), (has_audio, a_proj, "audio")):
        if has and SUPPORTED.get(proj) != medium:
            raise MmprojError(f"{path} has {medium} projector type '{proj}'; dasllama supports "
                              f"{_supported()}.")

    def need(key):
        if key not in f.metadata:
            raise MmprojError(f"{path} lacks the key {key}: the converter that wrote it is incomplete.")
        return f.metadata[key]

    vision = _vision_hparams(f, path, v_proj, need) if has_vision else None
    audio = _audio_hparams(f, path, a_proj, need) if has_audio else None
    return vision, audio


def _audio_hparams(f, path, projector, need):
    a, att = Keys.ClipAudio, Keys.ClipAudio.Attention
    hp = AudioHParams(
        projector=projector, n_embd=int(need(a.EMBEDDING_LENGTH)), n_ff=int(need(a.FEED_FORWARD_LENGTH)),
        n_layer=int(need(a.BLOCK_COUNT)), n_head=int(need(att.HEAD_COUNT)),
        n_mel=int(need(a.NUM_MEL_BINS)), eps=float(need(att.LAYERNORM_EPS)),
        stack_factor=int(need(a.Projector.STACK_FACTOR)) if projector == "ultravox" else 1,
        n_embd_text=int(need(a.PROJECTION_DIM)))
    if hp.n_embd % hp.n_head or hp.stack_factor < 1:
        raise MmprojError(f"{path}: {hp.n_embd} wide does not split into {hp.n_head} heads, or the "
                          f"stack factor {hp.stack_factor} is below 1.")
    return hp


def _n_merge(f, projector, need):
    """gemma3's pool (4 unless written), qwen2vl's merge (2 unless written), idefics3's shuffle."""
    v = Keys.ClipVision
    if projector == "gemma3":
        return int(f.get(v.Projector.SCALE_FACTOR, 4))
    if projector in MROPE_PROJECTORS:
        return int(f.get(v.SPATIAL_MERGE_SIZE, 2))
    return int(need(v.Projector.SCALE_FACTOR))


def _vision_hparams(f, path, projector, need):
    v, a = Keys.ClipVision, Keys.ClipVision.Attention
    if projector == "idefics3" and v.PREPROC_IMAGE_SIZE not in f.metadata:
        # llama.cpp slices such older files another way (llava-uhd's), which dasllama does not copy
        raise MmprojError(f"{path} is an idefics3 mmproj without {v.PREPROC_IMAGE_SIZE} (the image's "
                          "longest edge), from an older converter: re-convert it with a current llama.cpp.")
    hp = VisionHParams(
        projector=projector, n_embd=int(need(v.EMBEDDING_LENGTH)), n_ff=int(need(v.FEED_FORWARD_LENGTH)),
        n_layer=int(need(v.BLOCK_COUNT)), n_head=int(need(a.HEAD_COUNT)),
        image_size=int(need(v.IMAGE_SIZE)), patch_size=int(need(v.PATCH_SIZE)),
        eps=float(need(a.LAYERNORM_EPS)),
        image_mean=tuple(float(x) for x in need(v.IMAGE_MEAN)),
        image_std=tuple(float(x) for x in need(v.IMAGE_STD)),
        n_merge=_n_merge(f, projector, need),
        n_embd_text=int(need(v.PROJECTION_DIM)),
        longest_edge=int(need(v.PREPROC_IMAGE_SIZE)) if projector == "idefics3" else 0,
        n_wa_pattern=int(need(v.N_WA_PATTERN)) if projector == "qwen2.5vl_merger" else 0)
    if hp.n_merge < 1 or hp.n_patches_side % hp.n_merge or hp.n_embd % hp.n_head:
        raise MmprojError(f"{path}: {hp.n_patches_side} patches a side do not pool by {hp.n_merge}, "
                          f"or {hp.n_embd} wide does not split into {hp.n_head} heads.")
    return hp

"""Random-weight model + mmproj GGUF pairs, written with llama.cpp's converter's tensor names and
KVs (conversion/gemma.py Gemma3VisionModel, conversion/smolvlm.py SmolVLMModel,
conversion/qwenvl.py Qwen2VLVisionModel, conversion/qwen.py WhisperEncoderModel and
UltravoxWhisperEncoderModel, conversion/base.py MmprojModel), which llama-mtmd-cli loads: no
registry carries real vision- or audio-language weights.

    python -m tests.mtmd_pairs gemma3|idefics3|qwen2vl|qwen25vl|qwen25o|qwen2a|ultravox OUTDIR [--size tiny|real] [--seed N]
                               [--wtype F16|F32|Q8_0]

prints the model and mmproj paths. gemma3: `tiny` is a 2-layer 128-wide SigLIP on 224x224 images
(16 image tokens); `real` is Gemma 3's own SigLIP (27 layers, 1152 wide, 896x896, 256 tokens)
before a small text model, for timing the encoder. idefics3 (before a llama text model with
SmolVLM's image tokens): `tiny` is a 2-layer 64-wide SigLIP on 64x64 tiles, images resized to a
longest edge of 128; `real` is SmolVLM-256M's (12 layers, 768 wide, 512x512 tiles, longest edge
2048). qwen2vl (before a qwen2vl text model, M-RoPE): `tiny` is a 2-layer 64-wide ViT of 28 px
patches; `real` is Qwen2-VL-2B's (32 layers, 1280 wide, 14 px patches). qwen25vl (Qwen2.5-VL's
tower: RMS norms, gated SiLU MLPs, window attention, before the same text model): `tiny` is a
2-layer 64-wide ViT of 28 px patches, windowed in its first layer (2 x 2 squares a window);
`real` is Qwen2.5-VL-3B's (32 layers, 1280 wide, 3420 FFN, full attention every 8th). qwen25o
(Qwen2.5-Omni: one mmproj with both towers, qwen25vl's and qwen2a's, before a qwen2vl text
model) takes the two towers' sizes. qwen2a (before a qwen2
text model) and ultravox (before a llama): `tiny` is a 2-layer 64-wide Whisper-style encoder on
128 mel bins; `real` is Whisper base's (6 layers, 512 wide, 80 mel bins). Either reads 3000 mel
frames per 30 s window, as mtmd always gives them.
"""
import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import MODEL_TENSOR, TENSOR_NAMES

from tests import gguf_factory

PROJECTORS = ("gemma3", "idefics3", "qwen2vl", "qwen25vl", "qwen25o", "qwen2a", "ultravox")
AUDIO_TEXT_ARCH = {"qwen2a": "qwen2", "ultravox": "llama"}
ULTRAVOX_STACK = 4   # the real 8 makes llama.cpp 0c1e570 abort on a 30 s window (187 vs 188 tokens)

# ChatML, as Qwen2-Audio's template renders a string-content turn (without its default system)
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)
CHATML_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|audio_bos|>", "<|audio_eos|>")

# Gemma 3's chat template as far as a string-content turn goes (the published one also folds a
# system turn into the first user turn and renders image items as <start_of_image>).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}{%- set first_user_prefix = '' -%}{%- set loop_messages = messages -%}{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}"
)
GEMMA3_SPECIALS = ("<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>")


@dataclass(frozen=True)
class Tower:
    """A SigLIP vision tower's shape (HF SiglipVisionConfig names in comments)."""
    n_embd: int        # hidden_size
    n_ff: int          # intermediate_size
    n_layer: int       # num_hidden_layers
    n_head: int        # num_attention_heads
    image_size: int
    patch_size: int
    text_embd: int     # the text model's hidden size (the projector's output)
    text_layers: int


SIZES = {
    "tiny": Tower(128, 256, 2, 4, 224, 14, text_embd=128, text_layers=2),
    "real": Tower(1152, 4304, 27, 16, 896, 14, text_embd=640, text_layers=2),
}


# idefics3 (SmolVLM): the tower, its pixel shuffle factor and the longest edge images are resized
# to. `tiny` cuts llama.cpp's 640x488 test image into 2 x 2 tiles of 64 (+ the overview), 16
# tokens each; `real` is SmolVLM-256M's SigLIP (12 layers, 768 wide, 512 tiles of 16 px patches,
# shuffle 4: 64 tokens a tile) before a small text model.
IDEFICS3_SIZES = {
    "tiny": (Tower(64, 128, 2, 4, 64, 8, text_embd=128, text_layers=2), 2, 128),
    "real": (Tower(768, 3072, 12, 12, 512, 16, text_embd=576, text_layers=2), 4, 2048),
}

# SmolVLM's chat template as far as a string-content turn goes (the published one takes a list
# of typed items and renders an image item as <image>).
IDEFICS3_TEMPLATE = (
    "<|im_start|>"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' -%}User{%- elif message['role'] == 'assistant' -%}Assistant"
    "{%- else -%}System{%- endif -%}"
    "{{ ': ' + message['content'] + '<end_of_utterance>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ 'Assistant:' }}{%- endif -%}"
)
# the tokens mtmd places around idefics3 tiles, looked up by their text (SmolVLM has rows and
# columns up to 6)
IDEFICS3_SPECIALS = ("<|im_start|>", "<end_of_utterance>", "<fake_token_around_image>", "<global-img>",
                     "<image>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)))


# qwen2vl (Qwen2-VL's ViT: no learned positions, 2D M-RoPE, 2 x 2 patch merger). `tiny` takes
# 28 px patches, so test-1.jpeg (resized to 616 x 504 by mtmd) is 22 x 18 patches, 99 tokens;
# `real` is Qwen2-VL-2B's (32 layers, 1280 wide, 16 heads, 14 px patches) before a small model.
QWEN2VL_SIZES = {
    "tiny": Tower(64, 128, 2, 4, 560, 28, text_embd=128, text_layers=2),
    "real": Tower(1280, 5120, 32, 16, 560, 14, text_embd=1536, text_layers=2),
}
# qwen25vl: Qwen2.5-VL-3B's vision config (depth 32, hidden 1280, intermediate 3420, 16 heads,
# fullatt_block_indexes 7, 15, 23, 31: n_wa_pattern 8); tiny windows its first layer of two
QWEN25VL_SIZES = {
    "tiny": Tower(64, 128, 2, 4, 560, 28, text_embd=128, text_layers=2),
    "real": Tower(1280, 3420, 32, 16, 560, 14, text_embd=2048, text_layers=2),
}
QWEN25VL_WA_PATTERN = {"tiny": 2, "real": 8}
QWEN2VL_SPECIALS = ("<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>")
QWEN25O_SPECIALS = QWEN2VL_SPECIALS + ("<|audio_bos|>", "<|audio_eos|>")


@dataclass(frozen=True)
class AudioTower:
    """A Whisper-style encoder's shape (HF WhisperConfig names in comments)."""
    n_embd: int        # d_model
    n_ff: int          # encoder_ffn_dim
    n_layer: int       # encoder_layers
    n_head: int        # encoder_attention_heads
    n_mel: int         # num_mel_bins
    n_pos: int         # max_source_positions
    text_embd: int
    text_layers: int


AUDIO_SIZES = {
    "tiny": AudioTower(64, 128, 2, 4, 128, 1500, text_embd=128, text_layers=2),
    "real": AudioTower(512, 2048, 6, 8, 80, 1500, text_embd=512, text_layers=2),
}


def write_pair(outdir, projector="gemma3", size="tiny", seed=0, wtype="F16"):
    """Write (or reuse) a model + mmproj pair under outdir; returns (model, mmproj) paths."""
    if projector not in PROJECTORS:
        raise ValueError(f"unknown projector {projector!r}; supported: {', '.join(PROJECTORS)}")
    if projector in AUDIO_TEXT_ARCH:
        return _write_audio_pair(Path(outdir), projector, AUDIO_SIZES[size], size, seed, wtype)
    if projector == "idefics3":
        return _write_idefics3_pair(Path(outdir), size, seed, wtype)
    if projector in ("qwen2vl", "qwen25vl", "qwen25o"):
        return _write_qwen2vl_pair(Path(outdir), size, seed, wtype, projector)
    tower = SIZES[size]
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    vocab = _gemma3_vocab(outdir / "gemma3-mtmd-vocab.gguf")
    n_head = 4
    model = gguf_factory.write_model(outdir, "gemma3", "F32", n_embd=tower.text_embd,
                                     n_layer=tower.text_layers, n_head=n_head, n_head_kv=1,
                                     n_ff=2 * tower.text_embd, seed=seed, vocab_from=vocab)
    mmproj = _once(outdir / f"mmproj-{projector}-{size}-{wtype}-s{seed}.gguf", _write_gemma3_mmproj, tower, seed, wtype)
    return model, mmproj


def _gemma3_vocab(path, specials=GEMMA3_SPECIALS, template=GEMMA3_TEMPLATE, base="llama-spm"):
    """llama.cpp's llama-spm vocab (or another ggml-vocab-`base`) plus a family's turn and media
    control tokens and its chat template (Gemma 3's by default): a small vocab that tokenizes
    the prompts llama-mtmd-cli builds."""
    if path.exists():
        return path
    kvs = gguf_factory._tokenizer_kvs(gguf_factory._vocab_path(base))
    writer = gguf.GGUFWriter(str(path.with_suffix(".part")), "llama")
    keys = gguf.Keys.Tokenizer
    extra = {keys.LIST: [t.encode() for t in specials], keys.SCORES: [0.0] * len(specials),
             keys.TOKEN_TYPE: [gguf.TokenType.CONTROL] * len(specials)}
    for key, (value, vtype, sub_type) in kvs.items():
        if key in extra:
            value = list(value) + extra[key]
        if key != keys.CHAT_TEMPLATE:
            writer.add_key_value(key, value, vtype, sub_type=sub_type)
    writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    path.with_suffix(".part").rename(path)
    return path


def _write_idefics3_pair(outdir, size, seed, wtype):
    """A llama text model over GPT-2's BPE vocab (SmolVLM's is a BPE one too, and mtmd looks up
    "\n\n" as one token, which an SPM vocab lacks) and an idefics3 mmproj."""
    tower, scale, longest_edge = IDEFICS3_SIZES[size]
    outdir.mkdir(parents=True, exist_ok=True)
    vocab = _gemma3_vocab(outdir / "idefics3-mtmd-vocab.gguf", IDEFICS3_SPECIALS, IDEFICS3_TEMPLATE, "gpt-2")
    model = gguf_factory.write_model(outdir, "llama", "F32", n_embd=tower.text_embd, n_layer=tower.text_layers,
                                     n_head=4, n_head_kv=2, n_ff=2 * tower.text_embd, seed=seed,
                                     vocab_from=vocab)
    mmproj = _once(outdir / f"mmproj-idefics3-{size}-{wtype}-s{seed}.gguf", _write_idefics3_mmproj, tower, scale, longest_edge, seed, wtype)
    return model, mmproj


def _write_idefics3_mmproj(path, tower, scale, longest_edge, seed, wtype):
    """As SmolVLMModel writes it: MmprojModel's vision keys, the projector type, layer norm
    epsilon, the pixel shuffle factor, GELU, and the preprocessor's longest edge."""
    writer = _mmproj_writer(path, "idefics3", tower, wtype)
    _vision_keys(writer, tower)
    writer.add_vision_image_mean([0.5, 0.5, 0.5])   # SmolVLM's preprocessor_config.json
    writer.add_vision_image_std([0.5, 0.5, 0.5])
    writer.add_clip_projector_type(gguf.VisionProjectorType.IDEFICS3)
    writer.add_vision_attention_layernorm_eps(1e-6)
    writer.add_vision_projector_scale_factor(scale)
    writer.add_vision_use_gelu(True)
    writer.add_vision_preproc_image_size(longest_edge)
    _write_tensors(writer, _siglip_tensors(tower, "idefics3", scale), seed, wtype)


def _write_qwen2vl_pair(outdir, size, seed, wtype, projector="qwen2vl"):
    """A qwen2vl text model (qwen2 with M-RoPE sections) over a ChatML vocab with Qwen2-VL's
    vision markers, and a qwen2vl or qwen25vl mmproj."""
    tower = (QWEN2VL_SIZES if projector == "qwen2vl" else QWEN25VL_SIZES)[size]
    outdir.mkdir(parents=True, exist_ok=True)
    if projector == "qwen25o":
        vocab = _gemma3_vocab(outdir / "qwen25o-mtmd-vocab.gguf", QWEN25O_SPECIALS, CHATML_TEMPLATE)
    else:
        vocab = _gemma3_vocab(outdir / "qwen2vl-mtmd-vocab.gguf", QWEN2VL_SPECIALS, CHATML_TEMPLATE)
    model = gguf_factory.write_model(outdir, "qwen2vl", "F32", n_embd=tower.text_embd, n_layer=tower.text_layers,
                                     n_head=4, n_head_kv=2, n_ff=2 * tower.text_embd, seed=seed,
                                     vocab_from=vocab)
    if projector == "qwen2vl":
        mmproj = _once(outdir / f"mmproj-qwen2vl-{size}-{wtype}-s{seed}.gguf", _write_qwen2vl_mmproj, tower, seed,
                       wtype)
    else:
        audio = replace(AUDIO_SIZES[size], text_embd=tower.text_embd) if projector == "qwen25o" else None
        mmproj = _once(outdir / f"mmproj-{projector}-{size}-{wtype}-s{seed}.gguf", _write_qwen25vl_mmproj, tower,
                       QWEN25VL_WA_PATTERN[size], seed, wtype, audio)
    return model, mmproj


def _write_qwen2vl_mmproj(path, tower, seed, wtype):
    """As Qwen2VLVisionModel writes it: MmprojModel's vision keys, the projector type and the
    layer norm epsilon (rms_norm_eps); the conv3d patch kernel split into its two frames, the
    fused qkv into q, k, v."""
    writer = _mmproj_writer(path, "qwen2vl", tower, wtype)
    _vision_keys(writer, tower)
    writer.add_vision_image_mean([0.48145466, 0.4578275, 0.40821073])   # Qwen2-VL's (CLIP's)
    writer.add_vision_image_std([0.26862954, 0.26130258, 0.27577711])
    writer.add_clip_projector_type(gguf.VisionProjectorType.QWEN2VL)
    writer.add_vision_attention_layernorm_eps(1e-6)
    _write_tensors(writer, _qwen2vl_tensors(tower), seed, wtype)


def _write_qwen25vl_mmproj(path, tower, wa_pattern, seed, wtype, audio=None):
    """As Qwen2VLVisionModel writes a qwen2_5_vl model: qwen2vl's keys with the qwen2.5vl_merger
    type, use_silu and n_wa_pattern (from fullatt_block_indexes); with an `audio` tower, as
    Qwen25OmniModel writes Qwen2.5-Omni: qwen2a's audio keys and tensors too, and the one
    projector type qwen2.5o (clip.cpp reads it as qwen2.5vl for the images, qwen2a for audio)."""
    writer = _mmproj_writer(path, "qwen25o" if audio else "qwen25vl", tower, wtype)
    _vision_keys(writer, tower)
    writer.add_vision_image_mean([0.48145466, 0.4578275, 0.40821073])
    writer.add_vision_image_std([0.26862954, 0.26130258, 0.27577711])
    writer.add_clip_projector_type(gguf.VisionProjectorType.QWEN25O if audio else gguf.VisionProjectorType.QWEN25VL)
    writer.add_vision_use_silu(True)
    writer.add_vision_n_wa_pattern(wa_pattern)
    writer.add_vision_attention_layernorm_eps(1e-6)
    tensors = _qwen25vl_tensors(tower)
    if audio:
        _audio_keys(writer, audio)
        tensors = [*tensors, *_audio_tensors("qwen2a", audio)]
    _write_tensors(writer, tensors, seed, wtype)


def _tensor_name(tensor, bid=None, suffix="weight"):
    """A tensor's GGUF name as the converter writes it (v.blk.0.attn_q.weight)."""
    return TENSOR_NAMES[tensor].format(bid=bid) + "." + suffix


def _blocks(tower, matrices, norms, unbiased=()):
    """Every pre-norm block's tensors: q, k, v, out, ffn up, ffn down (with biases, but those in
    `unbiased`) and the two layer norms (weight and bias)."""
    e, ff = tower.n_embd, tower.n_ff
    for bid in range(tower.n_layer):
        for tensor, shape in zip(matrices, ((e, e), (e, e), (e, e), (e, e), (ff, e), (e, ff))):
            yield _tensor_name(tensor, bid), shape, "matrix"
            if tensor not in unbiased:
                yield _tensor_name(tensor, bid, "bias"), shape[:1], "vector"
        for tensor in norms:
            yield _tensor_name(tensor, bid), (e,), "vector"
            yield _tensor_name(tensor, bid, "bias"), (e,), "vector"


def _vision_blocks(tower):
    T = MODEL_TENSOR
    return _blocks(tower, (T.V_ENC_ATTN_Q, T.V_ENC_ATTN_K, T.V_ENC_ATTN_V, T.V_ENC_ATTN_O, T.V_ENC_FFN_UP,
                           T.V_ENC_FFN_DOWN), (T.V_ENC_INPUT_NORM, T.V_ENC_POST_ATTN_NORM))


def _qwen2vl_tensors(tower):
    """(name, numpy shape, kind) of a qwen2vl mmproj; numpy shape is GGUF ne reversed."""
    e, p, T = tower.n_embd, tower.patch_size, MODEL_TENSOR
    yield _tensor_name(T.V_ENC_EMBD_PATCH), (e, 3, p, p), "matrix"
    yield _tensor_name(T.V_ENC_EMBD_PATCH, suffix="weight.1"), (e, 3, p, p), "matrix"
    yield from _vision_blocks(tower)
    yield _tensor_name(T.V_POST_NORM), (e,), "vector"                          # the merger's ln_q
    yield _tensor_name(T.V_POST_NORM, suffix="bias"), (e,), "vector"
    yield _tensor_name(T.V_MMPROJ, 0), (4 * e, 4 * e), "matrix"                # the merger's MLP
    yield _tensor_name(T.V_MMPROJ, 0, "bias"), (4 * e,), "vector"
    yield _tensor_name(T.V_MMPROJ, 2), (tower.text_embd, 4 * e), "matrix"
    yield _tensor_name(T.V_MMPROJ, 2, "bias"), (tower.text_embd,), "vector"


def _qwen25vl_tensors(tower):
    """(name, numpy shape, kind) of a qwen25vl mmproj: qwen2vl's, with RMS norms (weights only:
    norm1, norm2 and the merger's ln_q) and a gated MLP (gate_proj, up_proj, down_proj, biased)."""
    e, ff, p, T = tower.n_embd, tower.n_ff, tower.patch_size, MODEL_TENSOR
    yield _tensor_name(T.V_ENC_EMBD_PATCH), (e, 3, p, p), "matrix"
    yield _tensor_name(T.V_ENC_EMBD_PATCH, suffix="weight.1"), (e, 3, p, p), "matrix"
    for bid in range(tower.n_layer):
        for tensor, shape in ((T.V_ENC_ATTN_Q, (e, e)), (T.V_ENC_ATTN_K, (e, e)), (T.V_ENC_ATTN_V, (e, e)),
                              (T.V_ENC_ATTN_O, (e, e)), (T.V_ENC_FFN_GATE, (ff, e)), (T.V_ENC_FFN_UP, (ff, e)),
                              (T.V_ENC_FFN_DOWN, (e, ff))):
            yield _tensor_name(tensor, bid), shape, "matrix"
            yield _tensor_name(tensor, bid, "bias"), shape[:1], "vector"
        for tensor in (T.V_ENC_INPUT_NORM, T.V_ENC_POST_ATTN_NORM):
            yield _tensor_name(tensor, bid), (e,), "vector"
    yield _tensor_name(T.V_POST_NORM), (e,), "vector"
    yield _tensor_name(T.V_MMPROJ, 0), (4 * e, 4 * e), "matrix"
    yield _tensor_name(T.V_MMPROJ, 0, "bias"), (4 * e,), "vector"
    yield _tensor_name(T.V_MMPROJ, 2), (tower.text_embd, 4 * e), "matrix"
    yield _tensor_name(T.V_MMPROJ, 2, "bias"), (tower.text_embd,), "vector"


def _once(mmproj, write, *args):
    """mmproj, written by write(path, *args) through a .part file unless it exists already."""
    if not mmproj.exists():
        tmp = mmproj.with_suffix(".part")
        write(tmp, *args)
        tmp.rename(mmproj)
    return mmproj


def _vision_keys(writer, tower):
    """MmprojModel's vision keys, which every vision mmproj the converter writes carries."""
    writer.add_clip_has_vision_encoder(True)
    writer.add_vision_projection_dim(tower.text_embd)
    writer.add_vision_image_size(tower.image_size)
    writer.add_vision_patch_size(tower.patch_size)
    writer.add_vision_embedding_length(tower.n_embd)
    writer.add_vision_feed_forward_length(tower.n_ff)
    writer.add_vision_block_count(tower.n_layer)
    writer.add_vision_head_count(tower.n_head)


def _write_tensors(writer, tensors, seed, wtype):
    """Random tensors for (name, numpy shape, kind) rows: matrices in wtype, conv weights F16
    (the converter forces them), the rest F32; then the file, closed. For Q8_0 (the converter's
    `--outtype q8_0`), as its rules leave them: gemma3's input projection F16, a patch conv F32,
    a matrix whose rows do not split into 32-element blocks F16."""
    rng = np.random.default_rng(seed + 1)
    for name, shape, kind in tensors:
        data = _random(rng, name, shape)
        if kind == "conv" or (kind == "matrix" and wtype == "F16"):
            data = data.astype(np.float16)
        elif kind == "matrix" and wtype == "Q8_0":
            if "input_projection" in name:
                data = data.astype(np.float16)
            elif ".patch_embd." not in name:
                try:
                    qdata = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
                except gguf.QuantError:
                    data = data.astype(np.float16)
                else:
                    writer.add_tensor(name, qdata, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
                    continue
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


FILE_TYPES = {"F16": gguf.LlamaFileType.MOSTLY_F16, "F32": gguf.LlamaFileType.ALL_F32,
              "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def _mmproj_writer(path, projector, tower, wtype):
    """A GGUFWriter with the keys every mmproj the converter writes starts with."""
    writer = gguf.GGUFWriter(str(path), "clip")
    writer.add_type(gguf.GGUFType.MMPROJ)
    writer.add_name(f"dasllama random {projector} mmproj {tower.n_embd}x{tower.n_layer}")
    writer.add_file_type(FILE_TYPES[wtype])
    return writer


def _write_gemma3_mmproj(path, tower, seed, wtype):
    writer = _mmproj_writer(path, "gemma3", tower, wtype)
    _vision_keys(writer, tower)
    writer.add_vision_image_mean([0.5, 0.5, 0.5])   # Gemma 3's preprocessor_config.json
    writer.add_vision_image_std([0.5, 0.5, 0.5])
    writer.add_clip_projector_type(gguf.VisionProjectorType.GEMMA3)
    writer.add_vision_attention_layernorm_eps(1e-6)
    writer.add_vision_use_gelu(True)
    # the converter writes the pooling factor only when it is not Gemma 3's 4

    _write_tensors(writer, _siglip_tensors(tower), seed, wtype)


def _siglip_tensors(tower, projector="gemma3", scale=None):
    """(name, numpy shape, kind) of a gemma3 or idefics3 mmproj (scale: idefics3's pixel shuffle
    factor); numpy shape is the GGUF ne reversed. kind "embd" stays F32 (the converter forces
    `.embeddings.` to F32), "vector" too (1-D)."""
    e, p = tower.n_embd, tower.patch_size
    n_patches = (tower.image_size // p) ** 2
    yield _tensor_name(MODEL_TENSOR.V_ENC_EMBD_PATCH), (e, 3, p, p), "embd"
    yield _tensor_name(MODEL_TENSOR.V_ENC_EMBD_PATCH, suffix="bias"), (e,), "vector"
    yield _tensor_name(MODEL_TENSOR.V_ENC_EMBD_POS), (n_patches, e), "embd"
    yield from _vision_blocks(tower)
    yield _tensor_name(MODEL_TENSOR.V_POST_NORM), (e,), "vector"
    yield _tensor_name(MODEL_TENSOR.V_POST_NORM, suffix="bias"), (e,), "vector"
    if projector == "gemma3":
        yield _tensor_name(MODEL_TENSOR.V_MM_SOFT_EMB_NORM), (e,), "vector"
        # HF's mm_input_projection_weight is (vision width, text width), stored untransposed
        yield _tensor_name(MODEL_TENSOR.V_MM_INP_PROJ), (e, tower.text_embd), "matrix"
    else:
        # idefics3: connector.modality_projection.proj (text width, vision width * k * k), no bias
        yield _tensor_name(MODEL_TENSOR.V_MMPROJ_FC), (tower.text_embd, e * scale * scale), "matrix"


def _write_audio_pair(outdir, projector, tower, size, seed, wtype):
    outdir.mkdir(parents=True, exist_ok=True)
    vocab = _gemma3_vocab(outdir / "chatml-mtmd-vocab.gguf", CHATML_SPECIALS, CHATML_TEMPLATE)
    arch = AUDIO_TEXT_ARCH[projector]
    model = gguf_factory.write_model(outdir, arch, "F32", n_embd=tower.text_embd, n_layer=tower.text_layers,
                                     n_head=4, n_head_kv=2, n_ff=2 * tower.text_embd, seed=seed,
                                     vocab_from=vocab)
    mmproj = _once(outdir / f"mmproj-{projector}-{size}-{wtype}-s{seed}.gguf", _write_audio_mmproj, projector, tower, seed, wtype)
    return model, mmproj


def _write_audio_mmproj(path, projector, tower, seed, wtype):
    """As WhisperEncoderModel / UltravoxWhisperEncoderModel write it: the audio keys of
    MmprojModel, the projector type, mel bins, layer norm epsilon (and ultravox's stack factor);
    conv weights forced to F16, positions, biases and norms F32, other matrices in wtype."""
    writer = _mmproj_writer(path, projector, tower, wtype)
    _audio_keys(writer, tower)
    writer.add_clip_projector_type(projector)
    if projector == "ultravox":
        writer.add_audio_stack_factor(ULTRAVOX_STACK)
    _write_tensors(writer, _audio_tensors(projector, tower), seed, wtype)


def _audio_keys(writer, tower):
    """MmprojModel's audio keys, and the mel bins and layer norm epsilon Qwen25AudioModel (and
    the Whisper encoders' converters) add."""
    writer.add_clip_has_audio_encoder(True)
    writer.add_audio_projection_dim(tower.text_embd)
    writer.add_audio_embedding_length(tower.n_embd)
    writer.add_audio_feed_forward_length(tower.n_ff)
    writer.add_audio_block_count(tower.n_layer)
    writer.add_audio_head_count(tower.n_head)
    writer.add_audio_num_mel_bins(tower.n_mel)
    writer.add_audio_attention_layernorm_eps(1e-5)


def _audio_tensors(projector, tower):
    """(name, numpy shape, kind) of a qwen2a / ultravox mmproj; numpy shape is GGUF ne reversed."""
    e = tower.n_embd
    T = MODEL_TENSOR
    for i, c_in in ((1, tower.n_mel), (2, e)):
        yield _tensor_name(T.A_ENC_CONV1D, i), (e, c_in, 3), "conv"
        yield _tensor_name(T.A_ENC_CONV1D, i, "bias"), (e, 1), "vector"        # the converter's unsqueeze(-1)
    yield _tensor_name(T.A_ENC_EMBD_POS), (tower.n_pos, e), "embd"
    yield from _blocks(tower, (T.A_ENC_ATTN_Q, T.A_ENC_ATTN_K, T.A_ENC_ATTN_V, T.A_ENC_OUTPUT, T.A_ENC_FFN_UP,
                               T.A_ENC_FFN_DOWN), (T.A_ENC_INPUT_NORM, T.A_ENC_OUTPUT_NORM),
                       unbiased=(T.A_ENC_ATTN_K,))                     # Whisper's k_proj has none
    yield _tensor_name(T.A_POST_NORM), (e,), "vector"
    yield _tensor_name(T.A_POST_NORM, suffix="bias"), (e,), "vector"
    if projector == "qwen2a":
        yield _tensor_name(T.A_MMPROJ_FC), (tower.text_embd, e), "matrix"
        yield _tensor_name(T.A_MMPROJ_FC, suffix="bias"), (tower.text_embd,), "vector"
    else:
        stacked, hidden = e * ULTRAVOX_STACK, 2 * tower.text_embd
        yield _tensor_name(T.A_MM_NORM_PRE), (stacked,), "vector"
        yield _tensor_name(T.A_MMPROJ, 1), (2 * hidden, stacked), "matrix"
        yield _tensor_name(T.A_MM_NORM_MID), (hidden,), "vector"
        yield _tensor_name(T.A_MMPROJ, 2), (tower.text_embd, hidden), "matrix"


def _random(rng, name, shape):
    """Weights that keep the tower's activations O(1) through every layer norm."""
    if name.endswith("_norm.weight") or ".ln" in name or "post_ln.weight" in name or ".norm_" in name:
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    if name.endswith(".bias"):
        return rng.normal(0.0, 0.1, shape).astype(np.float32)
    if "position_embd" in name:
        return rng.normal(0.0, 0.5, shape).astype(np.float32)
    fan_in = shape[0] if "input_projection" in name else int(np.prod(shape[1:]))
    std = 1.0 / np.sqrt(fan_in)
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m tests.mtmd_pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("projector", choices=PROJECTORS)
    ap.add_argument("outdir")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--wtype", choices=sorted(FILE_TYPES), default="F16",
                    help="type of the tower's matrices (the converter's default is F16; Q8_0 as its "
                         "--outtype q8_0 writes them)")
    args = ap.parse_args(argv)
    model, mmproj = write_pair(args.outdir, args.projector, args.size, args.seed, args.wtype)
    print(model)
    print(mmproj)


if __name__ == "__main__":
    sys.exit(main())

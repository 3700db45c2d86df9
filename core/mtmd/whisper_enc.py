"""The Whisper-style audio tower of an mmproj and its projector (llama.cpp's
tools/mtmd/models/whisper-enc.cpp): two kernel-3 convolutions (the second of stride 2), each
with an erf-GELU, learned positions, pre-norm blocks (layer norm, non-causal attention with no
key bias, erf-GELU MLP), a final layer norm; then the projector:

- qwen2a (Qwen2-Audio): a stride-2 average pool of the frames before the final norm, and one
  linear layer `mm.a.fc`;
- ultravox: the frames stacked `stack_factor` at a time (zero-padded), an RMS norm, `mm.a.mlp.1`,
  a SwiGLU whose second half is the gate, an RMS norm, `mm.a.mlp.2`.

The products run on dasllama's matmul kernels in the file's type, as the SigLIP tower's do; the
convolutions as one product each over their input windows with the weight in F16, because
ggml's conv_1d rounds its im2col and its kernel to F16 whatever the file stores.
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from dasllama.kernels.quants import F16
from dasllama.kernels.speech.encoder_ops import bias_gelu_erf, conv3_windows, encoder_attention, layer_norm
from dasllama.kernels.vision import rms_norm_rows

from .siglip import Q_CHUNK, Weight, share_out

PROJ_EPS = 1e-6       # ultravox's RMS norms (fixed in whisper-enc.cpp)


class Layer:
    def __init__(self, mm, il):
        p = f"a.blk.{il}."
        (qt, q), (_, k), (_, v) = (mm.matrix(p + f"attn_{n}.weight") for n in "qkv")
        n = q.shape[0]
        bias = np.concatenate([mm.f32(p + "attn_q.bias"), np.zeros(n, np.float32), mm.f32(p + "attn_v.bias")])
        self.qkv = Weight(qt, np.concatenate([q, k, v]), bias)    # one product for q | k | v
        self.out = Weight(*mm.matrix(p + "attn_out.weight"), mm.f32(p + "attn_out.bias"))
        self.up = Weight(*mm.matrix(p + "ffn_up.weight"))
        self.up_bias = mm.f32(p + "ffn_up.bias")
        self.down = Weight(*mm.matrix(p + "ffn_down.weight"), mm.f32(p + "ffn_down.bias"))
        self.ln1 = mm.f32(p + "ln1.weight"), mm.f32(p + "ln1.bias")
        self.ln2 = mm.f32(p + "ln2.weight"), mm.f32(p + "ln2.bias")


def _conv(mm, i):
    """conv1d.i as (F16 weight (C_out, C_in * 3), bias (C_out,))."""
    w = mm.f32(f"a.conv1d.{i}.weight")                                           # (C_out, C_in, 3)
    rows = w.reshape(w.shape[0], -1).astype(np.float16)
    return Weight(F16, rows), mm.f32(f"a.conv1d.{i}.bias").reshape(-1)


class AudioTower:
    """A qwen2a or ultravox tower from an open Mmproj: `encode(mel) -> (n_tokens, n_embd_text)`."""

    def __init__(self, mm, n_threads=None):
        hp = self.hparams = mm.audio
        self.conv1, self.conv1_bias = _conv(mm, 1)
        self.conv2, self.conv2_bias = _conv(mm, 2)
        self.pos = mm.f32("a.position_embd.weight")                              # (n_pos_max, n_embd)
        self.layers = [Layer(mm, il) for il in range(hp.n_layer)]
        self.post_ln = mm.f32("a.post_ln.weight"), mm.f32("a.post_ln.bias")
        if hp.projector == "qwen2a":
            self.fc = Weight(*mm.matrix("mm.a.fc.weight"), mm.f32("mm.a.fc.bias"))
        else:
            self.norm_pre = mm.f32("mm.a.norm_pre.weight")
            self.mlp1 = Weight(*mm.matrix("mm.a.mlp.1.weight"))
            self.norm_mid = mm.f32("mm.a.norm_mid.weight")
            self.mlp2 = Weight(*mm.matrix("mm.a.mlp.2.weight"))
        self.n_threads = n_threads or 1
        self.pool = ThreadPoolExecutor(self.n_threads)
        share_out([self, *self.layers], self.pool)

    def encode(self, mel):
        """A float32 (n_mel, 3000) window from audio_mel.mel_windows -> (n_tokens, n_embd_text)."""
        hp = self.hparams
        with threadpool_limits(1):        # BLAS runs single-threaded inside the pool's tiles
            x = self.conv1(conv3_windows(mel, 1))                               # (3000, n_embd)
            bias_gelu_erf(x, self.conv1_bias)
            x = self.conv2(conv3_windows(np.ascontiguousarray(x.T), 2))          # (1500, n_embd)
            bias_gelu_erf(x, self.conv2_bias)
            n_pos = len(x)
            if len(self.pos) < n_pos:
                raise ValueError(f"the tower has {len(self.pos)} positions for {n_pos} frames")
            x += self.pos[:n_pos]
            for layer in self.layers:
                x = self._block(layer, x)
            if hp.projector == "qwen2a":
                x = (x[0::2] + x[1::2]) / np.float32(2)                          # (750, n_embd)
            x = self._layer_norm(x, *self.post_ln)
            return self._project(x)

    def _project(self, x):
        hp = self.hparams
        if hp.projector == "qwen2a":
            return self.fc(x)
        stride = hp.n_embd * hp.stack_factor
        flat = np.zeros(-(-x.size // stride) * stride, np.float32)
        flat[:x.size] = x.reshape(-1)
        x = flat.reshape(-1, stride)                            # (ceil(T / stack), n_embd * stack)
        x = self.mlp1(self._rms_norm(x, self.norm_pre))
        half = x.shape[1] // 2
        gate = x[:, half:]
        x = x[:, :half] * (gate / (np.float32(1) + np.exp(-gate)))              # swapped SwiGLU
        return self.mlp2(self._rms_norm(np.ascontiguousarray(x), self.norm_mid))

    def _rms_norm(self, x, w):
        out = np.empty_like(x)
        rms_norm_rows(x, w, PROJ_EPS, out)
        return out

    def _block(self, layer, x):
        h = self._layer_norm(x, *layer.ln1)
        x = x + layer.out(self._attention(layer.qkv(h)))
        h = self._layer_norm(x, *layer.ln2)
        f = layer.up(h)
        bias_gelu_erf(f, layer.up_bias)
        return x + layer.down(f)

    def _layer_norm(self, x, w, b):
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        layer_norm(x, w, b, self.hparams.eps, out)
        return out

    def _attention(self, qkv):                                # (T, 3 n) -> (T, n)
        """Non-causal softmax(q k^T / sqrt(d)) v per head, in (head, query chunk) tiles."""
        n = qkv.shape[1] // 3
        qkv_t = np.ascontiguousarray(qkv.T)                    # (3 n, T): a head is a row block
        qkv_t[:n] *= np.float32(1.0 / np.sqrt(n // self.hparams.n_head))
        return encoder_attention(qkv_t, self.hparams.n_head, self.pool, Q_CHUNK)

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
from dasllama.kernels.speech.encoder_ops import conv3_windows_rows
from dasllama.kernels.tower_rows import bias_gelu_erf_rows
from dasllama.kernels.vision import rms_norm_rows

from .siglip import Layer, PreNormTower, Weight, share_out

PROJ_EPS = 1e-6       # ultravox's RMS norms (fixed in whisper-enc.cpp)


def _conv(mm, i):
    """conv1d.i as (F16 weight (C_out, C_in * 3), bias (C_out,))."""
    w = mm.f32(f"a.conv1d.{i}.weight")                                           # (C_out, C_in, 3)
    rows = w.reshape(w.shape[0], -1).astype(np.float16)
    return Weight(F16, rows), mm.f32(f"a.conv1d.{i}.bias").reshape(-1)


class AudioTower(PreNormTower):
    """A qwen2a or ultravox tower from an open Mmproj: `encode(mel) -> (n_tokens, n_embd_text)`."""
    gelu = staticmethod(bias_gelu_erf_rows)

    def __init__(self, mm, n_threads=None):
        hp = self.hparams = mm.audio
        self.conv1, self.conv1_bias = _conv(mm, 1)
        self.conv2, self.conv2_bias = _conv(mm, 2)
        self.pos = mm.f32("a.position_embd.weight")                              # (n_pos_max, n_embd)
        self.layers = [Layer(mm, f"a.blk.{il}.") for il in range(hp.n_layer)]
        for layer in self.layers:
            layer.up.fuse_gelu_erf(layer.up_bias)
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
            x = self.conv1(conv3_windows_rows(np.ascontiguousarray(mel.T), 1))  # (3000, n_embd)
            self._on_rows(bias_gelu_erf_rows, x, self.conv1_bias)
            x = self.conv2(conv3_windows_rows(x, 2))                             # (1500, n_embd)
            self._on_rows(bias_gelu_erf_rows, x, self.conv2_bias)
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

"""Qwen2-VL's and Qwen2.5-VL's vision towers and patch merger (llama.cpp's
tools/mtmd/models/qwen2vl.cpp, which builds both): the
patch conv of both temporal frames' kernels (a still image is both frames), the patches regrouped
so each 2 x 2 square is 4 rows in a row, pre-norm blocks whose attention turns q and k by the
patch's row and column (2D M-RoPE, no learned positions) and whose MLP is a quick GELU; then the
merger: a layer norm, each 2 x 2 square's 4 rows as one, an MLP (GELU) to the text model's width.

Qwen2.5-VL's tower differs in three ways: RMS norms (no bias), a gated SiLU MLP, and window
attention: the merged squares are regrouped window by window (windows of 112 px: 4 x 4 squares
at 14 px patches), every layer but each n_wa_pattern-th attends within its window only, and
the merger's rows go back to raster order at the end (clip.cpp's window_idx, inv_window_idx
and window_mask).

The text model places the merged rows by their row and column (M-RoPE: Model.eval_embd's grid).
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from dasllama.kernels.speech.encoder_ops import bias_gelu
from dasllama.kernels.ops import rms_norm, swiglu
from dasllama.kernels.vision import bias_gelu_quick, patch_rows, rope_vision

from .siglip import Layer, PreNormTower, Weight, share_out

WINDOW_PX = 112     # clip.cpp's attn_window_size default, which qwen2.5vl files do not set


class Qwen2VLTower(PreNormTower):
    """The qwen2vl tower from an open Mmproj: `encode(image) -> (n_tokens, n_embd_text)` for a
    float32 (3, H, W) from preprocess.qwen2vl_input (H, W whole merged patches)."""
    gelu = staticmethod(bias_gelu_quick)

    def __init__(self, mm, n_threads=None):
        hp = self.hparams = mm.hparams
        if hp.n_merge != 2:
            raise ValueError(f"qwen2vl merges 2 x 2 patches; this mmproj says {hp.n_merge}.")
        self.patch = [Weight(qt, rows.reshape(hp.n_embd, -1))    # (n_embd, 3 p p) per frame
                      for qt, rows in (mm.matrix("v.patch_embd.weight"), mm.matrix("v.patch_embd.weight.1"))]
        self.layers = [self.layer_type(mm, f"v.blk.{il}.") for il in range(hp.n_layer)]
        self.post_ln = self.layer_type._norm(mm, "v.post_ln.")
        self.mm0 = Weight(*mm.matrix("mm.0.weight"))
        self.mm0_bias = mm.f32("mm.0.bias")
        self.mm2 = Weight(*mm.matrix("mm.2.weight"), mm.f32("mm.2.bias"))
        self.n_threads = n_threads or 1
        self.pool = ThreadPoolExecutor(self.n_threads)
        share_out([self, *self.layers], self.pool)
        self._pos = None

    layer_type = Layer      # a block's weights (the class)

    def encode(self, image):
        hp = self.hparams
        p = hp.patch_size
        ny, nx = image.shape[1] // p, image.shape[2] // p
        with threadpool_limits(1):        # BLAS runs single-threaded inside the pool's tiles
            rows = patch_rows(image, p)
            x = self.patch[0](rows) + self.patch[1](rows)
            x = merge_order(x, ny, nx)
            self._pos = merge_order(np.stack(np.mgrid[0:ny, 0:nx], -1).reshape(ny * nx, 2), ny, nx)
            x = self._run_layers(x, ny, nx)
        f = self.mm0(x.reshape(len(x) // 4, 4 * hp.n_embd))
        bias_gelu(f, self.mm0_bias)
        return self._raster(self.mm2(f))

    def _run_layers(self, x, ny, nx):
        """The blocks and the merger's norm over the merged-order rows x (ny nx, n_embd)."""
        for layer in self.layers:
            x = self._block(layer, x)
        return self._layer_norm(x, *self.post_ln)

    def _raster(self, y):
        return y

    def _attention(self, qkv):                                # (T, 3 n) -> (T, n)
        return super()._attention(self._turned(qkv))

    def _turned(self, qkv):
        """qkv with q and k turned by each row's patch row and column (2D M-RoPE)."""
        n = qkv.shape[1] // 3
        q, k = np.ascontiguousarray(qkv[:, :n]), np.ascontiguousarray(qkv[:, n:2 * n])
        for x in (q, k):
            rope_vision(x, self._pos[:, 0], self._pos[:, 1], self.hparams.n_head)
        return np.concatenate([q, k, qkv[:, 2 * n:]], axis=1)


class GatedLayer(Layer):
    """A qwen2.5vl block's weights: RMS norms (weight only), a gated SiLU MLP with biases."""

    def __init__(self, mm, prefix):
        super().__init__(mm, prefix)
        p = prefix
        self.gate = Weight(*mm.matrix(p + "ffn_gate.weight"))
        self.gate_bias = mm.f32(p + "ffn_gate.bias")

    @staticmethod
    def _norm(mm, prefix):
        """An RMS norm's arguments after x: (weight,)."""
        return (mm.f32(prefix + "weight"),)


class Qwen25VLTower(Qwen2VLTower):
    """The qwen2.5vl tower (projector type qwen2.5vl_merger): Qwen2VLTower's patches, M-RoPE and
    merger, with RMS norms, gated SiLU MLPs and window attention (see the module's notes)."""

    layer_type = GatedLayer

    def _layer_norm(self, x, w):
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        rms_norm(x, w, self.hparams.eps, out)  # ggml_rms_norm's f64 sums, as the text models' norm
        return out

    def _block(self, layer, x):
        h = self._layer_norm(x, *layer.ln1)
        x = x + layer.out(self._attention(layer.qkv(h)))
        h = self._layer_norm(x, *layer.ln2)
        g, u = layer.gate(h), layer.up(h)
        g += layer.gate_bias
        u += layer.up_bias
        swiglu(g, u, g)                         # ggml_swiglu_split, as the text models' FFN runs it
        return x + layer.down(g)

    def _run_layers(self, x, ny, nx):
        hp = self.hparams
        idx, self._windows = windows(ny // 2, nx // 2, WINDOW_PX // hp.patch_size // 2)
        inv = np.argsort(idx)                          # window order -> the square it holds
        x = x.reshape(len(x) // 4, 4, -1)[inv].reshape(len(x), -1)
        self._pos = self._pos.reshape(len(inv), 4, 2)[inv].reshape(-1, 2)
        self._idx = idx
        for il, layer in enumerate(self.layers):
            self._full = hp.n_wa_pattern == 0 or (il + 1) % hp.n_wa_pattern == 0
            x = self._block(layer, x)
        return self._layer_norm(x, *self.post_ln)

    def _raster(self, y):
        return np.ascontiguousarray(y[self._idx])

    def _attention(self, qkv):
        qkv = self._turned(qkv)
        if self._full:
            return PreNormTower._attention(self, qkv)
        out = np.empty((len(qkv), qkv.shape[1] // 3), np.float32)
        for a, b in self._windows:                     # rows a..b attend to each other only
            out[a:b] = PreNormTower._attention(self, qkv[a:b])
        return out


def windows(gy, gx, side):
    """clip.cpp's window grouping of a (gy, gx) grid of merged squares into side x side windows
    (row-major, the last row and column of windows cut short): (idx, spans) where idx[square] is
    the square's place in window order, and spans the (first, end) patch rows of each window
    in that order (4 rows a square)."""
    idx = np.empty(gy * gx, np.int64)
    spans, dst = [], 0
    for y in range(0, gy, side):
        for x in range(0, gx, side):
            first = dst
            for dy in range(min(side, gy - y)):
                for dx in range(min(side, gx - x)):
                    idx[(y + dy) * gx + x + dx] = dst
                    dst += 1
            spans.append((4 * first, 4 * dst))
    return idx, spans


def merge_order(rows, ny, nx):
    """Rows of an (ny, nx) patch grid, row-major -> each 2 x 2 square's 4 rows together
    (squares row-major, and row-major within), as qwen2vl.cpp regroups the conv's output."""
    rest = rows.shape[1:]
    grid = rows.reshape(ny // 2, 2, nx // 2, 2, *rest).swapaxes(1, 2)
    return np.ascontiguousarray(grid).reshape(ny * nx, *rest)

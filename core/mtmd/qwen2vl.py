"""Qwen2-VL's vision tower and patch merger (llama.cpp's tools/mtmd/models/qwen2vl.cpp): the
patch conv of both temporal frames' kernels (a still image is both frames), the patches regrouped
so each 2 x 2 square is 4 rows in a row, pre-norm blocks whose attention turns q and k by the
patch's row and column (2D M-RoPE, no learned positions) and whose MLP is a quick GELU; then the
merger: a layer norm, each 2 x 2 square's 4 rows as one, an MLP (GELU) to the text model's width.

The text model places the merged rows by their row and column (M-RoPE: Model.eval_embd's grid).
"""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import threadpool_limits

from dasllama.kernels.speech.encoder_ops import bias_gelu
from dasllama.kernels.vision import bias_gelu_quick, patch_rows, rope_vision

from .siglip import Layer, PreNormTower, Weight, share_out


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
        self.layers = [Layer(mm, f"v.blk.{il}.") for il in range(hp.n_layer)]
        self.post_ln = mm.f32("v.post_ln.weight"), mm.f32("v.post_ln.bias")
        self.mm0 = Weight(*mm.matrix("mm.0.weight"))
        self.mm0_bias = mm.f32("mm.0.bias")
        self.mm2 = Weight(*mm.matrix("mm.2.weight"), mm.f32("mm.2.bias"))
        self.n_threads = n_threads or 1
        self.pool = ThreadPoolExecutor(self.n_threads)
        share_out([self, *self.layers], self.pool)
        self._pos = None

    def encode(self, image):
        hp = self.hparams
        p = hp.patch_size
        ny, nx = image.shape[1] // p, image.shape[2] // p
        with threadpool_limits(1):        # BLAS runs single-threaded inside the pool's tiles
            rows = patch_rows(image, p)
            x = self.patch[0](rows) + self.patch[1](rows)
            x = merge_order(x, ny, nx)
            self._pos = merge_order(np.stack(np.mgrid[0:ny, 0:nx], -1).reshape(ny * nx, 2), ny, nx)
            for layer in self.layers:
                x = self._block(layer, x)
            x = self._layer_norm(x, *self.post_ln)
        f = self.mm0(x.reshape(len(x) // 4, 4 * hp.n_embd))
        bias_gelu(f, self.mm0_bias)
        return self.mm2(f)

    def _attention(self, qkv):                                # (T, 3 n) -> (T, n)
        n = qkv.shape[1] // 3
        q, k = np.ascontiguousarray(qkv[:, :n]), np.ascontiguousarray(qkv[:, n:2 * n])
        for x in (q, k):
            rope_vision(x, self._pos[:, 0], self._pos[:, 1], self.hparams.n_head)
        return super()._attention(np.concatenate([q, k, qkv[:, 2 * n:]], axis=1))


def merge_order(rows, ny, nx):
    """Rows of an (ny, nx) patch grid, row-major -> each 2 x 2 square's 4 rows together
    (squares row-major, and row-major within), as qwen2vl.cpp regroups the conv's output."""
    rest = rows.shape[1:]
    grid = rows.reshape(ny // 2, 2, nx // 2, 2, *rest).swapaxes(1, 2)
    return np.ascontiguousarray(grid).reshape(ny * nx, *rest)

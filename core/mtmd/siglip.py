"""The SigLIP vision tower and its gemma3 and idefics3 projectors (llama.cpp's
tools/mtmd/models/siglip.cpp): patch conv + learned positions, pre-norm ViT blocks (layer norm,
non-causal attention, GELU MLP), a final layer norm; then for gemma3 a k x k average pool of the
patch grid, an RMS norm and the input projection to the text model's width, for idefics3
(SmolVLM) a k x k pixel shuffle and one linear map.

Every weight product runs on dasllama's matmul kernels in the file's type (F16, F32, or a
quantised format such as a Q8_0 mmproj's), so x is rounded or quantised as ggml does it; a
quantised matrix multiplies through the copy the LLM's prefill takes (kernels/rowgroups.py:
Q8_0 rows in groups of 16, VNNI int8 dots), bit for bit the file's kernels' result, except
where the OS grants AMX: a Q8_0 matrix runs on AMX-INT8 tiles (kernels/amx_tower.py: the
same exact block sums, folded in another order, ~3x faster), an F16 one on AMX-BF16 tiles (x
rounded to f16 as ggml does, each f16 two bf16 parts, 2^-18 of a product) and the attention
on AMX-BF16 too (kernels/amx_tower.attention: key blocks with an online softmax, 2^-17 a
product). Elsewhere the attention products are float32 BLAS tiles on a thread pool, as the
Whisper encoder's are. The products too are shared out on that pool, in row blocks, each
with numba single-threaded: once a text model has run, numba's parallel regions run on libgomp
(core.runtime.threads.DECODE_LAYERS), and a (1500, 2048) F16 product took 0.75 s there against
0.085 s in row blocks on 2 threads (measured here, 2026-12-06, a loaded machine).
"""
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from dasllama.kernels import amx_tower, rowgroups, sidecar
from dasllama.kernels.formats import q8_0
from dasllama.kernels.matmul import matmul_f32
from dasllama.kernels.quants import BLOCK_BYTES, BLOCK_ELEMS, F16, F32
from dasllama.kernels.speech.encoder_ops import bias_gelu, encoder_attention, layer_norm
from dasllama.kernels.vision import avg_pool_tokens, bias_gelu_f16, patch_rows, rms_norm_rows, round_rows_f16

from .mmproj import MmprojError

Q_CHUNK = 256    # queries per attention tile: a tile's scores (256, n_patches) stay in cache
ROW_BLOCK = 128  # tokens per product block on the pool: several blocks a thread, for a shared core


class Weight:
    """A matrix (n_rows, n_cols) in its file type, y = x W^T (+ b) through the matmul kernels;
    `rows` float16 / float32 (n_rows, n_cols) or a quantised format's blocks, uint8 (n_rows,
    row bytes). With a `pool` (set by the tower) the tokens go in row blocks over it; blocks
    of `copy_min` tokens or more multiply through the batch copy, where the format has one."""

    def __init__(self, qtype, rows, bias=None):
        self.qtype = qtype
        self.gelu_erf = False    # the tower's erf-GELU applied as the tiles store y (Q8_0 on AMX)
        self.n_rows, self.n_cols = rows.shape
        if rows.dtype == np.uint8:
            self.n_cols = self.n_cols // BLOCK_BYTES[qtype] * BLOCK_ELEMS[qtype]
        self.raw = np.ascontiguousarray(rows).reshape(-1).view(np.uint8)
        self.bias = bias
        self.pool = None
        self.amx = None          # (wq, wd): a Q8_0 matrix's AMX-INT8 tiles, where AMX is granted
        self.amx_f16 = None      # an F16 matrix's bf16 parts, where AMX-BF16 is granted
        if qtype == q8_0.ID and amx_tower.INT8:
            self.amx = amx_tower.pack_q8_0(self.raw, self.n_rows, self.n_cols)
            self.copy_layout, self.copy, self.copy_min = None, None, 0
            return
        if qtype == F16 and amx_tower.BF16:
            self.amx_f16 = amx_tower.pack_f16(rows)
        self.copy_layout, self.copy, self.copy_min = batch_copy(qtype, self.raw, self.n_rows, self.n_cols)

    def __call__(self, x, residual=None):                    # (T, n_cols) -> (T, n_rows)
        """y = x W^T + b; with `residual` (T, n_rows), residual += y in place and returned."""
        if self.amx is not None or self.amx_f16 is not None:
            return self._on_tiles(x, residual)
        y = self._rows(x)
        if residual is None:
            return y
        residual += y
        return residual

    def fuse_gelu_erf(self, bias):
        """Where the matrix runs on the AMX Q8_0 tiles, let them add `bias` and apply the
        erf-GELU as they store y (the pass the tower makes next); `gelu_erf` says if they do."""
        if self.amx is not None:
            self.bias, self.gelu_erf = bias, True

    def _rows(self, x):
        if self.pool is None or len(x) <= ROW_BLOCK:
            y = self._product(x)
        else:
            blocks = [x[t:t + ROW_BLOCK] for t in range(0, len(x), ROW_BLOCK)]
            y = np.concatenate(list(self.pool.map(self._product_alone, blocks)))
        if self.bias is not None:
            y += self.bias
        return y

    def _on_tiles(self, x, residual=None):
        """The AMX products: each block of tokens writes its rows of y, bias added (and the
        residual or the GELU, where the Q8_0 tiles do it as they store)."""
        y = np.empty((len(x), self.n_rows), np.float32) if residual is None or self.amx is None else residual
        epilogue = "residual" if residual is not None else "gelu_erf" if self.gelu_erf else "bias"

        def block(t):
            rows = slice(t, t + ROW_BLOCK)
            if self.amx is not None:
                amx_tower.q8_matmul(x[rows], *self.amx, self.n_rows, out=y[rows], bias=self.bias, epilogue=epilogue)
            else:
                amx_tower.f16_matmul(x[rows], self.amx_f16, self.n_rows, out=y[rows], bias=self.bias)

        starts = range(0, len(x), ROW_BLOCK)
        if self.pool is None or len(x) <= ROW_BLOCK:
            for t in starts:
                block(t)
        else:
            list(self.pool.map(block, starts))
        if residual is not None and y is not residual:        # the F16 tiles: no epilogue
            residual += y
            return residual
        return y

    def _product(self, x):
        if self.copy is not None and len(x) >= self.copy_min:
            return matmul_f32(self.copy_layout, self.copy, self.n_rows, self.n_cols, x)
        return matmul_f32(self.qtype, self.raw, self.n_rows, self.n_cols, x)

    def _product_alone(self, x):
        numba.set_num_threads(1)             # per thread: this pool's threads are the parallelism
        return self._product(x)


_layouts = None   # {(qtype, phase): copy name}, as the LLM's weight copies take them


def batch_copy(qtype, blocks, n_rows, n_cols):
    """(layout, copy bytes, smallest batch it serves) of a quantised matrix, the copy the LLM's
    prefill multiplies through (rowgroups.LAYOUT_DEFAULTS, or the tuner's or a pin's choice),
    or (None, None, 0) where the format or this CPU has none, or the copy declines the rows."""
    global _layouts
    if qtype in (F16, F32):
        return None, None, 0
    if _layouts is None:
        _layouts = sidecar.layouts_in_force(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices)
    name = _layouts.get((qtype, "prefill"), "file")
    if name not in rowgroups.layout_choices(qtype, "prefill"):
        return None, None, 0
    layout = rowgroups.copy_layout(qtype, n_rows, name)
    copy = None if layout is None else rowgroups.make_copy(qtype, blocks, n_rows, n_cols, name=name)
    if copy is None:
        return None, None, 0
    return layout, copy, max(2, rowgroups.min_tokens(layout))


def share_out(weights, pool):
    """Give every Weight among `weights` (attributes of objects, lists of them) the pool."""
    for obj in weights:
        for w in vars(obj).values():
            if isinstance(w, Weight):
                w.pool = pool


class Layer:
    """One pre-norm block's weights under `prefix` (v.blk.N. for vision, a.blk.N. for audio), as
    llama.cpp's converter names them; a missing q/k/v bias is zero (Whisper's keys have none)."""

    def __init__(self, mm, prefix):
        p = prefix
        (qt, q), (_, k), (_, v) = (mm.matrix(p + f"attn_{n}.weight") for n in "qkv")
        bias = np.concatenate([mm.f32(p + f"attn_{n}.bias") if p + f"attn_{n}.bias" in mm.file.tensors
                               else np.zeros(len(w), np.float32) for n, w in zip("qkv", (q, k, v))])
        self.qkv = Weight(qt, np.concatenate([q, k, v]), bias)   # one product for q | k | v
        self.out = Weight(*mm.matrix(p + "attn_out.weight"), mm.f32(p + "attn_out.bias"))
        self.up = Weight(*mm.matrix(p + "ffn_up.weight"))
        self.up_bias = mm.f32(p + "ffn_up.bias")
        self.down = Weight(*mm.matrix(p + "ffn_down.weight"), mm.f32(p + "ffn_down.bias"))
        self.ln1, self.ln2 = self._norm(mm, p + "ln1."), self._norm(mm, p + "ln2.")

    @staticmethod
    def _norm(mm, prefix):
        """A layer norm's arguments after x: (weight, bias)."""
        return mm.f32(prefix + "weight"), mm.f32(prefix + "bias")


class PreNormTower:
    """What the vision and audio towers share: pre-norm blocks of layer norm, non-causal
    attention and a GELU MLP, each with its residual. `gelu` is the tower's bias + GELU kernel
    (SigLIP's tanh form, Whisper's erf form); `hparams.eps`, `hparams.n_head` and `pool` are set
    by the tower."""
    gelu = staticmethod(bias_gelu)

    def _block(self, layer, x):
        """x (T, n_embd), the residual stream, updated in place and returned."""
        h = self._layer_norm(x, *layer.ln1)
        x = layer.out(self._attention(layer.qkv(h)), residual=x)
        h = self._layer_norm(x, *layer.ln2)
        f = layer.up(h)
        if not layer.up.gelu_erf:
            self._on_rows(self.gelu, f, layer.up_bias)
        return layer.down(f, residual=x)

    def _layer_norm(self, x, w, b):
        x = np.ascontiguousarray(x)
        out = np.empty_like(x)
        self._on_rows(layer_norm, x, w, b, self.hparams.eps, out=out)
        return out

    def _on_rows(self, kernel, x, *args, out=None):
        """kernel(x[block], *args[, out[block]]) for blocks of ROW_BLOCK rows of x (T, n) on the
        pool: the row kernels (GELU, layer norm) are single-threaded and release the GIL, and on
        the calling thread alone they were 0.3 s of the audio tower's 1.7 (2026-12-06, loaded)."""
        def block(t):
            rows = slice(t, t + ROW_BLOCK)
            kernel(x[rows], *args, *(() if out is None else (out[rows],)))

        list(self.pool.map(block, range(0, len(x), ROW_BLOCK)))

    def _attention(self, qkv):                                # (T, 3 n) -> (T, n)
        """Non-causal softmax(q k^T / sqrt(d)) v per head, in (head, query chunk) tiles."""
        if amx_tower.BF16:         # the same on bf16 tiles (2^-17 a product), from qkv as it is
            return amx_tower.attention(qkv, self.hparams.n_head, self.pool)
        n = qkv.shape[1] // 3
        qkv_t = np.ascontiguousarray(qkv.T)                    # (3 n, T): a head is a row block
        qkv_t[:n] *= np.float32(1.0 / np.sqrt(n // self.hparams.n_head))
        self._on_rows(round_rows_f16, qkv_t[n:])               # libmtmd's flash attention casts K, V to f16
        return encoder_attention(qkv_t, self.hparams.n_head, self.pool, Q_CHUNK)


class SiglipTower(PreNormTower):
    """The SigLIP ViT from an open Mmproj, its projector loaded by the subclass (`_load_projector`):
    `_vit(image)` gives the post-norm patch states (n_patches, n_embd) of one square image."""
    gelu = staticmethod(bias_gelu_f16)     # ggml's f16 GELU table, as libmtmd runs it

    def __init__(self, mm, n_threads=None):
        hp = self.hparams = mm.hparams
        patch = mm.f32("v.patch_embd.weight")                     # (n_embd, 3, p, p)
        self.patch = Weight(mm.file.tensors["v.patch_embd.weight"].qtype,
                            patch.reshape(hp.n_embd, -1), mm.f32("v.patch_embd.bias"))
        self.pos = mm.f32("v.position_embd.weight")               # (n_patches, n_embd)
        self.layers = [Layer(mm, f"v.blk.{il}.") for il in range(hp.n_layer)]
        self.post_ln = mm.f32("v.post_ln.weight"), mm.f32("v.post_ln.bias")
        self._load_projector(mm)
        self.n_threads = n_threads or 1
        self.pool = ThreadPoolExecutor(self.n_threads)
        share_out([self, *self.layers], self.pool)

    def _vit(self, image):                                        # (3, S, S) -> (n_patches, n_embd)
        hp = self.hparams
        with threadpool_limits(1):        # BLAS runs single-threaded inside the pool's tiles
            x = self.patch(patch_rows(image, hp.patch_size))
            x += self.pos
            for layer in self.layers:
                x = self._block(layer, x)
            return self._layer_norm(x, *self.post_ln)


class Gemma3Tower(SiglipTower):
    """SigLIP + the gemma3 projector: `encode(image) -> (n_tokens, n_embd_text)`."""

    def _load_projector(self, mm):
        self.soft_emb_norm = mm.f32("mm.soft_emb_norm.weight")
        qt, proj = mm.matrix("mm.input_projection.weight")        # (n_embd, n_embd_text)
        if qt not in (F16, F32):   # the converter forces it to F16: ggml cannot transpose blocks
            raise MmprojError(f"{mm.path}: mm.input_projection.weight is quantised; llama.cpp's "
                              "converter writes it in F16, as gemma3's projector needs it.")
        self.proj = Weight(qt, np.ascontiguousarray(proj.T))       # ggml multiplies its transpose

    def encode(self, image):
        """float32 (3, S, S) from preprocess.gemma3_input -> image embeddings (n_tokens, n_embd_text)."""
        hp = self.hparams
        x = self._vit(image)
        side, k = hp.n_patches_side, hp.n_merge
        pooled = np.empty(((side // k) ** 2, hp.n_embd), np.float32)
        avg_pool_tokens(x, side, k, pooled)
        normed = np.empty_like(pooled)
        rms_norm_rows(pooled, self.soft_emb_norm, hp.eps, normed)
        return self.proj(normed)


class Idefics3Tower(SiglipTower):
    """SigLIP + the idefics3 (SmolVLM) projector, a pixel shuffle then one linear map:
    `encode(tile) -> (n_tokens, n_embd_text)` for each tile of preprocess.idefics3_tiles."""

    def _load_projector(self, mm):
        self.fc = Weight(*mm.matrix("mm.model.fc.weight"))        # (n_embd_text, n_embd * k * k)

    def encode(self, image):
        hp = self.hparams
        return self.fc(pixel_shuffle(self._vit(image), hp.n_patches_side, hp.n_merge))


def pixel_shuffle(x, side, k):
    """(side * side, n) patch states, row-major -> (side/k * side/k, k * k * n): each k x k block
    of patches becomes one row, ordered as ggml's build_patch_merge_permute leaves it (block
    rows then block columns; within a row, the block's patch rows, then its patch columns)."""
    n = x.shape[1]
    blocks = x.reshape(side // k, k, side // k, k, n).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(blocks).reshape((side // k) ** 2, k * k * n)

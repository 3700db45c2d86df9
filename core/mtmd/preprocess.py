"""An image to the tower's input, as llama.cpp's mtmd does it (mtmd-image.cpp). gemma3 (its
fixed-size preprocessor): fit inside image_size x image_size keeping the aspect ratio
(bilinear), centre on black (its PAD_CEIL letterbox). idefics3 (its longest-edge preprocessor):
Lanczos-resize to the longest edge, again up to whole tiles, cut into image_size tiles, plus the
whole image as one more tile. Then x / 255, (x - mean) / std in float32.

mtmd's resampler is Pillow's fixed-point one, but it always filters along rows first; Pillow 13
gives other pixels when it shrinks a tall image both ways (a 201 x 640 crop of test-1.jpeg,
black past its 488 rows: Lanczos to 40 x 128 puts 1418 of 15360 values up to 7 levels off,
bilinear to 70 x 224 4795 values 1 off), so every resize here goes through `resample`, a copy of
mtmd's.
"""
import math
from dataclasses import dataclass

import numpy as np
from PIL import Image


def letterbox(img, size, resize=None):
    """A Pillow RGB image fitted into a black size x size square (or size (w, h)), as mtmd's
    img_tool::resize with PAD_CEIL; bilinear unless `resize` says otherwise."""
    out_w, out_h = (size, size) if isinstance(size, int) else size
    w, h = img.size
    if (w, h) == (out_w, out_h):
        return img.copy()
    scale = min(np.float32(out_w) / np.float32(w), np.float32(out_h) / np.float32(h))   # float32, as mtmd's
    new_w = min(int(np.ceil(np.float32(w) * scale)), out_w)
    new_h = min(int(np.ceil(np.float32(h) * scale)), out_h)
    resized = img if (new_w, new_h) == (w, h) else (resize or _bilinear)(img, (new_w, new_h))
    out = Image.new("RGB", (out_w, out_h), (0, 0, 0))
    out.paste(resized, ((out_w - new_w) // 2, (out_h - new_h) // 2))
    return out


def normalize(pixels, mean, std):
    """uint8 (H, W, 3) -> float32 (3, H, W): x / 255, then (x - mean) / std per channel."""
    x = pixels.astype(np.float32) / np.float32(255.0)
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def gemma3_input(img, hparams):
    """A Pillow RGB image -> the tower's float32 (3, image_size, image_size) input."""
    square = np.asarray(letterbox(img, hparams.image_size), np.uint8)
    return normalize(square, hparams.image_mean, hparams.image_std)


def qwen2vl_input(img, hparams):
    """A Pillow RGB image -> float32 (3, H, W) as mtmd_image_preprocessor_dyn_size makes it for
    qwen2vl: each side rounded to whole merged patches, scaled down or up into 8..4096 image
    tokens if outside, then the image fitted into that size (bicubic, PAD_CEIL letterbox)."""
    size = smart_size(img.size, hparams.patch_size * hparams.n_merge, 8, 4096)
    return normalize(np.asarray(letterbox(img, size, _bicubic), np.uint8), hparams.image_mean, hparams.image_std)


def smart_size(size, align, min_tokens, max_tokens):
    """mtmd's calc_size_preserved_ratio without a longest edge, in its float32 arithmetic: (w, h)."""
    f32 = np.float32
    width, height = size
    min_pixels, max_pixels = min_tokens * align * align, max_tokens * align * align

    def by(op, x):
        return int(op(f32(x) / f32(align))) * align

    w_bar = max(align, by(_round, width))
    h_bar = max(align, by(_round, height))
    if w_bar * h_bar > max_pixels:
        beta = np.sqrt(f32(height) * f32(width) / f32(max_pixels))
        h_bar, w_bar = max(align, by(np.floor, f32(height) / beta)), max(align, by(np.floor, f32(width) / beta))
    elif w_bar * h_bar < min_pixels:
        beta = np.sqrt(f32(min_pixels) / (f32(height) * f32(width)))
        h_bar, w_bar = by(np.ceil, f32(height) * beta), by(np.ceil, f32(width) * beta)
    return w_bar, h_bar


def _round(x):
    """std::round: halves away from zero (numpy's round takes them to even)."""
    return math.floor(float(x) + 0.5)


@dataclass(frozen=True)
class Tiles:
    """An image cut as idefics3 takes it: grid_y rows of grid_x tiles, row by row, and the
    overview (the whole image on one tile), each float32 (3, image_size, image_size)."""
    grid_x: int
    grid_y: int
    tiles: list
    overview: object


def idefics3_tiles(img, hparams):
    """A Pillow RGB image -> Tiles, as mtmd_image_preprocessor_idefics3 cuts it: the longest side
    to longest_edge keeping the aspect ratio (the other side truncated, then made even), both
    sides up to whole tiles, each resize Lanczos."""
    w, h = img.size
    tile, edge = hparams.image_size, hparams.longest_edge
    aspect = w / h                                            # a double, as in mtmd
    if w >= h:
        new_w, new_h = edge, int(edge / aspect)
        new_h += new_h % 2
    else:
        new_w, new_h = int(edge * aspect), edge
        new_w += new_w % 2
    grid_x, grid_y = -(-new_w // tile), -(-new_h // tile)
    refined = _lanczos(_lanczos(img, (new_w, new_h)), (grid_x * tile, grid_y * tile))
    overview = _lanczos(refined, (tile, tile))
    pixels = np.asarray(refined, np.uint8)
    mean, std = hparams.image_mean, hparams.image_std
    tiles = [normalize(pixels[y * tile:(y + 1) * tile, x * tile:(x + 1) * tile], mean, std)
             for y in range(grid_y) for x in range(grid_x)]
    return Tiles(grid_x, grid_y, tiles, normalize(np.asarray(overview, np.uint8), mean, std))


def _bilinear(img, size):
    return Image.fromarray(resample(np.asarray(img, np.uint8), size, _bilinear_filter, 1.0))


def _bicubic(img, size):
    return Image.fromarray(resample(np.asarray(img, np.uint8), size, _bicubic_filter, 2.0))


def _lanczos(img, size):
    return Image.fromarray(resample(np.asarray(img, np.uint8), size, _lanczos_filter, 3.0))


PRECISION_BITS = 22          # Pillow's fixed point: 32 bits - 8 for a pixel - 2 of headroom


def resample(pixels, size, kernel, support):
    """uint8 (H, W, 3) -> uint8 (h, w, 3) for size (w, h), as mtmd's resize_pillow: a pass along
    each row where the width changes, then one along each column where the height does, each
    with Pillow's fixed-point weights and rounding."""
    w, h = size
    if pixels.shape[1] != w:
        pixels = _resample_rows(pixels, w, kernel, support)
    if pixels.shape[0] != h:
        pixels = _resample_rows(pixels.transpose(1, 0, 2), h, kernel, support).transpose(1, 0, 2)
    return np.ascontiguousarray(pixels)


def _resample_rows(pixels, n_out, kernel, support):
    """Resample axis 1 of uint8 (rows, n_in, 3) to n_out."""
    first, weights = _weights(pixels.shape[1], n_out, kernel, support)   # (n_out,), (n_out, ksize)
    taps = np.minimum(first[:, None] + np.arange(weights.shape[1]), pixels.shape[1] - 1)
    acc = np.full((pixels.shape[0], n_out, 3), 1 << (PRECISION_BITS - 1), np.int64)
    src = pixels.astype(np.int64)
    for k in range(weights.shape[1]):               # a tap past a pixel's range weighs 0
        acc += src[:, taps[:, k]] * weights[:, k, None]
    return np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)


def _weights(n_in, n_out, kernel, support):
    """Pillow's precompute_coeffs: each output pixel's first input pixel and its int32 weights
    (n_out, ksize), normalised in double and rounded half away from zero at 2^22."""
    scale = filterscale = n_in / n_out
    filterscale = max(filterscale, 1.0)              # widen the filter only when shrinking
    support *= filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    first = np.zeros(n_out, np.int64)
    weights = np.zeros((n_out, ksize), np.int64)
    for xx in range(n_out):
        center = (xx + 0.5) * scale
        xmin = max(int(center - support + 0.5), 0)
        n = min(int(center + support + 0.5), n_in) - xmin
        row = [kernel((x + xmin - center + 0.5) * (1.0 / filterscale)) for x in range(n)]
        total = 0.0
        for v in row:                                # summed in order, as the C loop does
            total += v
        if total != 0.0:
            row = [v / total for v in row]
        first[xx] = xmin
        weights[xx, :n] = [int(v * (1 << PRECISION_BITS) + (-0.5 if v < 0 else 0.5)) for v in row]
    return first, weights


def _bilinear_filter(x):
    x = abs(x)
    return 1.0 - x if x < 1.0 else 0.0


def _bicubic_filter(x, a=-0.5):
    x = abs(x)                                        # Pillow's a = -0.5, not PyTorch's -0.75
    if x < 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    if x < 2.0:
        return (((x - 5) * x + 8) * x - 4) * a
    return 0.0


def _lanczos_filter(x):
    return _sinc(x) * _sinc(x / 3.0) if -3.0 <= x < 3.0 else 0.0


def _sinc(x):
    if x == 0.0:
        return 1.0
    x *= 3.141592653589793
    return math.sin(x) / x

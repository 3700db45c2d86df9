"""An image to the tower's input, as llama.cpp's mtmd does it for gemma3 (its fixed-size
preprocessor, mtmd-image.cpp): fit inside image_size x image_size keeping the aspect ratio
(Pillow's bilinear filter, which mtmd copied), centre on black (its PAD_CEIL letterbox), then
x / 255, (x - mean) / std in float32."""
import numpy as np
from PIL import Image


def letterbox(img, size):
    """A Pillow RGB image fitted into a black size x size square, as mtmd's img_tool::resize."""
    w, h = img.size
    if (w, h) == (size, size):
        return img.copy()
    side = np.float32(size)
    scale = min(side / np.float32(w), side / np.float32(h))         # float32, as mtmd's float
    new_w = min(int(np.ceil(np.float32(w) * scale)), size)
    new_h = min(int(np.ceil(np.float32(h) * scale)), size)
    resized = img if (new_w, new_h) == (w, h) else img.resize((new_w, new_h), Image.BILINEAR)
    out = Image.new("RGB", (size, size), (0, 0, 0))
    out.paste(resized, ((size - new_w) // 2, (size - new_h) // 2))
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

"""Images decoded to 8-bit RGB pixels with Pillow (JPEG, PNG, WebP, BMP, GIF's first frame, ...).

Pillow is the decoder transformers' image processors use. llama.cpp's mtmd resamples with a
copy of Pillow's fixed-point filters that always filters rows first, where Pillow may not, so
the resizes are core.mtmd.preprocess's own copy of mtmd's, not Pillow's. The pixels are
the file's as stored: like mtmd (stb_image) no EXIF rotation is applied, an alpha channel is
dropped, and grey is repeated over R, G, B.
"""
import os

import numpy as np
from PIL import Image, UnidentifiedImageError


class ImageError(ValueError):
    """A file that cannot be read as an image; the message is one sentence for the user."""


class NotAnImage(ImageError):
    """A file no image decoder recognises (as against a damaged image of a known kind)."""


def open_rgb(path):
    """The file at `path` as a Pillow RGB image, fully decoded (a truncated file fails here)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ImageError(f"{path} does not exist or is not a file: pass an image file (JPEG, PNG, ...).")
    try:
        with Image.open(path) as img:
            img.load()
            return img if img.mode == "RGB" else img.convert("RGB")
    except UnidentifiedImageError:
        raise NotAnImage(f"{path} is not an image Pillow can read (JPEG, PNG, WebP, BMP, GIF, ...).") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"{path} is a damaged image ({e}): save or download it again.") from None


def read_rgb(path):
    """The pixels of an image file as uint8 (height, width, 3)."""
    return np.asarray(open_rgb(path), dtype=np.uint8)

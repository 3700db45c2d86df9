"""A turn's media files as the towers take them, in the order given: each file's kind read from
its first bytes as mtmd's helper reads it (RIFF/WAVE, ID3 or an MPEG frame sync, fLaC: audio;
anything else: an image), so `--image` and `--audio` are one list, as in llama-mtmd-cli. Images
decode to RGB (formats/image.py), clips to 16 kHz mono float32 as mtmd resamples them; a clip
with no samples is refused, as mtmd refuses it. Ogg (which libsndfile decodes and miniaudio
does not) counts as audio here too."""
import os

from dasllama.formats.audio import AudioError
from dasllama.formats.image import ImageError, NotAnImage, open_rgb

from .audio_in import load_clip
from .turn import Audio


def is_audio_file(head):
    """mtmd-helper's is_audio_file over a file's first bytes (at least 12), plus Ogg."""
    if len(head) < 12:
        return False
    wav = head[:4] == b"RIFF" and head[8:12] == b"WAVE"
    mp3 = head[:3] == b"ID3" or (head[0] == 0xFF and head[1] & 0xE0 == 0xE0)
    return wav or mp3 or head[:4] in (b"fLaC", b"OggS")


def split_paths(values):
    """--image / --audio values as llama.cpp's parser takes them: a comma-separated list is
    several files (unless the whole value names a file)."""
    paths = []
    for value in values:
        paths += [value] if os.path.exists(value) else [p for p in value.split(",") if p]
    return paths


def load_media(paths):
    """[(path, Pillow RGB image or Audio)] for the files, in order."""
    items = []
    for path in paths:
        try:
            with open(path, "rb") as f:
                head = f.read(12)
        except OSError:
            head = b""                      # open_rgb says what is wrong with the path
        items.append((path, _clip(path) if is_audio_file(head) else _image_or_clip(path)))
    return items


def _clip(path):
    samples = load_clip(path)
    if not len(samples):
        raise AudioError(f"{path}: the file holds no audio samples.")
    return Audio(samples)


def _image_or_clip(path):
    """An image; or, where no image decoder knows the file, a clip libsndfile can decode
    (AIFF, or audio the header check misses); else one sentence for both."""
    try:
        return open_rgb(path)
    except NotAnImage:
        try:
            return _clip(path)
        except AudioError:
            raise ImageError(f"{path} is not an image or an audio file that can be read: pass an image (JPEG, "
                             "PNG, WebP, ...) or a clip (wav, flac, mp3, ogg).") from None

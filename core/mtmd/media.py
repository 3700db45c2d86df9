"""A turn's media files as the towers take them: images decoded to RGB (formats/image.py), clips
to 16 kHz mono float32 as mtmd resamples them; a clip with no samples is refused, as mtmd
refuses it."""
from dasllama.formats.audio import AudioError
from dasllama.formats.image import open_rgb

from .audio_in import load_clip


def load_media(images, audios):
    """([(path, Pillow RGB image)], [(path, (n,) float32 samples)]) for the files given."""
    clips = [(path, load_clip(path)) for path in audios]
    for path, samples in clips:
        if not len(samples):
            raise AudioError(f"{path}: the file holds no audio samples.")
    return [(path, open_rgb(path)) for path in images], clips

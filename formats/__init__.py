"""Reading files: GGUF, whisper.cpp bins, CTranslate2 dirs, audio."""
import numpy as np


def shown(name, limit=60):
    """A name read from a file, as an error message may quote it: printable and short (in a
    corrupt file it is garbage, and could break the one-line message)."""
    text = name if name.isprintable() else repr(name)[1:-1]
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"'{text}'"


def map_file(path, error):
    """A read-only uint8 memory map of the file at `path` (a Path); a missing, empty or
    unreadable file raises `error` (the reader's own class) with one sentence."""
    if not path.is_file():
        raise error(f"{path}: no such file.")
    if path.stat().st_size == 0:
        raise error(f"{path} is empty (0 bytes): download the model again.")
    try:
        return np.memmap(path, dtype=np.uint8, mode="r")
    except OSError as e:
        raise error(f"{path} cannot be read ({e.strerror or e}): check its permissions.") from None

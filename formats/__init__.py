"""Reading files: GGUF, whisper.cpp bins, CTranslate2 dirs, audio."""
import struct

import numpy as np


def shown(name, limit=60):
    """A name read from a file, as an error message may quote it: printable and short (in a
    corrupt file it is garbage, and could break the one-line message)."""
    text = name if name.isprintable() else repr(name)[1:-1]
    text = text if len(text) <= limit else text[:limit] + "..."
    return f"'{text}'"


def not_a_download(path, head):
    """The sentence for a file that is no model at all but what a failed download leaves (a
    git-lfs pointer, a web page), from its first bytes; None for anything else."""
    text = head.lstrip().lower()
    if text.startswith(b"version https://git-lfs"):
        return (f"{path} is a git-lfs pointer, not a model: fetch the real file "
                "(git lfs pull) or download it again.")
    if text.startswith((b"<!doctype html", b"<html")):
        return (f"{path} is an HTML page, not a model: the download saved a web page "
                "(a login or error page); download the file itself.")
    return None


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


class Cursor:
    """A read position in a file's bytes `buf`. take(n) hands out the offset of the next n
    bytes; a length past the end (or below zero) raises `bad(pos, n)`, the reader's own error
    worded for its format."""

    def __init__(self, buf, bad):
        self.buf, self.pos, self.bad = buf, 0, bad

    def take(self, n):
        if n < 0 or self.pos + n > len(self.buf):
            raise self.bad(self.pos, n)
        start = self.pos
        self.pos += n
        return start

    def unpack(self, fmt):
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt)))

"""CTranslate2 `model.bin` files (the faster-whisper format): variables by name, memory-mapped.

Layout (little-endian): u32 version, string spec name, u32 spec revision, u32 variable count,
then per variable: name, u8 ndim, u32 dims, u8 dtype, u32 byte count, data; then u32 alias
count and (alias, target) name pairs. A string is a u16 length (counting its NUL) + bytes.
"""
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import Cursor, map_file, not_a_download, shown

DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
DTYPE_NAMES = {0: "float32", 1: "int8", 2: "int16", 3: "int32", 4: "float16", 5: "bfloat16"}


class CT2Error(ValueError):
    """The file is not a CTranslate2 model this reader understands."""


@dataclass
class CT2Model:
    path: Path
    version: int
    spec: str
    revision: int
    variables: dict = field(default_factory=dict)   # name -> np.ndarray (views into the map)
    aliases: dict = field(default_factory=dict)     # alias name -> target name

    def __getitem__(self, name):
        found = self.variables.get(self.aliases.get(name, name))
        if found is None:
            raise CT2Error(f"{self.path} lacks the variable {name} that a {self.spec or 'model'} "
                           "has; the file is incomplete or from another converter.")
        return found

    def __contains__(self, name):
        return self.aliases.get(name, name) in self.variables


def _string(cur):
    """A u16 length (counting its NUL), then the bytes."""
    (n,) = cur.unpack("<H")
    raw = bytes(cur.buf[cur.take(n):cur.pos])
    return raw.rstrip(b"\0").decode("utf-8", "replace")


def _diagnose(path, head):
    if (said := not_a_download(path, head)) is not None:
        return said
    if head[:4] == b"GGUF":
        return (f"{path} is a GGUF file, not a CTranslate2 model.bin: a GGUF language model runs with "
                "`dasllama generate`.")
    if head[:4] in (b"lmgg", b"tjgg"):
        return f"{path} is a ggml file, not a CTranslate2 model.bin: pass it as -m itself."
    return f"{path} is not a CTranslate2 model.bin (unexpected header)."


def read(path):
    """Read a CTranslate2 model.bin (or the model dir holding it); arrays map the file."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.bin"
    buf = map_file(path, CT2Error)
    cur = Cursor(buf, lambda pos, n: CT2Error(
        f"{path}: truncated CTranslate2 model (needs {pos + n} bytes, has {len(buf)}); "
        f"the download or concatenation is incomplete."))
    if len(buf) < 8:
        raise CT2Error(f"{path} is too short ({len(buf)} bytes) to be a CTranslate2 model; "
                       "download it again.")
    (version,) = cur.unpack("<I")
    if not 1 <= version <= 6:
        raise CT2Error(_diagnose(path, bytes(buf[:64])))
    spec = _string(cur) if version >= 2 else ""
    (revision,) = cur.unpack("<I") if version >= 3 else (1,)
    model = CT2Model(path, version, spec, revision)
    (count,) = cur.unpack("<I")
    for _ in range(count):
        name = _string(cur)
        (ndim,) = cur.unpack("<B")
        shape = cur.unpack(f"<{ndim}I") if ndim else ()
        (dtype,) = cur.unpack("<B")
        (nbytes,) = cur.unpack("<I")
        if dtype not in DTYPES:
            raise CT2Error(f"{path}: variable {shown(name)} has dtype "
                           f"{DTYPE_NAMES.get(dtype, dtype)}, which dasllama does not read.")
        start = cur.take(nbytes)
        if nbytes % np.dtype(DTYPES[dtype]).itemsize:
            raise CT2Error(f"{path}: variable {shown(name)} has {nbytes} bytes, not a whole number of "
                           f"{DTYPE_NAMES[dtype]} values; the file is corrupt.")
        arr = buf[start:start + nbytes].view(DTYPES[dtype])
        if arr.size != math.prod(shape) or (arr.size == 0 and any(shape)):
            # (an empty variable with a huge dimension beside its zero: numpy refuses the shape)
            raise CT2Error(f"{path}: variable {shown(name)} has {arr.size} values for shape {shape}; "
                           "the file is corrupt.")
        model.variables[name] = arr.reshape(shape)
    if version >= 5 and cur.pos < len(buf):
        (n_alias,) = cur.unpack("<I")
        for _ in range(n_alias):
            alias = _string(cur)
            model.aliases[alias] = _string(cur)
    return model

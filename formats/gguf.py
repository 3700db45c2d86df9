"""GGUF files, memory-mapped: metadata and tensors by their GGUF names.

Built on `gguf.constants` (value types, quant types and block sizes, key names). The header is
parsed here rather than by `gguf.GGUFReader`, which builds a numpy view per array element and
takes ~10 s to open a 262144-token vocabulary; this parser reads it in a fraction of a second.
Tensor data is never read up front: each tensor is a view into one read-only memory map.
"""
import mmap
import os
import struct
from dataclasses import dataclass

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGUF_MAGIC, GGMLQuantizationType, GGUFValueType

from . import not_a_download, shown
from .whisper_ggml import is_whisper_ggml

SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# gguf-py and llama.cpp write flat arrays or arrays of arrays; deeper nesting only comes from a
# corrupt or hostile file, and recursing into it would exhaust the Python stack
MAX_ARRAY_DEPTH = 8

_SCALAR = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H", GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.UINT64: "<Q", GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.FLOAT64: "<d",
    GGUFValueType.BOOL: "<?",
}
_NUMPY = {
    GGUFValueType.UINT8: np.uint8, GGUFValueType.INT8: np.int8,
    GGUFValueType.UINT16: np.uint16, GGUFValueType.INT16: np.int16,
    GGUFValueType.UINT32: np.uint32, GGUFValueType.INT32: np.int32,
    GGUFValueType.UINT64: np.uint64, GGUFValueType.INT64: np.int64,
    GGUFValueType.FLOAT32: np.float32, GGUFValueType.FLOAT64: np.float64,
    GGUFValueType.BOOL: np.bool_,
}


class GGUFError(ValueError):
    """A file that cannot be read as a GGUF model; the message is one sentence for the user."""


@dataclass(frozen=True)
class TensorInfo:
    name: str
    qtype: int             # GGMLQuantizationType value
    shape: tuple           # GGUF order: shape[0] is the contiguous (row) length, ne0
    offset: int            # absolute byte offset in the file
    nbytes: int

    @property
    def type_name(self):
        return GGMLQuantizationType(self.qtype).name

    @property
    def n_rows(self):
        n = 1
        for d in self.shape[1:]:
            n *= d
        return n


class GGUFFile:
    """An open GGUF file: `metadata` (key -> value), `tensors` (name -> TensorInfo), `data`."""

    def __init__(self, path, metadata, tensors, data, version):
        self.path = path
        self.metadata = metadata
        self.tensors = tensors
        self.data = data          # np.ndarray uint8 over the whole file (read-only memory map)
        self.version = version

    @property
    def architecture(self):
        return self.metadata.get("general.architecture")

    def get(self, key, default=None):
        return self.metadata.get(key, default)

    def require(self, key):
        if key not in self.metadata:
            raise GGUFError(f"{self.path}: the GGUF metadata lacks the required key '{key}'; "
                            "the file was written by an incomplete or foreign converter.")
        return self.metadata[key]

    def tensor(self, name):
        info = self.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.path}: the model lacks the tensor '{name}' that its "
                            f"architecture '{self.architecture}' needs.")
        return info

    def tensor_bytes(self, name):
        """The raw blocks of a tensor: a uint8 view into the memory map, no copy."""
        info = self.tensor(name)
        return self.data[info.offset:info.offset + info.nbytes]


def _diagnose_foreign(path, head):
    """Name what a non-GGUF file is, from its first bytes."""
    if (said := not_a_download(path, head)) is not None:
        return said
    if is_whisper_ggml(head):
        return (f"{path} is a whisper.cpp speech model, not a GGUF language model: transcribe "
                "with it (`dasllama transcribe -m`).")
    if b"WhisperSpec" in head[:32]:
        return (f"{path} is a faster-whisper (CTranslate2) speech model, not a GGUF language "
                "model: transcribe with its directory (`dasllama transcribe -m DIR`).")
    legacy = {b"tjgg": "GGJT", b"lmgg": "GGML", b"fmgg": "GGMF", b"algg": "GGLA"}
    if head[:4] in legacy:
        return (f"{path} is a pre-GGUF {legacy[head[:4]]} file (llama.cpp before August 2023 or "
                "a whisper.cpp model): convert it to GGUF with llama.cpp's convert scripts.")
    return f"{path} is not a GGUF file (it does not start with the 'GGUF' magic)."


class _Cursor:
    """Little-endian reads over a bytes-like buffer, with truncation diagnosed."""

    def __init__(self, buf, path):
        self.buf = buf
        self.pos = 0
        self.path = path

    def need(self, n):
        if self.pos + n > len(self.buf):
            raise GGUFError(f"{self.path} is truncated: its header ends after {len(self.buf)} "
                            "bytes; download the file again.")

    def count(self, what, min_item_bytes):
        """A u64 count of items of at least `min_item_bytes` each: one that could not fit in
        the rest of the file is corruption, not truncation (a re-download will not mend it)."""
        n = self.scalar("<Q")
        if n * min_item_bytes > len(self.buf) - self.pos:
            raise GGUFError(f"{self.path} is corrupt: it claims an impossible count of {n} {what} "
                            f"at byte {self.pos - 8}, more than the {len(self.buf)}-byte file can "
                            "hold; get the model from another source.")
        return n

    def scalar(self, fmt):
        size = struct.calcsize(fmt)
        self.need(size)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += size
        return value

    def string(self):
        n = self.count("string bytes", 1)
        s = bytes(self.buf[self.pos:self.pos + n]).decode("utf-8", errors="replace")
        self.pos += n
        return s

    def value(self, vtype, depth=0):
        if vtype == GGUFValueType.STRING:
            return self.string()
        if vtype == GGUFValueType.ARRAY:
            return self.array(depth + 1)
        if vtype not in _SCALAR:
            raise GGUFError(f"{self.path} has a metadata value of unknown type {vtype}; "
                            "the file is corrupt or from a newer GGUF writer.")
        return self.scalar(_SCALAR[vtype])

    def array(self, depth=1):
        if depth > MAX_ARRAY_DEPTH:
            raise GGUFError(f"{self.path} is corrupt: a metadata array nests more than "
                            f"{MAX_ARRAY_DEPTH} deep at byte {self.pos}.")
        try:
            etype = GGUFValueType(self.scalar("<I"))
        except ValueError:
            raise GGUFError(f"{self.path} has a metadata array of unknown type; the file is corrupt.") from None
        if etype in _NUMPY:
            dtype = np.dtype(_NUMPY[etype]).newbyteorder("<")
            count = self.count("array items", dtype.itemsize)
            arr = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos).copy()
            self.pos += count * dtype.itemsize
            return arr
        if etype == GGUFValueType.STRING:
            return self.strings(self.count("strings", 8))
        count = self.count("arrays", 12)    # an array is at least its type and its count
        return [self.value(etype, depth) for _ in range(count)]

    def strings(self, count):
        buf, pos, out = self.buf, self.pos, []
        unpack = struct.unpack_from
        end = len(buf)
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self.need(8)
            (n,) = unpack("<Q", buf, pos)
            pos += 8
            if pos + n > end:
                self.pos = pos - 8
                self.count("string bytes", 1)
            out.append(str(buf[pos:pos + n], "utf-8", "replace"))
            pos += n
        self.pos = pos
        return out


def _alignment(path, metadata):
    """general.alignment, which llama.cpp requires to be a power of two."""
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
            or value <= 0 or value & (value - 1):
        raise GGUFError(f"{path} is corrupt: general.alignment is {value!r}, not a power of two.")
    return int(value)


def open_gguf(path):
    """Open and validate a GGUF file; raises GGUFError with a one-sentence diagnosis."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise GGUFError(f"{path} does not exist.")
    if os.path.isdir(path):
        raise GGUFError(f"{path} is a directory, not a GGUF file.")
    if not os.path.isfile(path):
        raise GGUFError(f"{path} is not a regular file (a device or a pipe?): pass a GGUF model file.")
    size = os.path.getsize(path)
    if size == 0:
        raise GGUFError(f"{path} is empty (0 bytes): download the model again.")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
            if len(head) < 4 or struct.unpack_from("<I", head.ljust(4, b"\0"))[0] != GGUF_MAGIC:
                raise GGUFError(_diagnose_foreign(path, head))
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as e:
        raise GGUFError(f"{path} cannot be read ({e.strerror or e}): check its permissions.") from None
    buf = memoryview(mm)
    cur = _Cursor(buf, path)
    cur.pos = 4
    version = cur.scalar("<I")
    if version not in SUPPORTED_VERSIONS:
        raise GGUFError(f"{path} is GGUF version {version}; dasllama reads versions "
                        f"{', '.join(map(str, SUPPORTED_VERSIONS))}: re-convert it with a current llama.cpp.")
    # a tensor entry is at least 24 bytes (name length, n_dims, type, offset), a key/value 12
    n_tensors = cur.count("tensors", 24)
    n_kv = cur.count("metadata keys", 12)

    metadata = {}
    for _ in range(n_kv):
        key = cur.string()
        try:
            vtype = GGUFValueType(cur.scalar("<I"))
        except ValueError:
            raise GGUFError(f"{path}: metadata key {shown(key)} has an unknown value type; "
                            "the file is corrupt.") from None
        metadata[key] = cur.value(vtype)

    infos = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.scalar("<I")
        if n_dims > 4:
            raise GGUFError(f"{path}: tensor {shown(name)} claims {n_dims} dimensions; the file is corrupt.")
        shape = tuple(cur.scalar("<Q") for _ in range(n_dims))
        qtype = cur.scalar("<I")
        rel = cur.scalar("<Q")
        infos.append((name, shape, qtype, rel))

    alignment = _alignment(path, metadata)
    data_start = (cur.pos + alignment - 1) // alignment * alignment
    tensors = {}
    for name, shape, qtype, rel in infos:
        try:
            GGMLQuantizationType(qtype)
        except ValueError:
            raise GGUFError(f"{path}: tensor {shown(name)} has quant type id {qtype}, unknown to this "
                            "version of dasllama and gguf; upgrade both, or requantize the model.") from None
        if GGMLQuantizationType(qtype) not in GGML_QUANT_SIZES:
            raise GGUFError(f"{path}: tensor {shown(name)} has the retired quant type "
                            f"{GGMLQuantizationType(qtype).name}; requantize the model with a current llama.cpp.")
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        n_elem = 1
        for d in shape:
            n_elem *= d
        if shape and shape[0] % block:
            raise GGUFError(f"{path}: tensor {shown(name)} rows of {shape[0]} are not a whole number "
                            f"of {GGMLQuantizationType(qtype).name} blocks; the file is corrupt.")
        nbytes = n_elem // block * type_size
        offset = data_start + rel
        if rel % alignment:
            raise GGUFError(f"{path} is corrupt: tensor {shown(name)} starts at offset {rel}, not a "
                            f"multiple of the file's alignment {alignment}.")
        if offset + nbytes > size:
            raise GGUFError(f"{path} is truncated or corrupt: tensor {shown(name)} lies outside the file "
                            f"(ends at byte {offset + nbytes}, file has {size}); download it again.")
        tensors[name] = TensorInfo(name, qtype, shape, offset, nbytes)

    data = np.frombuffer(mm, dtype=np.uint8)
    return GGUFFile(path, metadata, tensors, data, version)

"""whisper.cpp's legacy ggml model files (`ggml-*.bin`): read, memory-mapped, and write.

Layout (little-endian i32s): magic 0x67676d6c; n_vocab, n_audio_ctx, n_audio_state,
n_audio_head, n_audio_layer, n_text_ctx, n_text_state, n_text_head, n_text_layer, n_mels,
ftype; mel filters (n_mel, n_fft, then n_mel*n_fft f32); the BPE vocabulary (count, then per
token its length and bytes); then tensors until the end: n_dims, name length, ggml type,
ne[0..n_dims) (ne0 is the contiguous length), name, data.
"""
import math
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from . import Cursor, map_file, not_a_download, shown

MAGIC = 0x67676D6C
HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
           "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
# whisper.cpp stores ftype * 1000 + ftype; the quantization version sits in the thousands.
QNT_VERSION_FACTOR = 1000
F32, F16 = GGMLQuantizationType.F32, GGMLQuantizationType.F16


class GGMLError(ValueError):
    """A file that cannot be read as a whisper.cpp model; the message is one sentence."""


@dataclass(frozen=True)
class Tensor:
    name: str
    qtype: int       # GGMLQuantizationType value
    ne: tuple        # ggml order: ne[0] is the row length
    data: np.ndarray  # f32/f16 array shaped reversed(ne), or raw uint8 (n_rows, row bytes)

    @property
    def n_rows(self):
        return int(np.prod(self.ne[1:], dtype=np.int64))


@dataclass
class WhisperGGML:
    path: Path
    hparams: dict
    mel_filters: np.ndarray            # (n_mel, n_fft) f32
    tokens: list                       # bytes of each BPE token
    tensors: dict = field(default_factory=dict)


def _diagnose(path, head):
    if (said := not_a_download(path, head)) is not None:
        return said
    if head.startswith(b"GGUF"):
        return (f"{path} is a GGUF file, not a whisper.cpp ggml .bin: a GGUF language model runs with "
                "`dasllama generate`.")
    if head.startswith(b"PK"):
        return f"{path} is a zip archive (a PyTorch checkpoint?), not a whisper.cpp ggml .bin."
    if head[:4] == MAGIC.to_bytes(4, "little"):
        return (f"{path} is too short for a whisper.cpp model ({len(head)} bytes): it is "
                "truncated; download it again.")
    return f"{path} is not a whisper.cpp ggml model (it does not start with the ggml magic)."


def is_whisper_ggml(head):
    """Whether the first 64 bytes of a file are a whisper.cpp model's: the ggml magic, then
    after the 11 hyper-parameters a mel filter table of 80 or 128 filters of 201 bins."""
    if len(head) < 56 or head[:4] != MAGIC.to_bytes(4, "little"):
        return False
    n_mel, n_fft = struct.unpack_from("<2i", head, 48)
    return n_mel in (80, 128) and n_fft == 201


def _cursor(buf, path):
    def bad(pos, n):
        if n < 0:
            return GGMLError(f"{path} is corrupt: a length of {n} at byte {pos}.")
        return GGMLError(f"{path} is truncated: the whisper.cpp model ends at byte {len(buf)}, "
                         f"data runs on to byte {pos + n}; download it again.")
    return Cursor(buf, bad)


def _ints(cur, n):
    return cur.unpack(f"<{n}i")


def read(path):
    """Read a whisper.cpp ggml .bin; tensor data are views into one read-only memory map."""
    path = Path(path)
    if path.is_dir():
        raise GGMLError(f"{path} is a directory, not a whisper.cpp ggml .bin.")
    buf = map_file(path, GGMLError)
    if len(buf) < 56 or struct.unpack_from("<I", buf, 0)[0] != MAGIC:
        raise GGMLError(_diagnose(path, bytes(buf[:64])))
    cur = _cursor(buf, path)
    cur.take(4)
    hparams = dict(zip(HPARAMS, _ints(cur, len(HPARAMS))))
    n_mel, n_fft = _ints(cur, 2)
    start = cur.take(4 * n_mel * n_fft)
    filters = buf[start:cur.pos].view(np.float32).reshape(n_mel, n_fft)
    (n_tokens,) = _ints(cur, 1)
    tokens = []
    for _ in range(n_tokens):
        (length,) = _ints(cur, 1)
        start = cur.take(length)
        tokens.append(bytes(buf[start:cur.pos]))
    model = WhisperGGML(path, hparams, filters, tokens)
    while cur.pos < len(buf):
        n_dims, name_len, qtype = _ints(cur, 3)
        if not 0 < n_dims <= 4:
            raise GGMLError(f"{path}: tensor with {n_dims} dims at byte {cur.pos}.")
        ne = _ints(cur, n_dims)
        if min(ne) < 1:
            raise GGMLError(f"{path}: a tensor at byte {cur.pos} claims dimensions {ne}; the "
                            "file is corrupt.")
        start = cur.take(name_len)
        name = bytes(buf[start:cur.pos]).decode("utf-8", "replace")
        model.tensors[name] = _tensor(cur, path, name, qtype, ne)
    return model


def _tensor(cur, path, name, qtype, ne):
    try:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
    except (ValueError, KeyError):
        raise GGMLError(f"{path}: tensor {shown(name)} has unknown ggml type {qtype}; the "
                        "file is corrupt or newer than dasllama.") from None
    if ne[0] % block:
        raise GGMLError(f"{path}: tensor {shown(name)} rows of {ne[0]} are not whole blocks; "
                        "the file is corrupt.")
    n_rows = math.prod(ne[1:])
    row_bytes = ne[0] // block * block_bytes
    start = cur.take(n_rows * row_bytes)
    raw = cur.buf[start:cur.pos]
    shape = tuple(reversed(ne))
    if qtype == F32:
        return Tensor(name, qtype, tuple(ne), raw.view(np.float32).reshape(shape))
    if qtype == F16:
        return Tensor(name, qtype, tuple(ne), raw.view(np.float16).reshape(shape))
    return Tensor(name, qtype, tuple(ne), raw.reshape(n_rows, row_bytes))


def write(path, hparams, mel_filters, tokens, tensors):
    """Write a ggml .bin. tensors: (name, array) pairs; an array is f32 or f16 with numpy
    shape reversed(ne), or a `Tensor` holding quantized rows as they go to the file."""
    path = Path(path)
    # a name of this process's own: two processes converting one model at once must not
    # write into one file (the loser's reader would map a file still being rewritten)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.part")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<I", MAGIC))
        f.write(struct.pack(f"<{len(HPARAMS)}i", *(hparams[k] for k in HPARAMS)))
        mel_filters = np.ascontiguousarray(mel_filters, dtype="<f4")
        f.write(struct.pack("<2i", *mel_filters.shape))
        f.write(mel_filters.tobytes())
        f.write(struct.pack("<i", len(tokens)))
        for token in tokens:
            f.write(struct.pack("<i", len(token)))
            f.write(token)
        for name, array in tensors:
            if isinstance(array, Tensor):
                qtype, ne, data = array.qtype, array.ne, np.ascontiguousarray(array.data)
            else:
                qtype = {np.dtype(np.float32): F32, np.dtype(np.float16): F16}[array.dtype]
                ne = tuple(reversed(array.shape))
                data = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<"))
            encoded = name.encode()
            f.write(struct.pack("<3i", len(ne), len(encoded), qtype))
            f.write(struct.pack(f"<{len(ne)}i", *ne))
            f.write(encoded)
            f.write(data.tobytes())
    tmp.replace(path)
    return path

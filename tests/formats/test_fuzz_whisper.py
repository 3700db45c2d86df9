"""A bounded fuzz of the Whisper readers (whisper.cpp ggml .bin, CTranslate2 model.bin): mutants
of tiny valid files are read or refused with the reader's own error, never another exception."""
import random
import struct

import numpy as np
import pytest

from dasllama.formats import ct2, whisper_ggml
from tests.gguf_mutants import mutate

N_MUTANTS = 2000
HPARAMS = dict(n_vocab=51864, n_audio_ctx=4, n_audio_state=8, n_audio_head=2, n_audio_layer=1,
               n_text_ctx=4, n_text_state=8, n_text_head=2, n_text_layer=1, n_mels=80, ftype=1)


def _ct2_string(text):
    data = text.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


def _ct2_variable(name, arr, dtype_code):
    return (_ct2_string(name) + struct.pack("<B", arr.ndim) + struct.pack(f"<{arr.ndim}I", *arr.shape)
            + struct.pack("<BI", dtype_code, arr.nbytes) + arr.tobytes())


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper-seeds")
    ggml = whisper_ggml.write(root / "seed.bin", HPARAMS, np.zeros((80, 201), np.float32),
                              [b"a", b"bc"], [("x.weight", np.ones((4, 8), np.float16)),
                                              ("y.bias", np.ones(8, np.float32))])
    ct2_bytes = (struct.pack("<I", 6) + _ct2_string("WhisperSpec") + struct.pack("<II", 3, 2)
                 + _ct2_variable("a/w", np.ones((2, 3), np.float32), 0)
                 + _ct2_variable("b", np.ones(4, np.float16), 4)
                 + struct.pack("<I", 1) + _ct2_string("c") + _ct2_string("a/w"))
    return {"ggml": (ggml.read_bytes(), whisper_ggml.read, whisper_ggml.GGMLError),
            "ct2": (ct2_bytes, ct2.read, ct2.CT2Error)}


@pytest.mark.parametrize("kind", ["ggml", "ct2"])
def test_mutants_are_read_or_refused(seeds, kind, tmp_path):
    data, read, error = seeds[kind]
    path = tmp_path / "model.bin"
    path.write_bytes(data)
    read(path)                                    # the seed itself is valid
    rnd = random.Random(kind)
    for i in range(N_MUTANTS):
        mutant = mutate(data, rnd)
        path.write_bytes(mutant)
        try:
            read(path)
        except error as e:
            assert "\n" not in str(e), (i, str(e))
        except Exception as e:  # noqa: BLE001 -- the point of the test
            pytest.fail(f"{kind} mutant {i} ({len(mutant)} bytes) raised {type(e).__name__}: {e}")

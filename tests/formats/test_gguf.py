"""GGUF reading: tensors and metadata as gguf-py sees them, and a diagnosis for each bad file."""
import struct

import gguf
import numpy as np
import pytest

from dasllama.formats.gguf import GGUFError, open_gguf


@pytest.fixture(scope="module")
def small_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "small.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_string("general.name", "tiny")
    w.add_array("tokenizer.ggml.tokens", ["a", "bé", "漢字"])
    w.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0])
    rng = np.random.default_rng(0)
    w.add_tensor("a.weight", rng.standard_normal((3, 64)).astype(np.float32))
    q = gguf.quants.quantize(rng.standard_normal((2, 64)).astype(np.float32), gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("b.weight", q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_matches_gguf_reader(small_gguf):
    g = open_gguf(small_gguf)
    r = gguf.GGUFReader(str(small_gguf))
    assert g.architecture == "llama"
    assert g.metadata["tokenizer.ggml.tokens"] == ["a", "bé", "漢字"]
    np.testing.assert_array_equal(g.metadata["tokenizer.ggml.scores"], [0.5, -1.0, 2.0])
    for t in r.tensors:
        info = g.tensors[t.name]
        assert info.qtype == t.tensor_type and list(info.shape) == list(t.shape)
        np.testing.assert_array_equal(g.tensor_bytes(t.name), np.asarray(t.data).view(np.uint8).reshape(-1))


def _expect(path, *words):
    with pytest.raises(GGUFError) as err:
        open_gguf(path)
    msg = str(err.value)
    for w in words:
        assert w in msg, msg
    return msg


def test_missing_and_directory(tmp_path):
    _expect(tmp_path / "nope.gguf", "does not exist")
    _expect(tmp_path, "directory")


def test_empty(tmp_path):
    p = tmp_path / "empty.gguf"
    p.write_bytes(b"")
    _expect(p, "empty")


@pytest.mark.parametrize("head, words", [
    (b"version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n", ["git-lfs pointer"]),
    (b"<!DOCTYPE html><html><body>Sign in</body></html>", ["HTML page"]),
    (struct.pack("<I", 0x67676A74) + b"\0" * 60, ["pre-GGUF", "GGJT"]),
    (struct.pack("<I", 0x67676D6C) + b"\0" * 60, ["pre-GGUF", "GGML"]),
    (b"PK\x03\x04" + b"\0" * 60, ["not a GGUF file"]),
])
def test_foreign_files(tmp_path, head, words):
    p = tmp_path / "bad.gguf"
    p.write_bytes(head)
    _expect(p, *words)


def test_unsupported_version(tmp_path):
    p = tmp_path / "v1.gguf"
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 1, 0, 0))
    _expect(p, "version 1")


def test_truncated_header(small_gguf, tmp_path):
    data = small_gguf.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:60])
    _expect(p, "truncated")


def test_truncated_tensor_data(small_gguf, tmp_path):
    data = small_gguf.read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:-100])
    _expect(p, "truncated", "b.weight")


def test_unknown_quant_type(small_gguf, tmp_path):
    data = bytearray(small_gguf.read_bytes())
    # the type id follows the tensor's name, n_dims and dims in the header
    name = b"b.weight"
    at = data.index(name) + len(name) + 4 + 2 * 8
    data[at:at + 4] = struct.pack("<I", 250)
    p = tmp_path / "unknown.gguf"
    p.write_bytes(bytes(data))
    _expect(p, "quant type id 250")


def test_missing_key_and_tensor(small_gguf):
    g = open_gguf(small_gguf)
    with pytest.raises(GGUFError, match="llama.embedding_length"):
        g.require("llama.embedding_length")
    with pytest.raises(GGUFError, match="output.weight"):
        g.tensor("output.weight")

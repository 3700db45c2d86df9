"""Mutated GGUF files for fuzzing the reader: a seed corpus of tiny valid files written by
gguf-py (every value type, nested arrays, strings, tensors of several quant types, a set
alignment) and a mutator that knows where GGUF keeps its counts and lengths (u64s)."""
import random
import struct

import gguf
import numpy as np

# values that break parsers: zero, one, sign bits, all ones, sizes just past any file
INTERESTING_U64 = (0, 1, 2, 3, 7, 31, 33, 255, 0x7F, 0x80, 0xFFFF, 0x7FFFFFFF, 0x80000000,
                   0xFFFFFFFF, 1 << 32, 1 << 40, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1)


def seed_corpus(tmp_dir):
    """[bytes] of small valid GGUF files."""
    rng = np.random.default_rng(0)
    seeds = []
    for i, (alignment, qtype) in enumerate([(None, gguf.GGMLQuantizationType.F32),
                                            (64, gguf.GGMLQuantizationType.Q8_0),
                                            (16, gguf.GGMLQuantizationType.F16),
                                            (None, gguf.GGMLQuantizationType.Q4_0)]):
        path = tmp_dir / f"seed{i}.gguf"
        w = gguf.GGUFWriter(str(path), "llama")
        if alignment:
            w.add_custom_alignment(alignment)
        w.add_block_count(1)
        w.add_context_length(64)
        w.add_string("general.name", "seed é")
        w.add_bool("general.flag", True)
        w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
        w.add_float64("seed.f64", 2.5)
        w.add_int8("seed.i8", -3)
        w.add_uint16("seed.u16", 7)
        w.add_int64("seed.i64", -(1 << 40))
        w.add_array("tokenizer.ggml.tokens", ["<s>", "a", "bé", "漢字"])
        w.add_array("tokenizer.ggml.scores", [0.5, -1.0, 2.0, 0.0])
        w.add_array("seed.nested", [[1, 2], [3]])
        w.add_array("seed.strings_nested", [["x", "y"], ["z"]])
        data = rng.standard_normal((2, 64)).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor("a.weight", data)
        else:
            q = gguf.quants.quantize(data, qtype)
            w.add_tensor("a.weight", q, raw_shape=q.shape, raw_dtype=qtype)
        w.add_tensor("norm.weight", rng.standard_normal(64).astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        seeds.append(path.read_bytes())
    return seeds


def mutate(data, rnd):
    """One to four random edits of `data` (bytes) -> bytes."""
    buf = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        if not buf:
            break
        op = rnd.randrange(7)
        pos = rnd.randrange(len(buf))
        if op == 0:                                   # flip a bit
            buf[pos] ^= 1 << rnd.randrange(8)
        elif op == 1:                                 # a random byte
            buf[pos] = rnd.randrange(256)
        elif op == 2:                                 # an interesting u64 (a count or a length)
            at = pos - pos % 4
            buf[at:at + 8] = struct.pack("<Q", rnd.choice(INTERESTING_U64))
        elif op == 3:                                 # an interesting u32 (a type or n_dims)
            at = pos - pos % 4
            buf[at:at + 4] = struct.pack("<I", rnd.choice(INTERESTING_U64) & 0xFFFFFFFF)
        elif op == 4:                                 # truncate
            del buf[pos:]
        elif op == 5:                                 # delete a span
            del buf[pos:pos + rnd.randint(1, 64)]
        else:                                         # duplicate a span
            span = bytes(buf[pos:pos + rnd.randint(1, 64)])
            at = rnd.randrange(len(buf))
            buf[at:at] = span
    return bytes(buf)


def mutants(seeds, n, seed=0):
    """n mutated files, reproducible from `seed`."""
    rnd = random.Random(seed)
    for _ in range(n):
        yield mutate(rnd.choice(seeds), rnd)

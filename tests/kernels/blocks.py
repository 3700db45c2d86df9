"""Random but valid weight blocks of every GGUF type, for kernel tests.

Random bytes cover every quant bit pattern; the f16 scale fields are overwritten with sane
values so no block decodes to inf/NaN.
"""
import numpy as np
from gguf import quants as gq
from gguf.constants import GGMLQuantizationType

from dasllama.kernels import quants as Q


def random_weights(qtype, n_rows, n_cols, seed=0):
    """(n_rows * row_bytes,) uint8: a valid random matrix of `qtype`."""
    rng = np.random.default_rng(seed)
    if qtype in (Q.F32, Q.F16, Q.BF16):
        x = rng.standard_normal(n_rows * n_cols).astype(np.float32)
        if qtype == Q.F32:
            return x.view(np.uint8)
        return gq.quantize(x, GGMLQuantizationType(qtype)).reshape(-1).view(np.uint8)
    n_blocks = n_rows * n_cols // int(Q.BLOCK_ELEMS[qtype])
    blocks = rng.integers(0, 256, (n_blocks, int(Q.BLOCK_BYTES[qtype])), dtype=np.uint8)
    for off in Q.F16_FIELDS[qtype]:
        d = rng.uniform(-0.05, 0.05, n_blocks).astype(np.float16)
        blocks[:, off:off + 2] = d.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def gguf_dequantize(qtype, w, n_rows):
    return gq.dequantize(w.reshape(n_rows, -1), GGMLQuantizationType(qtype))

"""The weight formats, one module each (as gguf-py's quants.py has one class per type): its
block layout (BLOCK_ELEMS, BLOCK_BYTES, F16_FIELDS), the reference dequantiser the tests hold
it to (REFERENCE, a gguf.quants class: never reimplemented here), what its integer dot
multiplies (`quant`, for K-quants `scale`), the activation format and the fold of llama.cpp's
dot (ACT, FOLD), and `dequantize_block`.

FORMATS is the registry every per-format table and dispatch is generated from (`table`,
`dispatch`): adding a format is its module here and its line in FORMATS.
"""
import numpy as np
from numba import njit

from . import bf16, f16, f32, q2_k, q3_k, q4_0, q4_1, q4_k, q5_0, q5_1, q5_k, q6_k, q8_0
from .common import JIT

# in the order of gguf-py's GGMLQuantizationType ids
FORMATS = (f32, f16, q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, bf16)
BY_ID = {fmt.ID: fmt for fmt in FORMATS}
N_IDS = 64          # ids below this index the tables (dasllama's own copy layouts are 56..63)


def name_of(fmt):
    """"Q4_K" for the module q4_k."""
    return fmt.__name__.rsplit(".", 1)[1].upper()


def table(attr, default=0, dtype=np.int64):
    """(N_IDS,) array: each format's `attr` at its id, `default` elsewhere; numba code indexes
    it by qtype (a global array is a compile-time constant)."""
    out = np.full(N_IDS, default, dtype)
    for fmt in FORMATS:
        out[fmt.ID] = getattr(fmt, attr, default)
    return out


def dispatch(name, params, call, caller, doc="", formats=FORMATS, default="None"):
    """An @njit(inline="always") `name(qtype, *params)` that returns `call` (a format's
    function name and its arguments: "quant(w, p, e)") of the format whose id is qtype, for
    every format of `formats` that has that function; `default` for the others. `doc`: its
    docstring.

    numba compiles per-format code only under a compile-time branch, so the dispatch is an
    if-chain; this writes it from the registry rather than by hand. The source is compiled as
    part of the module whose globals() are `caller`: numba's disk cache keys it on that
    module's file, whose hash (kernels/__init__.py) names the cache folder."""
    fn = call.split("(", 1)[0]
    with_fn = [fmt for fmt in formats if hasattr(fmt, fn)]
    lines = [f"def {name}(qtype, {', '.join(params)}):", f'    """{doc}"""']
    for i, fmt in enumerate(with_fn):
        lines += [f"    {'if' if i == 0 else 'elif'} qtype == {fmt.ID}:   # {name_of(fmt)}",
                  f"        return _{fmt.ID}.{call}"]
    lines.append(f"    return {default}")
    made = compiled(lines, {f"_{fmt.ID}": fmt for fmt in with_fn}, caller)
    return njit(**JIT, inline="always")(made[name])


def compiled(lines, names, caller):
    """The namespace after running the Python source `lines` with globals `names` (and numpy
    as np), compiled as part of the module whose globals() are `caller` (see dispatch)."""
    namespace = dict(names, np=np, __name__=caller["__name__"])
    exec(compile("\n".join(lines) + "\n", caller["__file__"], "exec"), namespace)
    return namespace

"""Quantised matmul: out[t, r] = dot(W[r], x[t]) for GGUF weights as they lie in the file.

One template builds every kernel: `build_kernel(qtype, variant)` takes a tile plan from
VARIANTS (rows per tile, tokens per tile, and the block-dot engine: "ref" plain loops, or
"simd" LLVM vector IR from simd.py) and returns an @njit(parallel=True) kernel with prange
over row tiles. All integer sums are exact and every engine folds them as ggml does (see
dots.py), so all variants of one format give bit-identical results: the tuner can race them
freely, and tests assert equality with the plain reference.

`matmul` dispatches on qtype and phase (one token: decode, more: prefill) to the active
variant, ACTIVE[qtype, phase], as sidecar.py resolves it (pin, tuning sidecar, CPU profile,
default), with per-shape winners where the sidecar has them; it is numba-callable from
inside a compiled decode step. `matmul_for(qtypes)` is the same dispatch over the formats
(and copy layouts) of one model only: a step compiled against it compiles those formats'
kernels and no others (gemma3 holds 5 of the registry's 13, and a cold start spent most of
its matmul seconds on the other 8).
`set_active` swaps a variant and rebuilds `matmul` (do it before compiling callers, which
freeze the dispatcher they saw).

Importing this module reads nothing and builds nothing: ACTIVE (which reads the pin, the
sidecar and the profile) and `matmul` are made on first use, when a caller asks for either
(`from .matmul import matmul` in the compiled forward step, or a first matmul_f32).
"""
import warnings

import numpy as np
import numba
from numba import njit

from . import formats, sidecar, simd, rowgroups
from .actq import act_buffers, act_kind, quantize_act
from .dots import PATH_VEC, dot_ref, gemm_tokens
from .quants import BLOCK_ELEMS, JIT, SUPPORTED, dequantize, dequantize_row, row_bytes, type_name

__all__ = ["act_kind", "act_buffers", "quantize_act", "matmul", "matmul_f32", "dequantize",
           "dequantize_row", "VARIANTS", "ACTIVE", "PHASES", "build_kernel", "set_active", "matmul_ref", "matmul_for",
           "fused_for", "rows_for"]

# Tile plans, one list per format; the first a phase offers is its default until a tuner says
# otherwise.
#   rows/tokens: register tile (rows x tokens share each weight/activation load); rows1: the
#     rows x 1 tile of single tokens (all of decode, the leftover tokens of a batch)
#   engine: "ref" plain numba loops (dots.py), "simd" vector IR (simd.py)
#   phases: the phases that offer it (simd.variants; absent: both)
_REF = [("ref", dict(engine="ref", rows=1, tokens=1))]
VARIANTS = {q: list(_REF) for q in SUPPORTED}
for _q in simd.FORMATS:
    VARIANTS[_q] = simd.variants(_q) + VARIANTS[_q]
PHASES = sidecar.PHASES


def _resolve_active():
    """{(qtype, phase): variant} and {(qtype, phase, rows, cols): variant} overrides: a pin,
    this machine's tuning sidecar, a shipped CPU profile, else the first of VARIANTS."""
    choices, notes = sidecar.resolve(VARIANTS)
    for note in notes:
        warnings.warn(note, sidecar.SidecarWarning, stacklevel=2)
    return {key: choice.variant for key, choice in choices.items()}


_active = None      # ACTIVE, once something asks for it
_matmul = None      # matmul, likewise
_for_set = {}       # frozenset of qtypes -> its matmul (matmul_for)
_fused_for_set = {}  # (qtypes, fused qtypes) -> its fused decode dispatch (fused_for)
_rows_for_set = {}  # qtypes -> its rows dispatch (rows_for)
_quantizers = {}    # activation kind -> quantize_act fixed to it (quantizer_for)


def _active_choices():
    global _active
    if _active is None:
        _active = _resolve_active()
    return _active


def _dispatch():
    global _matmul
    if _matmul is None:
        _matmul = _build_matmul()
    return _matmul


def __getattr__(name):
    """ACTIVE and matmul, built on first use (PEP 562)."""
    if name == "ACTIVE":
        return _active_choices()
    if name == "matmul":
        return _dispatch()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_built = {}


def build_kernel(qtype, name):
    """The @njit(parallel=True) kernel(w, R, C, xq, xd, xa, xf, T, out) of one variant; variants
    with one plan (a decode variant and the prefill plan it is built on) share one kernel."""
    params = {k: v for k, v in dict(VARIANTS[qtype])[name].items() if k != "phases"}
    key = (qtype, tuple(sorted(params.items())))
    if key not in _built:
        if params["engine"] == "ref":
            _built[key] = _make_ref_kernel(qtype, params["rows"], params["tokens"])
        else:
            _built[key] = simd.make_kernel(qtype, **{k: v for k, v in params.items() if k != "engine"})
    return _built[key]


def _make_ref_kernel(qtype, rows, tokens):
    @njit(**JIT, parallel=True)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        rb = row_bytes(qtype, n_cols)
        n_gemm, path = gemm_tokens(qtype, n_rows, n_cols, n_tokens)
        for tile in numba.prange((n_rows + rows - 1) // rows):
            r0 = tile * rows
            r1 = min(n_rows, r0 + rows)
            for t0 in range(0, n_tokens, tokens):
                for r in range(r0, r1):
                    for t in range(t0, min(n_tokens, t0 + tokens)):
                        out[t, r] = dot_ref(qtype, w, r * rb, n_cols, xq[t], xd[t], xa[t], xf[t],
                                            path if t < n_gemm else PATH_VEC)
    return kernel


@njit(**JIT, parallel=True)
def matmul_ref(qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
    """The plain reference: one dot_ref per (row, token)."""
    rb = row_bytes(qtype, n_cols)
    n_gemm, path = gemm_tokens(qtype, n_rows, n_cols, n_tokens)
    for r in numba.prange(n_rows):
        for t in range(n_tokens):
            out[t, r] = dot_ref(qtype, w, r * rb, n_cols, xq[t], xd[t], xa[t], xf[t],
                                path if t < n_gemm else PATH_VEC)


MAX_SHAPE_KERNELS = 4


def shape_kernel(qtype, phase, chosen, build):
    """kernel(w, R, C, xq, xd, xa, xf, T, out) for one format and phase: the chosen variant's
    own kernel, or, where some shapes have a winner of their own, a small dispatcher on
    (rows, cols) over at most MAX_SHAPE_KERNELS variants."""
    names = [chosen[qtype, phase]]
    rows = []
    for key, variant in sorted(chosen.items(), key=str):
        if len(key) == 4 and key[:2] == (qtype, phase) and variant != names[0]:
            if variant not in names and len(names) < MAX_SHAPE_KERNELS:
                names.append(variant)
            if variant in names:
                rows.append((key[2], key[3], names.index(variant)))
    if not rows:
        return build(qtype, names[0])

    k0, k1, k2, k3 = [build(qtype, n) for n in (names + names[:1] * MAX_SHAPE_KERNELS)[:MAX_SHAPE_KERNELS]]
    table = np.array(rows, np.int64)   # (n, 3): rows, cols, kernel slot

    @njit(**JIT)
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        slot = 0
        for i in range(table.shape[0]):
            if table[i, 0] == n_rows and table[i, 1] == n_cols:
                slot = table[i, 2]
        if slot == 0:
            k0(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif slot == 1:
            k1(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        elif slot == 2:
            k2(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        else:
            k3(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    return kernel


def _all_qtypes():
    """Every qtype the full `matmul` dispatches: each format's id and each copy layout."""
    return frozenset([fmt.ID for fmt in formats.FORMATS] + list(rowgroups.LAYOUT_OF.values()))


def _copy_layouts(qtypes):
    """(layout, the layout whose kernels serve it) for each copy layout in `qtypes`: itself, or
    where this CPU does not run the 16-row copies (none is made in their layouts) the 8-row
    one of the same format, whose kernels their names then stand for."""
    for (source, name), layout in rowgroups.LAYOUT_OF.items():
        if layout in qtypes:
            yield layout, (layout if name != "x16" or rowgroups.HAS_X16 else rowgroups.LAYOUT_OF[source, "x8"])


def _active_kernels(qtypes):
    """{global name: kernel} of what the dispatch over `qtypes` calls: each copy layout's kernel
    (the 16-row copies' where this CPU runs them; elsewhere no copy is made in their layouts,
    and their names stand for the 8-row kernels, so nothing more is compiled), and each
    format's active decode and prefill kernels."""
    kernels = {}
    for layout, use in _copy_layouts(qtypes):
        kernels[f"_copy_{layout}"] = rowgroups.KERNELS[use]
    for fmt_id, phases in file_phases(qtypes).items():
        for phase in PHASES:
            if phase in phases:
                kernels[f"_{phase}_{fmt_id}"] = shape_kernel(fmt_id, phase, _active_choices(), build_kernel)
    return kernels


def file_phases(qtypes):
    """{format id: the phases a dispatch over `qtypes` multiplies from that format's own blocks}:
    a dispatch set holds copy layouts, and formats either by id alone (both phases: decode, one
    token, and prefill, more) or as (id, phase) pairs, phase "decode", "prefill" or "rows" (no
    matmul phase: only the token lookup, dequantize_row, reads it). model.step_formats gives a
    model's step the pairs its copies leave to the file's kernels, so the step compiles no
    kernel that no matrix takes."""
    phases = {}
    for q in qtypes:
        fmt_id, wanted = (int(q), PHASES) if not isinstance(q, tuple) else (int(q[0]), (q[1],))
        if fmt_id in formats.BY_ID:
            phases.setdefault(fmt_id, set()).update(p for p in wanted if p in PHASES)
    return {fmt_id: phases[fmt_id] for fmt_id in sorted(phases)}


def dispatch_set(qtypes):
    """A dispatch set as the builders key it: ids as ints, (id, phase) pairs as they are."""
    return frozenset(q if isinstance(q, tuple) else int(q) for q in qtypes)


def set_key(q):
    """A sort key and spelling of a dispatch set's member (an id, or an (id, phase) pair)."""
    return (int(q), "") if not isinstance(q, tuple) else (int(q[0]), str(q[1]))


def set_text(qtypes):
    """A dispatch set as text (its cache keys and step names): 8 for an id, 8d/8p/8r for pairs."""
    return [f"{i}{p[:1]}" for i, p in sorted(map(set_key, qtypes))]


_ARGS = "w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out"


def _dispatch_source(qtypes):
    """matmul's source over `qtypes`, generated from the registry: the copies' layouts at any
    token count (rowgroups.min_tokens), then each format's decode kernel for one token, its
    prefill kernel for more, in the phases the set holds (file_phases). Any other qtype or
    phase raises: a step's set must hold every (qtype, batch) its copies leave to the file's
    blocks (model.step_formats), and a weight it missed is an error, never an output left as
    it was."""
    lines = ["def make(selection):",
             f"    def matmul(qtype, {_ARGS}):",
             f'        """{MATMUL_DOC}"""',
             "        _ = selection  # noqa: F841  (the cache key, see _build_matmul)",
             "        if False:",
             "            pass"]
    for layout in [layout for layout in rowgroups.LAYOUT_OF.values() if layout in qtypes]:
        lines += [f"        elif qtype == {layout}:   # {type_name(layout)}",
                  f"            _copy_{layout}({_ARGS})"]
    phases = file_phases(qtypes)
    for phase, tokens in (("decode", "n_tokens == 1"), ("prefill", "n_tokens != 1")):
        for fmt_id in [fmt_id for fmt_id, served in phases.items() if phase in served]:
            lines += [f"        elif qtype == {fmt_id} and {tokens}:   # {type_name(fmt_id)}",
                      f"            _{phase}_{fmt_id}({_ARGS})"]
    lines += ["        else:",
              "            raise ValueError('matmul: a weight format and batch size this dispatch was not built for')"]
    return lines + ["    return matmul"]


MATMUL_DOC = """out[:n_tokens, :n_rows] (T, R) = W (R, C) of `qtype` times the quantised x rows.

        w: the matrix bytes (R * row_bytes,) uint8; xq/xd/xa/xf: activation buffers filled by
        quantize_act (T rows used); every array row-contiguous (out[t] and xq[t] plain rows).
        One token runs the decode variant of the format, more the prefill variant."""


def _build_matmul(qtypes=None):
    """The numba-callable matmul over the active kernels of `qtypes` (default: every format
    and copy layout). The kernels are globals of its generated source, which numba freezes in
    when it compiles; it captures only the text of the selection and of the set, so its
    disk-cache key changes with either (a captured dispatcher would not do: it pickles with a
    random uuid, missing the cache)."""
    qtypes = _all_qtypes() if qtypes is None else frozenset(qtypes)
    make = formats.compiled(_dispatch_source(qtypes), _active_kernels(qtypes), globals())["make"]
    return njit(**JIT)(make(_selection(qtypes)))


def _selection(qtypes):
    """The text a generated dispatch keeps as its cache key: the variants in force for
    `qtypes` and the set itself."""
    ids = {set_key(q)[0] for q in qtypes}
    chosen = {key: name for key, name in _active_choices().items() if key[0] in ids}
    return ",".join(f"{key}={name}" for key, name in sorted(chosen.items(), key=str)) + \
        ";qtypes=" + ",".join(set_text(qtypes))


_built_fused = {}


def build_fused_kernel(qtype, name):
    """The fused decode kernel (simd.make_fused_kernel) of a simd decode variant, or None for a
    variant of the plain reference engine."""
    params = dict(VARIANTS[qtype])[name]
    if params["engine"] != "simd":
        return None
    key = (qtype, params["rows1"], params.get("vnni", False))
    if key not in _built_fused:
        _built_fused[key] = simd.make_fused_kernel(qtype, params["rows1"], params.get("vnni", False))
    return _built_fused[key]


_FUSED_ARGS = "wa, na, oa, wb, nb, ob, wc, nc, oc, n_cols, xq, xd, xa, xf"


def _fused_source(qtypes, fused):
    """fused_matmul's source over `qtypes`: for those in `fused`, a copy layout's fused kernel (any
    few tokens) or a format's (that of its active decode variant, one token; per-shape winners
    are not consulted: every variant of a format gives the same bits); for the others (and
    formats of the plain reference engine), matmul's kernel once a matrix. A format's weights
    in more than one token are left to the caller (False): its prefill kernels are matmul's."""
    lines = ["def make(selection):",
             f"    def fused_matmul(qtype, {_FUSED_ARGS}, n_tokens):",
             f'        """{FUSED_DOC}"""',
             "        _ = selection  # noqa: F841  (the cache key, see _build_fused)",
             "        if False:",
             "            pass"]
    kernels = {}
    for layout, use in _copy_layouts(qtypes):
        kernels[f"_copy_{layout}"] = rowgroups.KERNELS[use]
        kernels[f"_fused_{layout}"] = rowgroups.FUSED_KERNELS[use]
        lines.append(f"        elif qtype == {layout}:   # {type_name(layout)}")
        lines += _fused_call(layout, fused, f"_copy_{layout}", "n_tokens", "            ")
    for fmt in formats.FORMATS:
        if "decode" in file_phases(qtypes).get(fmt.ID, ()):
            kernels[f"_decode_{fmt.ID}"] = shape_kernel(fmt.ID, "decode", _active_choices(), build_kernel)
            one = build_fused_kernel(fmt.ID, _active_choices()[fmt.ID, "decode"])
            if one is not None:
                kernels[f"_fused_{fmt.ID}"] = one
            lines += [f"        elif qtype == {fmt.ID} and n_tokens == 1:   # {type_name(fmt.ID)}"]
            lines += _fused_call(fmt.ID, fused if one is not None else (), f"_decode_{fmt.ID}", None,
                                 "            ")
    lines += ["        else:",
              "            return False",
              "        return True"]
    return lines + ["    return fused_matmul"], kernels


def _fused_call(qtype, fused, single, n_tokens, indent):
    """The lines of one branch of fused_matmul: its fused kernel (with n_tokens, where it takes
    a count), or `single` once a matrix."""
    if qtype in fused:
        return [f"{indent}_fused_{qtype}({_FUSED_ARGS}{', ' + n_tokens if n_tokens else ''})"]
    count = n_tokens or "np.int64(1)"
    lines = []
    for w, n, o in (("wa", "na", "oa"), ("wb", "nb", "ob"), ("wc", "nc", "oc")):
        lines += [f"{indent}if {n} > 0:",
                  f"{indent}    {single}({w}, {n}, n_cols, xq, xd, xa, xf, {count}, {o})"]
    return lines


FUSED_DOC = """n_tokens (a few) times up to three matrices of `qtype`, n_cols columns each, in one
        parallel region where the layout has a fused kernel: oa (n_tokens, na) = wa times the
        quantised x rows, and the same of b and c (nb, nc 0 where there are fewer). Bit for bit
        matmul's result. Returns False, having done nothing, for a file format's weights in
        more than one token (matmul multiplies those)."""


def _build_fused(qtypes, fused):
    selection = _selection(qtypes) + ";fused=" + ",".join(map(str, sorted(fused)))
    lines, kernels = _fused_source(qtypes, fused)
    make = formats.compiled(lines, kernels, globals())["make"]
    return njit(**JIT)(make(selection))


def fused_for(qtypes, fused=None):
    """The fused dispatch (fused_matmul) over the formats and copy layouts in `qtypes`,
    with fused kernels for those in `fused` (default: all), one per pair of sets per process:
    what a model's step calls for q, k, v and gate, up of a few tokens."""
    qtypes = dispatch_set(qtypes)
    fused = frozenset(q for q in qtypes if not isinstance(q, tuple)) if fused is None else frozenset(int(q) for q in fused)
    if (qtypes, fused) not in _fused_for_set:
        _fused_for_set[qtypes, fused] = _build_fused(qtypes, fused)
    return _fused_for_set[qtypes, fused]


_ROWS_ARGS = "w, n_rows, out, out_stride, n_cols, x, x_stride, aux, aux_stride, xd, xd_stride, n_tokens, g0, g1"


def _rows_source(qtypes):
    """matmul_rows' source over the copy layouts in `qtypes` (rowgroups.ROWS_KERNELS: the
    template's rows function of each)."""
    lines = ["def make(selection):",
             f"    def matmul_rows(qtype, {_ROWS_ARGS}):",
             f'        """{ROWS_DOC}"""',
             "        _ = selection  # noqa: F841  (the cache key, see _build_matmul)",
             "        if False:",
             "            pass"]
    kernels = {}
    for layout, use in _copy_layouts(qtypes):
        kernels[f"_rows_{layout}"] = rowgroups.ROWS_KERNELS[use][0]
        lines += [f"        elif qtype == {layout}:   # {type_name(layout)}",
                  f"            _rows_{layout}({_ROWS_ARGS})"]
    lines += ["        else:",
              "            return False",
              "        return True"]
    return lines + ["    return matmul_rows"], kernels


ROWS_DOC = """Row groups [g0, g1) of one matrix (n_rows x n_cols) in the copy layout `qtype` at w
        times n_tokens quantised rows (x, xd: quantize_act's buffers; aux: the aux rows the
        layout's tiles read, rowgroup_template.aux_rows) into out (rows of out_stride bytes);
        every argument an int64 (addresses, byte strides). Bit for bit matmul's result for
        those rows. False, having done nothing, for a qtype that is no copy layout of the set."""


def rows_for(qtypes):
    """The rows dispatch (matmul_rows) over the copy layouts in `qtypes`, one per set per
    process: what a compiled decode step that splits each matrix's row groups over its threads
    itself calls (core/llm/team.py)."""
    qtypes = dispatch_set(qtypes)
    if qtypes not in _rows_for_set:
        lines, kernels = _rows_source(qtypes)
        make = formats.compiled(lines, kernels, globals())["make"]
        _rows_for_set[qtypes] = njit(**JIT)(make(_selection(qtypes) + ";rows"))
    return _rows_for_set[qtypes]


def matmul_for(qtypes):
    """`matmul` over the formats and copy layouts in `qtypes` only (one per set per process):
    what a model's compiled step links, so it compiles no other format's kernels."""
    key = dispatch_set(qtypes)
    if key not in _for_set:
        _for_set[key] = _build_matmul(key)
    return _for_set[key]


def set_active(qtype, name, phase=None):
    """Make variant `name` the one `matmul` uses for `qtype` in `phase` ("decode", "prefill",
    None for both); returns the new `matmul`."""
    global _matmul
    active = _active_choices()
    for ph in PHASES if phase is None else (phase,):
        offered = sidecar.offered(VARIANTS[qtype], ph)
        if name not in offered:
            raise KeyError(f"no {ph} variant {name!r} for type {qtype}; have {offered}")
    for ph in PHASES if phase is None else (phase,):
        active[qtype, ph] = name
        for key in [k for k in active if len(k) == 4 and k[:2] == (qtype, ph)]:
            del active[key]  # per-shape winners of the old choice
    _for_set.clear()    # each was built over the old choice
    _fused_for_set.clear()
    _rows_for_set.clear()
    _matmul = _build_matmul()
    return _matmul


def quantizer_for(kind):
    """quantize_act for one activation kind, fixed at compile time: called from Python with an
    int kind, quantize_act compiles every kind's branch (13 s of a cold transcribe here), where
    a constant kind compiles its own only, the same code a compiled caller passing ACT_F16 gets.
    numba keys a closure's cache entries by its cell contents, so each kind caches apart."""
    if kind not in _quantizers:
        @njit(**JIT)
        def quantize(x, xq, xd, xa, xf):
            quantize_act(kind, x, xq, xd, xa, xf)
        _quantizers[kind] = quantize
    return _quantizers[kind]


def matmul_f32(qtype, w, n_rows, n_cols, x, variant=None):
    """(T, R) = x (T, C) f32 times W (R, C): quantises x as ggml would, then multiplies."""
    if n_cols % BLOCK_ELEMS[qtype]:
        raise ValueError(f"{n_cols} columns is not a whole number of {type_name(qtype)} blocks")
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, n_cols)
    w = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
    n_tokens = x.shape[0]
    xq, xd, xa, xf = act_buffers(n_tokens, n_cols)
    quantizer_for(act_kind(qtype))(x, xq, xd, xa, xf)
    out = np.empty((n_tokens, n_rows), np.float32)
    if variant is None:   # the dispatch over this one format: it compiles no other's kernels
        matmul_for((qtype,))(qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    else:
        build_kernel(qtype, variant)(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
    return out

"""A loaded model: GGUF file, tokenizer, family tables, KV cache, and the prefill/decode verbs."""
import os
import time
from dataclasses import dataclass

import numba
import numpy as np

from dasllama.formats.gguf import GGUFError, open_gguf
from dasllama.kernels import ops, sidecar, rowgroups
from dasllama.kernels.attention import attention_work
from dasllama.kernels.quants import Q5_0, SUPPORTED as SUPPORTED_QTYPES, row_bytes

from . import forward as fw
from .families import family
from .families.base import UnsupportedModel, build_tables, check_hparams
from .kvcache import KVCache, new_block, ring_cells, window_intact
from .step import FirstCompile, step_for
from .team import Team, enabled as team_enabled, threading_allows
from .tokenizer import Tokenizer, TokenizerError
from ..runtime.cache import first_compile_notice
from ..runtime.threads import (DECODE_LAYERS, Lanes, prefer_threading_layers, ram_bytes, set_threads,
                               warn_slow_threading)

DEFAULT_N_CTX = 4096
DEFAULT_N_BATCH = 512


class ContextFull(ValueError):
    """The prompt (plus what is asked for) does not fit the context window; one sentence."""


@dataclass
class Timings:
    load_s: float = 0.0
    prompt_tokens: int = 0
    prompt_s: float = 0.0
    gen_tokens: int = 0
    gen_s: float = 0.0

    @property
    def prompt_tps(self):
        return self.prompt_tokens / self.prompt_s if self.prompt_s else 0.0

    @property
    def gen_tps(self):
        return self.gen_tokens / self.gen_s if self.gen_s else 0.0


BATCH_MAX = np.iinfo(np.int64).max
CTAB_COLS = 6      # ctab entries: offset, layout, rows, cols, and the batch sizes it serves, min..max
CTAB_COPIES = 2    # copies a weight may have: one for decode, another for batches


def layouts_in_force():
    """{(qtype, phase): "x8", "x16" or "file"}: which phases multiply through which copy of the
    weights (a pin, the tuning sidecar, a shipped profile, else rowgroups.LAYOUT_DEFAULTS)."""
    return sidecar.layouts_in_force(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices)


def _copies_wanted(qtype, rows, layouts):
    """{copy name: (layout, min_tokens, max_tokens)} of one weight: the copy each phase takes
    (layouts[qtype, phase]), where this CPU is offered it and it folds that phase's batches as
    the file's kernels do; a copy both phases take is one, serving both. A decode copy serves
    one token, a "p16" one the few of a batched step too (rowgroups.decode_tokens)."""
    wanted = {}
    for phase in ("decode", "prefill"):
        name = layouts.get((qtype, phase), "file")
        offered = name != "file" and name in rowgroups.layout_choices(qtype, phase)
        layout = rowgroups.copy_layout(qtype, rows, name) if offered else None
        if layout is None or (phase == "decode" and rowgroups.min_tokens(layout) != 1):
            continue
        if phase == "decode":
            lo, hi = 1, rowgroups.decode_tokens(layout)
        else:
            lo, hi = max(2, rowgroups.min_tokens(layout)), BATCH_MAX
        if name in wanted:
            _, lo_other, hi_other = wanted[name]
            lo, hi = min(lo, lo_other), max(hi, hi_other)
        wanted[name] = (layout, lo, hi)
    return wanted


def _matrices(wtab):
    """[(layer, slot)] of every matrix a step multiplies: the layers' and the output (the
    embedding, slot W_EMBD of the last row, is only looked up, row by row: the output reads it
    where tied, through W_OUT's row)."""
    n_layer = wtab.shape[0] - 1
    rows = [(layer, slot) for layer in range(n_layer) for slot in range(wtab.shape[1])]
    return [(layer, slot) for layer, slot in rows + [(n_layer, fw.W_OUT)] if wtab[layer, slot, 1] >= 0]


def _source(prow, n):
    """The entry of a weight's ctab entries `prow` that serves a batch of n tokens (the first
    that does, as forward._weight takes it), or -1: the file's blocks."""
    for c in range(prow.shape[0]):
        if prow[c, 1] >= 0 and prow[c, 4] <= n <= prow[c, 5]:
            return c
    return -1


def _batch_points(prow):
    """The batch sizes at which the source of a weight (_source) can change: 1, 2, and each
    entry's first and one past its last; between two of them it is the same."""
    points = {1, 2}
    for c in range(prow.shape[0]):
        if prow[c, 1] >= 0:
            points.update((int(prow[c, 4]), int(prow[c, 5]) + 1))
    return sorted(n for n in points if 1 <= n <= BATCH_MAX)


def _first_use(prow, source):
    """The smallest batch that a weight multiplies from `source` (an entry, or -1 for the file's
    blocks), or None."""
    return next((n for n in _batch_points(prow) if _source(prow, n) == source), None)


def step_formats(wtab, ctab):
    """The set a model's step compiles its matmul dispatch over (step.step_for, matmul.file_phases):
    the copy layouts ctab serves, and (qtype, "decode") / (qtype, "prefill") for each format
    some weight multiplies from the file's blocks (or a plain Q8_0 copy) at one token / more,
    where no copy serves that batch (copies off, past the RAM budget, rows that do not group, a
    copy declined); (qtype, "rows") for the embedding's lookup. Exactly what the forward
    takes: a dispatch asked for a (qtype, batch) outside its set raises."""
    qtypes = set()
    copies = set(rowgroups.LAYOUT_OF.values())
    for layer, slot in _matrices(wtab):
        prow = ctab[layer, slot]
        for n in _batch_points(prow):
            c = _source(prow, n)
            qtype = int(prow[c, 1]) if c >= 0 else int(wtab[layer, slot, 1])
            qtypes.add(qtype if qtype in copies else (qtype, "decode" if n == 1 else "prefill"))
    embd = int(wtab[-1, fw.W_EMBD, 1])
    if embd >= 0:
        qtypes.add((embd, "rows"))
    return frozenset(qtypes)


def fused_formats(wtab, ctab):
    """The qtypes one token's q, k, v and gate, up multiply in (the copy ctab serves one token
    from, else the file's format): the step's fused decode dispatch compiles a kernel for these
    only, and multiplies a matrix in any other qtype one at a time."""
    qtypes = set()
    for layer, slot in _matrices(wtab):
        if layer < wtab.shape[0] - 1 and slot in (fw.W_Q, fw.W_K, fw.W_V, fw.W_GATE, fw.W_UP):
            c = _source(ctab[layer, slot], 1)
            qtypes.add(int(ctab[layer, slot, c, 1]) if c >= 0 else int(wtab[layer, slot, 1]))
    return frozenset(qtypes)


def resident_weights(data, enabled=True, budget=None):
    """(wbuf, writable) where the forward reads the file's blocks: the file's read-only map, or
    (enabled, and the file within `budget` bytes, default a quarter of the machine's RAM) an
    array of anonymous memory of the file's size, read-only like the map so the forward sees
    one array type, and `writable` the same memory, into which the model copies the parts the
    forward reads (Model._make_resident: the embedding, and the weights no copy serves in a
    batch asked for); the rest is never touched and takes no memory (None: the map).

    numpy backs an array that large with huge pages where the kernel offers them (madvise),
    and the map has 4 KiB pages: decode reads the file's own blocks (the gemv of Q5_0, Q4_K,
    Q6_K, the output matrix) faster from the copy. Qwen2.5-0.5B Q4_K_M, the two alternated in
    one process: faster in 8 of 8 pairs, 14.2-14.9 -> 13.6-14.3 ms a token (Zen 4). Like
    llama.cpp's --no-mmap, within a budget: a model larger than it stays mapped."""
    budget = ram_bytes() // 4 if budget is None else budget
    if not enabled or data.nbytes > budget:
        return data, None
    writable = np.empty(data.nbytes, np.uint8)
    buf = writable.view()
    buf.setflags(write=False)
    return buf, writable


def plan_copies(wtab, enabled=True, budget=None, layouts=None):
    """(ctab, plan, size) of the copies weight_copies makes: ctab as it returns it (where each
    made copy sits in a cbuf of `size` bytes), and plan its [(layer, slot, entry, name)], in
    the order the budget took them."""
    budget = ram_bytes() // 4 if budget is None else budget
    layouts = layouts_in_force() if layouts is None else layouts
    ctab = np.full(wtab.shape[:2] + (CTAB_COPIES, CTAB_COLS), -1, np.int64)
    plan, size, extra = [], 0, 0
    n_layer = wtab.shape[0] - 1
    order = [(n_layer, fw.W_OUT)] + [(layer, slot) for layer in range(n_layer) for slot in range(wtab.shape[1])]
    for layer, slot in order:
        off, qtype, rows, cols = (int(v) for v in wtab[layer, slot])
        if not enabled or qtype < 0:
            continue
        for entry, (name, (layout, lo, hi)) in enumerate(_copies_wanted(qtype, rows, layouts).items()):
            if layer == n_layer and lo > 1:
                continue        # the output takes batches only for perplexity-like runs
            nbytes = rows * row_bytes(layout, cols)
            if qtype != Q5_0:
                if extra + nbytes > budget:
                    continue
                extra += nbytes
            plan.append((layer, slot, entry, name))
            ctab[layer, slot, entry] = (size, layout, rows, cols, lo, hi)
            size += nbytes
    return ctab, plan, size


def make_copy(cbuf, data, wtab, ctab, layer, slot, entry, name):
    """Fill one planned copy (ctab[layer, slot, entry]) into the writable cbuf from the file's
    bytes `data`; False (and the entry cleared) where the copy declines the matrix (a Q8_0
    quant of -128 without VNNI): it keeps the file's blocks."""
    off, qtype, rows, cols = (int(v) for v in wtab[layer, slot])
    at, layout = int(ctab[layer, slot, entry, 0]), int(ctab[layer, slot, entry, 1])
    blocks = data[off:off + rows * row_bytes(qtype, cols)]
    out = cbuf[at:at + rows * row_bytes(layout, cols)]
    if rowgroups.make_copy(qtype, blocks, rows, cols, out=out, name=name) is None:
        ctab[layer, slot, entry] = -1
        return False
    return True


def weight_copies(wbuf, wtab, enabled=True, budget=None, layouts=None):
    """(cbuf, ctab): copies of matmul weights that some phases multiply faster, bit for bit to
    the same result; cbuf a read-only byte buffer like the memory map (so the forward sees one
    array type for both), ctab[layer, slot] CTAB_COPIES entries (offset, layout, rows, cols,
    min_tokens, max_tokens) as wtab's rows plus the batch sizes the copy serves (layout -1: no
    copy). All made now (a Model makes each at the first batch that takes it: Model._prepare).

    Rows in groups of 8 or 16 (kernels/rowgroups.py): Q5_0 weights as Q8_0 (the same f16 scale,
    quants - 16) and Q8_0 weights as they are go to the Q8_0_X8/X16 layout, Q4_0 to
    Q4_0_X8/X16, Q4_K to Q4_K_X8/X16, Q6_K to Q6_K_X8/X16; Q5_0 whose rows do not group is
    copied as plain Q8_0 (34/22 of its bytes). `layouts` ({(qtype, phase): "x8", "x16" or
    "file"}, default layouts_in_force()) says which copy each phase takes: a copy that no
    phase takes is not made, and a batch takes it only from rowgroups.min_tokens on, where its fold
    is the file's kernels'. The copies that are larger than the weights they copy (36/34,
    20/18, 312/144, 356/210) stop at `budget` bytes in all (default: a quarter of the
    machine's RAM).

    The output matrix is copied first: decode takes one token through it, and it is the
    largest matrix (gemma3-270m's 262144-row Q8_0 vocabulary is 58 % of a decode step's
    cycles). Its Q8_0_X16 copy keeps 16 rows' fold chains in one stream: on its own it
    streams 58-66 GB/s where the file's rows take 39-40 (Zen 4); inside a decode step, with
    the nets alternated in one process, 2.9 ms against 4.2 when the host's memory is free,
    level when it is not. The embedding lookup of a tied output reads the file's rows (slot
    W_EMBD is not copied)."""
    ctab, plan, size = plan_copies(wtab, enabled, budget, layouts)
    cbuf = np.empty(size, np.uint8)     # filled in place: no concatenation of the pieces
    for layer, slot, entry, name in plan:
        make_copy(cbuf, wbuf, wtab, ctab, layer, slot, entry, name)
    cbuf.setflags(write=False)
    return cbuf, ctab


def describe(g, fam=None):
    """(hparams, flags, tables) of an open GGUF from its metadata; values of the wrong type
    or impossible size are a corrupt file, said in one sentence (UnsupportedModel)."""
    fam = fam or family(g.architecture)
    try:
        hparams, flags = fam.describe(g)
        check_hparams(g, hparams)
        return hparams, flags, build_tables(g, hparams, flags, SUPPORTED_QTYPES)
    except (GGUFError, UnsupportedModel):
        raise
    except (TypeError, ValueError, OverflowError, ZeroDivisionError) as e:
        raise UnsupportedModel(f"{g.path}: the model's hyper-parameters in the GGUF metadata "
                               f"are malformed ({e}); the file is corrupt or from a foreign "
                               "converter.") from None


def tokenizer_of(g):
    try:
        return Tokenizer.from_metadata(g.metadata)
    except TokenizerError as e:
        raise TokenizerError(f"{g.path}: {e}") from None


def check_runnable(g):
    """Raise the one-sentence error that would stop `Model(g.path)`, short of allocating:
    an unknown family, a missing or malformed key or tensor, an unusable vocab."""
    describe(g)
    tokenizer_of(g)


def open_runnable(path):
    """open_gguf, then check_runnable: the file of a model this engine can run."""
    g = open_gguf(os.fspath(path))
    check_runnable(g)
    return g


def _kv_field(name):
    """A Model attribute that reads and writes the cache in force (model.kv)."""
    return property(lambda self: getattr(self.kv, name),
                    lambda self, value: setattr(self.kv, name, value))


class Model:
    """One GGUF LLM ready to run: `eval(ids)` feeds tokens and returns the last logits."""

    n_past, history = _kv_field("n_past"), _kv_field("history")

    def __init__(self, path, n_ctx=DEFAULT_N_CTX, n_threads=None, n_batch=DEFAULT_N_BATCH,
                 copies=True, quiet=False):
        t0 = time.perf_counter()
        prefer_threading_layers(DECODE_LAYERS)
        self.path = os.fspath(path)
        self.gguf = open_gguf(self.path)
        self.family = family(self.gguf.architecture)
        self.hparams, self.flags, self.tables = self._describe()
        wtab = self.tables.wtab
        # the copies this model will multiply (made as batches first take them: _prepare), and
        # the step compiled for exactly what they leave to the file's blocks
        self.ctab, self._plan, size = plan_copies(wtab, copies)
        self.step = step_for(step_formats(wtab, self.ctab), fused_formats(wtab, self.ctab))
        self._compiled = None if quiet else first_compile_notice(self.step.forward, "the engine's kernels")
        # on a first run, compile on both cores from here on (see FirstCompile)
        self._first_compile = None if self._compiled is None else FirstCompile(self.step, self.tables.shape)
        self.tokenizer = self._tokenizer()
        self.n_vocab = self.tables.shape.n_vocab
        if self.tokenizer.n_vocab > self.n_vocab:
            raise UnsupportedModel(f"{self.path}: the vocabulary has {self.tokenizer.n_vocab} "
                                   f"tokens but the output matrix only {self.n_vocab} rows; the "
                                   "file is corrupt or from a foreign converter.")
        self.n_ctx = int(n_ctx) if n_ctx else min(self.hparams.n_ctx_train, DEFAULT_N_CTX)
        self.n_batch = int(n_batch)
        if self.n_ctx < 1 or self.n_batch < 1:
            raise ValueError(f"n_ctx ({self.n_ctx}) and n_batch ({self.n_batch}) must be at least 1.")
        # the map until some weight reads the file's bytes (_make_resident): the embedding's
        # lookup reads a few rows a token from it
        self.wbuf, self._wbuf_writable, self._copies = self.gguf.data, None, copies
        self._cbuf_writable = np.empty(size, np.uint8)   # pages a copy does not fill take no memory
        self.cbuf = self._cbuf_writable.view()
        self.cbuf.setflags(write=False)
        self.n_threads = set_threads(n_threads)
        self.lanes = Lanes(self.n_threads)     # the threads each decode step runs on
        self._stepped = False
        self._team = None           # the one-region step of the current net (Team), where it may run
        self._team_on = team_enabled()
        if self.kv_cache_bytes() > ram_bytes():
            raise ContextFull(f"a context of {self.n_ctx} tokens needs "
                              f"{self.kv_cache_bytes() / 2**30:.1f} GiB of KV cache, more than this "
                              f"machine's {ram_bytes() / 2**30:.1f} GiB of RAM: lower -c.")
        self._alloc()
        self._made = np.full_like(self.ctab, -1)      # the copies made so far: the net's ctab
        self._resident = set()      # (layer, slot) whose file bytes are in wbuf
        self._prepared = (0, 0)     # the largest batch, and output rows, made ready for
        self._prepare(1, 1)
        self.timings = Timings(load_s=time.perf_counter() - t0)

    def _make_resident(self, layer, slot):
        """The file's bytes of weight (layer, slot) into wbuf's anonymous memory (made at the
        first such weight, with the embedding's rows: resident_weights), where the model may
        have it."""
        if self._wbuf_writable is None:
            self.wbuf, self._wbuf_writable = resident_weights(self.gguf.data, self._copies)
            if self._wbuf_writable is None:
                return      # the map: copies off, or past the budget
            self._make_resident(self.tables.wtab.shape[0] - 1, fw.W_EMBD)
        off, qtype, rows, cols = (int(v) for v in self.tables.wtab[layer, slot])
        nbytes = rows * row_bytes(qtype, cols)
        self._wbuf_writable[off:off + nbytes] = self.gguf.data[off:off + nbytes]

    def _prepare(self, n_tokens, n_out):
        """Make what a forward of n_tokens (n_out rows of logits) reads before it runs: the copies
        that serve those batches (ctab's plan, made at the first batch that takes each: a
        decode-only session never makes the copies of long batches), and, where wbuf is
        anonymous memory, the file's bytes of each weight that no copy serves there (a weight
        every batch reads from its copies takes none; a model all of whose weights do keeps
        wbuf the map, whose embedding rows the lookup reads). Then the net reads the copies made."""
        ready, ready_out = self._prepared
        if n_tokens <= ready and n_out <= ready_out:
            return
        t, wtab = self.tables, self.tables.wtab
        n_layer = wtab.shape[0] - 1
        declined = False
        for layer, slot, entry, name in self._plan:
            n = n_out if layer == n_layer else n_tokens
            if self._made[layer, slot, entry, 1] < 0 and self.ctab[layer, slot, entry, 1] >= 0 and \
                    (_first_use(self.ctab[layer, slot], entry) or BATCH_MAX) <= n:
                if make_copy(self._cbuf_writable, self.gguf.data, wtab, self.ctab, layer, slot, entry, name):
                    self._made[layer, slot, entry] = self.ctab[layer, slot, entry]
                else:
                    declined = True
        if declined:    # a weight keeps the file's blocks where its copy was to serve: compile them
            self.step = step_for(step_formats(wtab, self.ctab), fused_formats(wtab, self.ctab))
        for layer, slot in _matrices(wtab):
            n = n_out if layer == n_layer else n_tokens
            first = _first_use(self.ctab[layer, slot], -1)
            if (layer, slot) not in self._resident and first is not None and first <= n:
                self._make_resident(layer, slot)
                self._resident.add((layer, slot))
        self._prepared = (max(n_tokens, ready), max(n_out, ready_out))
        self.net = fw.net_of(self.wbuf, wtab, self.cbuf, self._made, t.fbuf, t.ftab, t.shape,
                             t.layer_swa, t.layer_freq_base, ops.gelu_table())
        self._team = Team.plan(self) if self._team_on else None     # its plan and buffers only where it may run

    def _describe(self):
        return describe(self.gguf, self.family)

    def _tokenizer(self):
        return tokenizer_of(self.gguf)

    def _kv_layout(self, n_ctx=None):
        """(n_ctx, ring cells, global layers, window layers): the sliding-window layers keep a
        ring of the window plus a batch (kvcache.ring_cells) where the model has them."""
        n_ctx = self.n_ctx if n_ctx is None else n_ctx
        n_window = int(self.tables.layer_swa.sum()) if self.hparams.n_swa > 0 else 0
        n_ring = ring_cells(n_ctx, self.hparams.n_swa, self.n_batch) if n_window else 0
        return n_ctx, n_ring, self.hparams.n_layer - n_window, n_window

    def kv_cache_bytes(self, n_ctx=None):
        """Bytes of the f16 keys and values for n_ctx tokens (default: this model's n_ctx)."""
        hp = self.hparams
        n_ctx, n_ring, n_global, n_window = self._kv_layout(n_ctx)
        return 2 * (n_global * n_ctx + n_window * n_ring) * hp.n_head_kv * (hp.head_dim + hp.head_dim_v)

    def _alloc(self):
        hp = self.hparams
        B = self.n_batch
        kv_dim = hp.n_head_kv * hp.head_dim
        kv_dim_v = hp.n_head_kv * hp.head_dim_v
        self.kv = self.new_kv()
        wide = max(2 * hp.n_ff, hp.n_head * hp.head_dim + hp.n_head_kv * (hp.head_dim + hp.head_dim_v))
        widths = (hp.n_embd, hp.n_embd, hp.n_head * hp.head_dim, kv_dim, kv_dim_v,
                  hp.n_head * hp.head_dim_v, hp.n_embd, wide, hp.n_ff, wide)
        n_bases = len(np.unique(self.tables.layer_freq_base))
        work = fw.Work(*(np.zeros(B, np.int64) for _ in range(4)),
                       np.zeros(n_bases * B * 2 * (hp.n_rot // 2), np.float32),
                       np.zeros(hp.n_layer, np.float64), np.zeros(hp.n_layer, np.int64),
                       attention_work(hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v))
        self.scratch = fw.Scratch(*(np.zeros(B * w, np.float32) for w in widths), work)
        cmax = max(hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim_v, 256)
        self.acts = fw.Acts(np.zeros(B * cmax, np.int8), np.zeros(B * cmax // 32 + 1, np.float32),
                            np.zeros(B * cmax // 16 + 1, np.float32), np.zeros(B * cmax, np.float32))
        self.logits = np.zeros((B, self.n_vocab), np.float32)
        self._no_trace = np.zeros((0, 0, 0, 0), np.float32)
        self._no_embd = np.zeros((0, hp.n_embd), np.float32)
        self._no_tokens = np.zeros(0, np.int64)
        self._no_rope = np.zeros((1, 0, 2, hp.n_rot // 2), np.float32)

    def new_kv(self):
        """A fresh KV cache of this model's shape; `model.kv = cache` makes eval use it."""
        return self.new_kvs(1)[0]

    def new_kvs(self, n):
        """n fresh KV caches in one block, so decode_batch can step them together."""
        hp = self.hparams
        block = new_block(n, *self._kv_layout(), hp.n_head_kv * hp.head_dim, hp.n_head_kv * hp.head_dim_v)
        return [KVCache(block, i) for i in range(n)]

    # -- the verbs -----------------------------------------------------------------------------

    def reset(self):
        self.rewind(0)

    def rewind(self, n_keep):
        """Keep the first n_keep tokens of the KV cache; the next eval writes after them. Where
        the sliding-window ring no longer holds the keys the next position sees, nothing is
        kept (n_past 0: the caller feeds the prompt again, as llama-server does)."""
        if not window_intact(self.kv.arrays.pos_swa, n_keep, self.hparams.n_swa):
            n_keep = 0
        self.kv.forget(n_keep)

    def check_fits(self, n_tokens):
        if self.n_past + n_tokens > self.n_ctx:
            raise ContextFull(
                f"{self.n_past + n_tokens} tokens do not fit the context of {self.n_ctx}: "
                f"shorten the prompt or raise -c (the model was trained on {self.hparams.n_ctx_train}).")

    def eval(self, ids, all_logits=False, trace=None, copy=True):
        """Feed token ids at the current position; return logits of the last one (or all).
        copy=False (the last one's only) returns the model's own row, as llama_get_logits
        does: valid, and the caller's to change, until the next eval or decode_batch. A decode
        loop that reads each row before the next step (generate, bench) saves the 1 MB copy a
        token of a 262144-token vocabulary (~110-150 us of an 11 ms gemma3 step)."""
        ids = self._checked(ids)
        outs = []
        for start in range(0, ids.size, self.n_batch):
            chunk = ids[start:start + self.n_batch]
            n_out = chunk.size if all_logits else 1
            tr = self._no_trace if trace is None else trace
            self._forward(chunk, n_out, tr)
            if all_logits or copy:
                outs.append(self.logits[:n_out].copy())
        self.history.extend(int(i) for i in ids)
        if all_logits:
            return np.concatenate(outs)
        return outs[-1][0] if copy else self.logits[0]

    def decode_batch(self, tokens, caches):
        """(B, n_vocab) logits of one token fed to each of B sequences at once, token i at
        the end of caches[i] (caches of one new_kvs block); one pass reads each weight once."""
        if not 0 < len(tokens) == len(caches) <= self.n_batch:
            raise ValueError(f"give 1 to {self.n_batch} tokens, one per cache.")
        ids = self._checked_ids(tokens)
        for cache in caches:
            if cache.block is not caches[0].block or cache.n_past + 1 > self.n_ctx:
                raise ContextFull(f"a sequence is full at {self.n_ctx} tokens, or not of this block.")
        if any(cache.rope_shift for cache in caches):
            raise ValueError("a sequence holds an M-RoPE image; decode it alone with eval.")
        positions = np.array([c.n_past for c in caches], np.int64)
        self._prepare(len(ids), len(ids))
        slots = np.array([c.index for c in caches], np.int64)
        self.step.forward_batch(ids, positions, slots, self.net, caches[0].block, self.scratch, self.acts,
                                self.logits, self.n_threads)
        for cache, token in zip(caches, ids):
            cache.n_past += 1
            cache.history.append(int(token))
        return self.logits[:len(caches)].copy()

    def hidden_states(self, ids):
        """(T, n_embd) the output-normed hidden state of every token fed (llama.cpp's
        `result_norm`, which its --embeddings pools), from the current position."""
        ids = self._checked(ids)
        n_embd = self.hparams.n_embd
        rows = []
        for start in range(0, ids.size, self.n_batch):
            chunk = ids[start:start + self.n_batch]
            self._forward(chunk, chunk.size, self._no_trace)
            # the forward leaves the normed rows it multiplied by the output matrix in scratch[1]
            rows.append(self.scratch.xn[:chunk.size * n_embd].reshape(chunk.size, n_embd).copy())
        self.history.extend(int(i) for i in ids)
        return np.concatenate(rows)

    def _checked(self, ids):
        ids = self._checked_ids(ids)
        self.check_fits(ids.size)
        return ids

    def _checked_ids(self, ids):
        ids = np.asarray(ids, np.int64)
        if ids.size == 0:
            raise ValueError("nothing to evaluate: the token list is empty.")
        if ids.min() < 0 or ids.max() >= self.n_vocab:
            raise ValueError(f"token id out of range for a vocabulary of {self.n_vocab}.")
        return ids

    def eval_embd(self, embd, causal=True, grid=None):
        """Feed rows of input embeddings (T, n_embd) at the current position (an image's, from
        a projector), as llama.cpp's embd batches: not scaled by the family's embedding scale;
        causal=False lets the rows attend to each other both ways (gemma3's images), and then
        they must fit one batch. grid (nx, ny): the rows are an image's, row-major, for an
        M-RoPE model (qwen2vl), as mtmd places them: row i at (t, y, x) = (p, p + i // nx,
        p + i % nx), the text after it at p + max(nx, ny). Returns the logits of the last row."""
        embd = np.ascontiguousarray(embd, np.float32)
        if embd.ndim != 2 or embd.shape[1] != self.hparams.n_embd or embd.shape[0] == 0:
            raise ValueError(f"embeddings must be (T, {self.hparams.n_embd}) rows, not {embd.shape}.")
        if not causal and embd.shape[0] > self.n_batch:
            raise ValueError(f"{embd.shape[0]} non-causal rows do not fit one batch of {self.n_batch}: "
                             "raise the batch size.")
        planes = None
        if grid is not None:
            nx, ny = grid
            if "rope_sections" not in self.hparams.extra or nx * ny != embd.shape[0]:
                raise ValueError(f"a grid of {nx} x {ny} rows needs an M-RoPE model and as many rows, "
                                 f"not {embd.shape[0]}.")
            p = self.n_past + self.kv.rope_shift
            i = np.arange(embd.shape[0])
            planes = np.stack([np.full_like(i, p), p + i // nx, p + i % nx, np.zeros_like(i)])
        self.check_fits(embd.shape[0])
        for start in range(0, embd.shape[0], self.n_batch):
            self._forward(self._no_tokens, 1, self._no_trace, embd[start:start + self.n_batch], causal,
                          None if planes is None else planes[:, start:start + self.n_batch])
        self.history.extend([-1] * embd.shape[0])
        if grid is not None:
            self.kv.rope_shifts.append((self.n_past, self.kv.rope_shift + max(grid) - embd.shape[0]))
        return self.logits[0].copy()

    def _mrope(self, planes):
        """(1, T, 2, n_rot / 2) cos/sin tables of M-RoPE for position planes (4, T) (t, y, x, e):
        each rotated pair turns by the plane of its section, as ggml_rope_multi's M-RoPE mode;
        each plane's angles are those of plain RoPE at its positions."""
        hp = self.hparams
        half = hp.n_rot // 2
        sections = hp.extra["rope_sections"]
        plane_of = np.searchsorted(np.cumsum(sections), np.arange(half) % sum(sections), side="right")
        out = np.empty((1, planes.shape[1], 2, half), np.float32)
        tab = np.empty((planes.shape[1], 2, half), np.float32)
        for j in np.unique(plane_of):
            ops.rope_angles(np.ascontiguousarray(planes[j], np.int64), hp.n_rot, hp.freq_base, tab)
            out[0][:, :, plane_of == j] = tab[:, :, plane_of == j]
        return out

    def _forward(self, chunk, n_out, trace, embd=None, causal=True, planes=None):
        first = self.n_past == 0 and not self.history
        embd = self._no_embd if embd is None else embd
        if self._first_compile is not None:
            self._first_compile.finish()
            self._first_compile = None
        rope = self._no_rope
        if planes is None and self.kv.rope_shift:     # text after an M-RoPE image: shifted positions
            pos = self.n_past + self.kv.rope_shift + np.arange(max(chunk.size, embd.shape[0]))
            planes = np.stack([pos] * 4)
        if planes is not None:
            rope = self._mrope(planes)
        self._prepare(max(chunk.size, embd.shape[0]), n_out)
        one = max(chunk.size, embd.shape[0]) == 1
        lanes = self.lanes.pick() if one else self.n_threads
        numba.set_num_threads(lanes)
        t0 = time.perf_counter()
        if self._team_takes(chunk, lanes, trace, rope):
            self._team.run(self.step.team_step, chunk[0], self.n_past, self.kv.arrays)
        else:
            self.step.forward(chunk, embd, self.n_past, causal, self.net, self.kv.arrays, self.scratch,
                              self.acts, n_out, self.logits, trace, self.n_threads, rope)
        if one:
            if self._stepped:     # not the call that compiled (or loaded) the step
                self.lanes.record(lanes, time.perf_counter() - t0)
            numba.set_num_threads(self.n_threads)
        self._stepped = True
        self.n_past += max(chunk.size, embd.shape[0])
        if self._compiled is not None:
            self._compiled()
            self._compiled = None
        if first:
            warn_slow_threading()

    def _team_takes(self, chunk, lanes, trace, rope):
        """Whether this step runs as one parallel region (team.Team): one token (not embeddings),
        on all the model's threads, no trace, no M-RoPE tables, a model that has a Team, and a
        threading layer that gives each of the team's threads its own (known after the first
        parallel region: the prompt's step runs before), where DASLLAMA_TEAM=1 (team.enabled)."""
        return (self._team is not None and chunk.size == 1 and lanes == self.n_threads and trace.shape[0] == 0
                and rope.shape[1] == 0 and threading_allows())

    def new_trace(self, n_tokens):
        """A zeroed trace array for `eval(..., trace=)`: (names, layers, tokens, width)."""
        hp = self.hparams
        width = max(hp.n_embd, hp.n_head * max(hp.head_dim, hp.head_dim_v))
        return np.zeros((len(fw.TRACE_NAMES), hp.n_layer, n_tokens, width), np.float32)

    def trace_tensors(self, trace):
        """Named views of a filled trace: {"attn_norm-0": (T, width) array, ...}."""
        hp = self.hparams
        widths = {"attn_norm": hp.n_embd, "Qcur": hp.n_head * hp.head_dim,
                  "Kcur": hp.n_head_kv * hp.head_dim, "Vcur": hp.n_head_kv * hp.head_dim_v,
                  "kqv_out": hp.n_head * hp.head_dim_v}
        return {f"{name}-{il}": trace[i, il, :, :widths.get(name, hp.n_embd)]
                for i, name in enumerate(fw.TRACE_NAMES) for il in range(hp.n_layer)}

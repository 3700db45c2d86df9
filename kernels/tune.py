"""The tuner: race every matmul variant on a model's own weights and shapes, keep the fastest.

    shapes = model_shapes(gguf_file)         # (type, phase, rows, cols) the model multiplies
    report = tune(shapes, budget_s=60)       # probe, gate, race, duel, write the sidecar

Steps, each refusing rather than guessing:
1. noise probe: the spread of a fixed parallel workload; above NOISE_LIMIT the machine is
   too busy to rank variants a few percent apart, and tuning stops with the reason (unless
   forced, for CI);
2. correctness gate: every variant against `matmul_ref` on the real weights, with a row and a
   token tail: bit-exact for the integer formats, within FLOAT_ULPS of the float32 fold for
   F32/F16/BF16 (variants may sum in another order); a failing variant is never raced;
3. interleaved races: one sample of each live variant per round, in rotated order, so a
   disturbance hits all of them alike; clearly slower variants leave early; median ranking;
4. per weight type and phase the winner is the variant with the least time summed over the
   model's tensors; a winner that differs from the one in force must then win a duel: paired
   rounds, head to head, judged by a sign test, so noise does not churn the choice;
5. per shape, a variant that beats the type's winner by SHAPE_GAIN (and wins its duel) is kept
   for that shape alone;
6. the layout: where the model may copy a format's weights into an 8- or 16-row interleave
   at load (rowgroups.make_copy), each copy's kernel ("x8", "x16", "p16": those this CPU is offered) races
   beside the file's variants on the same shapes, gated alike; per type and phase the layout
   with the least time summed over the copied tensors is kept (sidecar key "<phase> layout"),
   after a duel where that changes what is in force. The file's winner still serves the
   tensors without a copy;
7. the prefetch: where decode takes a copy, that copy's kernel built to prefetch each of
   rowgroups.PREFETCH_CHOICES bytes ahead races on the decode shapes, gated alike, and the
   least summed time is kept (sidecar key "decode prefetch", the copy's format's), after a duel
   where that changes what is in force.
The sidecar keeps every shape's medians; tuning a second model adds its shapes and re-chooses
the winners of the types it uses, on its own shapes.
"""
import math
import os
import time
import warnings
from dataclasses import dataclass, field

import numba
import numpy as np

from . import matmul as M
from . import sidecar, rowgroups
from .race import NOISE_LIMIT, Noisy, _reps, _sample, probe_noise, race
from .quants import BF16, COPY_LAYOUTS, F16, F32, SUPPORTED, row_bytes
from .sidecar import PHASES, layout_key, sidecar_path, type_name

__all__ = ["Shape", "Noisy", "model_shapes", "probe_noise", "gate", "gate_copy", "race", "duel", "tune", "sidecar_path"]

PREFILL_TOKENS = 64          # a prefill race multiplies this many tokens (T >= 32 is the prefill tiling)
PREFILL_MACS = 64 * 2048 * 2048   # larger prefill shapes are raced on their first rows only
COLD_BYTES = 64 << 20        # decode races rotate over copies of the weight this large in all,
                             # past any L3, so each call streams from memory as in generation
REPLACE_MARGIN = 0.01        # a change must beat what is in force by this much in the median duel round
SHAPE_GAIN = 0.05            # a shape gets its own variant only if its median beats the type's winner by this
DUEL_P = 0.01                # sign-test level at which a duel's challenger wins
MIN_DUEL_ROUNDS, MAX_DUEL_ROUNDS = 8, 200
FLOAT_ULPS = 16              # float gate: |got - ref| <= (n_cols / 64 + FLOAT_ULPS) * 2^-24 * sum|w x|
GATE_ROWS, GATE_TOKENS = 37, 7  # odd: tails for every row and token tile
COPIES = tuple(rowgroups.WIDTHS)    # the contenders that multiply the weights' 8- and 16-row copies
AHEAD = {f"pf{p}": p for p in rowgroups.PREFETCH_CHOICES}   # the prefetch race's, by name: bytes ahead


@dataclass
class Shape:
    """One (type, phase, rows, cols) the model multiplies, `count` tensors of it."""
    qtype: int
    phase: str            # "decode" (one token) or "prefill" (PREFILL_TOKENS)
    n_rows: int
    n_cols: int
    count: int
    weights: np.ndarray = field(repr=False)   # uint8 blocks of one such tensor, as in the file
    copied: bool = True   # the model may copy it (model.weight_copies: all but the output)

    @property
    def key(self):
        return (type_name(self.qtype), self.phase, self.n_rows, self.n_cols)

    @property
    def n_tokens(self):
        return 1 if self.phase == "decode" else PREFILL_TOKENS

    def copy_layout(self, name):
        """The layout of this shape's `name` copy where this phase may take it, else None."""
        if not self.copied or name not in rowgroups.layout_choices(self.qtype, self.phase):
            return None
        layout = rowgroups.copy_layout(self.qtype, self.n_rows, name)
        if layout not in rowgroups.KERNELS:
            return None
        return layout if self.n_tokens >= rowgroups.min_tokens(layout) else None

    @property
    def copies(self):
        """The copies this phase may take for this shape, by name."""
        return [name for name in COPIES if self.copy_layout(name) is not None]


def model_shapes(gguf_file):
    """The matmul shapes of a model: every 2-D weight of a supported type, once per phase.
    token_embd is a matmul only as the tied output; the output runs on the last token only."""
    tensors = gguf_file.tensors
    tied = "output.weight" not in tensors
    found = {}
    for name, info in tensors.items():
        if len(info.shape) != 2 or info.qtype not in SUPPORTED:
            continue
        is_output = name == "output.weight" or (tied and name == "token_embd.weight")
        if name == "token_embd.weight" and not tied:
            continue
        n_cols, n_rows = int(info.shape[0]), int(info.shape[1])
        for phase in (("decode",) if is_output else PHASES):
            key = (info.qtype, phase, n_rows, n_cols)
            if key in found:
                found[key].count += 1
            else:
                found[key] = Shape(info.qtype, phase, n_rows, n_cols, 1, gguf_file.tensor_bytes(name),
                                   copied=not is_output)
    return sorted(found.values(), key=lambda s: (type_name(s.qtype), s.phase, s.n_rows, s.n_cols))


# --- 1. noise -----------------------------------------------------------------------------------

# --- 2. correctness -----------------------------------------------------------------------------

def _activations(n_tokens, n_cols, qtype, seed):
    x = np.random.default_rng(seed).standard_normal((n_tokens, n_cols)).astype(np.float32)  # (T, C)
    bufs = M.act_buffers(n_tokens, n_cols)
    M.quantize_act(M.act_kind(qtype), x, *bufs)
    return bufs


def gate(qtype, names, weights, n_cols, build=M.build_kernel):
    """{variant: None if it agrees with matmul_ref, else why not} on the first rows of the
    real weights, at the prefill token count with a tail and at one token."""
    rb = row_bytes(qtype, n_cols)
    n_rows = min(GATE_ROWS, weights.size // rb)
    w = np.ascontiguousarray(weights[:n_rows * rb])
    verdicts = {}
    cases = []
    for n_tokens in (GATE_TOKENS, 1):
        bufs = _activations(n_tokens, n_cols, qtype, seed=n_tokens)
        ref = np.empty((n_tokens, n_rows), np.float32)
        M.matmul_ref(qtype, w, n_rows, n_cols, *bufs, n_tokens, ref)
        cases.append((n_tokens, bufs, ref, _float_bound(qtype, w, n_rows, n_cols, bufs)))
    for name in names:
        verdicts[name] = None
        kernel = build(qtype, name)
        for n_tokens, bufs, ref, bound in cases:
            got = np.full((n_tokens, n_rows), np.nan, np.float32)
            kernel(w, n_rows, n_cols, *bufs, n_tokens, got)
            bad = _disagreements(got, ref, bound)
            if bad:
                verdicts[name] = (f"{bad} of {got.size} outputs at T={n_tokens} differ from the reference "
                                  + ("(bit-exact required)" if bound is None else "(beyond the float bound)"))
                break
    return verdicts


def gate_copy(shape, name, kernel=None):
    """None if the kernel of `shape`'s `name` copy (kernel: another, for tests) multiplies the
    copy of the real weights' first rows bit for bit as matmul_ref does their file blocks, at a
    batch the phase gives it (one token, or an odd batch the copy serves), or if there is no
    copy to multiply; else why not."""
    layout = shape.copy_layout(name)
    rb = row_bytes(shape.qtype, shape.n_cols)
    n_rows = min(GATE_ROWS + rowgroups.GROUP - 1, shape.weights.size // rb) // rowgroups.GROUP * rowgroups.GROUP
    w = np.ascontiguousarray(shape.weights[:n_rows * rb])
    copy = rowgroups.make_copy(shape.qtype, w, n_rows, shape.n_cols, name=name)
    if copy is None:
        return None    # the layout declines these weights (a Q8_0 quant of -128 without VNNI),
                       # as the model's load will: nothing runs, and nothing races (_race_args)
    n_tokens = 1 if shape.phase == "decode" else max(GATE_TOKENS, rowgroups.min_tokens(layout) + 1)
    bufs = _activations(n_tokens, shape.n_cols, shape.qtype, seed=n_tokens)
    ref = np.empty((n_tokens, n_rows), np.float32)
    M.matmul_ref(shape.qtype, w, n_rows, shape.n_cols, *bufs, n_tokens, ref)
    got = np.full((n_tokens, n_rows), np.nan, np.float32)
    (kernel or rowgroups.KERNELS[layout])(copy, n_rows, shape.n_cols, *bufs, n_tokens, got)
    bad = _disagreements(got, ref, None)
    return f"{bad} of {got.size} outputs at T={n_tokens} differ from the reference (bit-exact required)" if bad else None


def _float_bound(qtype, w, n_rows, n_cols, bufs):
    """None for the integer formats (exact); per output the float32 fold bound otherwise."""
    if qtype not in (F32, F16, BF16):
        return None
    xf = bufs[3].astype(np.float64)
    W = np.abs(M.dequantize(qtype, w, n_rows, n_cols).astype(np.float64))
    return (n_cols / 64 + FLOAT_ULPS) * 2.0 ** -24 * (np.abs(xf) @ W.T)


def _disagreements(got, ref, bound):
    if bound is None:
        return int(np.count_nonzero(got.view(np.uint32) != ref.view(np.uint32)))
    ok = np.abs(got.astype(np.float64) - ref) <= bound
    return int(np.count_nonzero(~ok))


# --- 3. races -----------------------------------------------------------------------------------

def _race_args(shape, copy=None):
    """The calls a race times on `shape` (copy: on its copy of that name; None where the layout
    declines the weights): one (w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out) for
    prefill; for decode a list of them over copies of the weight, taken in turn, so each call
    reads its weight from memory (in a model a token reads every weight once: a decode race on
    a cache-hot weight ranked tiles that lose in generation)."""
    rb = row_bytes(shape.qtype, shape.n_cols)
    n_rows = shape.n_rows
    if shape.phase == "prefill":   # per row tile the work is alike: a slice ranks like the whole
        n_rows = min(n_rows, max(64, PREFILL_MACS // (shape.n_cols * shape.n_tokens)))
        if n_rows < shape.n_rows:
            n_rows -= n_rows % rowgroups.GROUP    # whole groups, for the copy and the file alike
    w = shape.weights[:n_rows * rb]
    if copy:
        w = rowgroups.make_copy(shape.qtype, w, n_rows, shape.n_cols, name=copy)
        if w is None:
            return None
    bufs = _activations(shape.n_tokens, shape.n_cols, shape.qtype, seed=0)
    out = np.empty((shape.n_tokens, n_rows), np.float32)
    if shape.phase == "prefill":
        return (w, n_rows, shape.n_cols, *bufs, shape.n_tokens, out)
    n_copies = -(-COLD_BYTES // w.size)
    copies = [w] if n_copies <= 1 else np.tile(np.asarray(w), n_copies).reshape(-1, w.size)
    return [(c, n_rows, shape.n_cols, *bufs, shape.n_tokens, out) for c in copies]


def duel(qtype, challenger, incumbent, shapes, budget_s, build, contenders=None):
    """Paired rounds of challenger against incumbent over `shapes` (one sample of each per
    shape per round, order alternating, weighted by tensor count): True when the challenger
    is faster in so many rounds that chance explains it with p < DUEL_P (a sign test) and by
    REPLACE_MARGIN in the median round. Either may be one of COPIES, the kernel of the shapes'
    copies of that name; contenders(names, shape) -> ({name: kernel}, {name: race calls})
    names them otherwise (the prefetch race's distances).
    Returns (won, p value, median round time ratio)."""
    contenders = contenders or (lambda names, s: _contenders(qtype, names, s, build))
    cases = [(s.count,) + contenders((challenger, incumbent), s) for s in shapes]
    reps = [_reps(pair, args)[0] for _, pair, args in cases]
    wins, ratios = 0, []
    start = time.perf_counter()
    n_rounds = 0
    while n_rounds < MIN_DUEL_ROUNDS or (time.perf_counter() - start < budget_s and n_rounds < MAX_DUEL_ROUNDS):
        order = (challenger, incumbent) if n_rounds % 2 == 0 else (incumbent, challenger)
        total = dict.fromkeys((challenger, incumbent), 0.0)
        for (count, pair, args), r in zip(cases, reps):
            for name in order:
                total[name] += count * _sample(pair[name], args[name], r)
        wins += total[challenger] < total[incumbent]
        ratios.append(total[challenger] / total[incumbent])
        n_rounds += 1
    p_value = sum(math.comb(n_rounds, k) for k in range(wins, n_rounds + 1)) / 2 ** n_rounds
    ratio = float(np.median(ratios))
    return p_value < DUEL_P and ratio < 1 - REPLACE_MARGIN, p_value, ratio


def _contenders(qtype, names, shape, build):
    """({name: kernel}, {name: race calls}) on `shape` for file variants and COPIES."""
    kernels, args, file_args = {}, {}, None
    for name in names:
        if name in COPIES:
            kernels[name], args[name] = rowgroups.KERNELS[shape.copy_layout(name)], _race_args(shape, copy=name)
        else:
            file_args = file_args or _race_args(shape)
            kernels[name], args[name] = build(qtype, name), file_args
    return kernels, args


# --- 4. the whole tune --------------------------------------------------------------------------

@dataclass
class Outcome:
    """The result for one weight type and phase over this model's tensors of it."""
    qtype: int
    phase: str
    n_shapes: int
    default: str
    incumbent: str        # in force before this tune (sidecar, profile or default; pins aside)
    winner: str
    shape_winners: dict   # shape key -> variant, where a shape has its own
    default_s: float      # the default variant's time summed over the tensors
    chosen_s: float       # the same for what is now chosen (winner, or the shape's own)

    @property
    def gain(self):
        """Speed of what is now chosen over the default variant."""
        return self.default_s / self.chosen_s


@dataclass
class Report:
    outcomes: list
    rejected: dict        # (type name, variant) -> why the gate refused it
    notes: list           # changes that lost their duel
    noise: float
    seconds: float
    path: object
    skipped: bool = False   # a valid sidecar covered every shape: nothing was raced


def covered(doc, shapes):
    have = {tuple(e["key"]) for e in doc.get("shapes", [])}
    return all(s.key in have for s in shapes)


def tune(shapes, budget_s=60.0, force=False, threads=None, on_step=None, build=M.build_kernel,
         variants=None, model=None):
    """Race the variants of every type in `shapes`, write the sidecar, return a Report.
    force: tune on a noisy machine and re-race shapes a valid sidecar already has."""
    t_start = time.perf_counter()
    variants = variants or M.VARIANTS
    on_step = on_step or (lambda what: None)
    here = sidecar.machine()
    doc, _ = sidecar.read(here=here)
    if doc is not None and covered(doc, shapes) and not force:
        medians = _recorded(doc, shapes)
        outcomes = _summaries(shapes, medians, variants, doc["winners"])
        layouts, _ = sidecar.resolve_layouts(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices, pin_text="", doc=doc)
        for owner, name, group in _prefetch_groups(shapes, doc["winners"], layouts):
            ahead = doc["winners"].get(type_name(owner), {}).get(sidecar.PREFETCH_KEY)
            if ahead is not None:
                outcomes += filter(None, [_prefetch_outcome(owner, name, group, medians, int(ahead), int(ahead))])
        return Report(outcomes, {}, [], doc["provenance"].get("noise", math.nan), 0.0, sidecar_path(), skipped=True)
    if threads:
        numba.set_num_threads(threads)
    noise, reason = probe_noise()
    if noise > NOISE_LIMIT and not force:
        raise Noisy(f"the machine is too busy to rank kernels: {reason}. Stop other work and "
                    "tune again, or pass --force to tune anyway")
    incumbents, _ = sidecar.resolve(variants, pin_text="", doc=doc or {})
    layouts, _ = sidecar.resolve_layouts(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices, pin_text="", doc=doc or {})
    share = budget_s / (2 * len(shapes))   # half for the races, half for the duels
    rejected, medians = {}, {}
    for qtype in dict.fromkeys(s.qtype for s in shapes):
        group = [s for s in shapes if s.qtype == qtype]
        names = [n for n, _ in variants[qtype]]
        on_step(f"gate {type_name(qtype)} ({len(names)} variants)")
        verdicts = gate(qtype, names, group[0].weights, group[0].n_cols, build)
        for phase in PHASES:      # each copy's kernel, where this phase may take it
            for copy in COPIES:
                copied = [s for s in group if s.phase == phase and copy in s.copies]
                if copied:
                    why = gate_copy(copied[0], copy)
                    verdicts[copy, phase] = why
                    if why:
                        rejected[type_name(qtype), f"{copy} ({phase})"] = why
        rejected.update({(type_name(qtype), n): why for n, why in verdicts.items() if why and n in names})
        kernels = {n: build(qtype, n) for n in names if not verdicts[n]}
        for s in group:
            on_step(f"race {type_name(qtype)} {s.phase} {s.n_rows}x{s.n_cols}")
            racing = {n: kernels[n] for n in sidecar.offered(variants[qtype], s.phase) if n in kernels}
            args = dict.fromkeys(racing, _race_args(s))
            for copy in s.copies:
                copy_args = _race_args(s, copy=copy) if verdicts.get((copy, s.phase), "") is None else None
                if copy_args is not None:
                    racing[copy], args[copy] = rowgroups.KERNELS[s.copy_layout(copy)], copy_args
            medians[s.key] = race(racing, args, share)
    winners, notes = {}, []
    for qtype, phase in dict.fromkeys((s.qtype, s.phase) for s in shapes):
        group = [s for s in shapes if s.qtype == qtype and s.phase == phase]
        chosen = _decide(qtype, phase, group, medians, incumbents[qtype, phase].variant, share, build,
                         on_step, notes)
        if (qtype, phase) in layouts:
            chosen.update(_decide_layout(qtype, phase, group, medians, chosen, layouts[qtype, phase].variant,
                                         share, build, on_step, notes))
        winners.setdefault(type_name(qtype), {}).update(chosen)
    outcomes = _summaries(shapes, medians, variants, winners, incumbents, layouts)
    for owner, name, group in _prefetch_groups(shapes, winners, layouts):
        incumbent = rowgroups.prefetch_in_force(owner, name)
        winner, why = _race_prefetch(owner, name, group, share, on_step, notes, medians)
        if why:
            rejected[type_name(owner), f"{name} prefetch"] = why
        if winner is not None:
            winners.setdefault(type_name(owner), {})[sidecar.PREFETCH_KEY] = str(winner)
            outcomes += filter(None, [_prefetch_outcome(owner, name, group, medians, incumbent, winner)])
    doc = _merged(doc, here, shapes, medians, winners, noise, force, threads, model)
    doc["provenance"]["seconds"] = round(time.perf_counter() - t_start, 1)
    path = sidecar.write(doc)
    return Report(outcomes, rejected, notes, noise, doc["provenance"]["seconds"], path)


def _totals(group, medians):
    """file variant -> seconds summed over the tensors of the group (variants timed on every
    shape; COPIES are layouts, decided apart)."""
    common = set.intersection(*(set(medians[s.key]) for s in group)) - set(COPIES) - set(AHEAD)
    return {v: sum(s.count * medians[s.key][v] for s in group) for v in common}


def _decide(qtype, phase, group, medians, incumbent, share, build, on_step, notes):
    """{phase or shape key: variant} for one type and phase: the least summed time, then per
    shape a variant that beats that by SHAPE_GAIN; every change from what is in force must
    win a duel first (the ones that lose are told in `notes`)."""
    totals = _totals(group, medians)
    best = min(totals, key=totals.get)
    winner = incumbent if incumbent in totals else best
    if best != winner:
        winner = _challenge(qtype, best, winner, group, share * len(group), build, on_step, notes,
                            f"{type_name(qtype)} {phase}")
    chosen = {phase: winner}
    for s in group:
        own = min((v for v in medians[s.key] if v not in COPIES and v not in AHEAD), key=medians[s.key].get)
        if own != winner and medians[s.key][own] < (1 - SHAPE_GAIN) * medians[s.key].get(winner, math.inf):
            where = f"{type_name(qtype)} {sidecar.shape_key(phase, s.n_rows, s.n_cols)}"
            if _challenge(qtype, own, winner, [s], share, build, on_step, notes, where) == own:
                chosen[sidecar.shape_key(phase, s.n_rows, s.n_cols)] = own
    return chosen


def _file_winner(chosen, shape):
    """The file variant `chosen` ({phase or shape key: variant}) runs on `shape`."""
    return chosen.get(sidecar.shape_key(shape.phase, shape.n_rows, shape.n_cols), chosen[shape.phase])


def _layout_times(group, medians, chosen):
    """(copied shapes, {layout: seconds summed over their tensors}): "file", the file variant
    each shape runs, and each copy that raced, which on a shape where it did not (its rows do
    not group) counts the file's time, as the model then keeps the file's blocks there."""
    copied = [s for s in group if set(COPIES) & set(medians[s.key]) and _file_winner(chosen, s) in medians[s.key]]
    raced = [c for c in COPIES if any(c in medians[s.key] for s in copied)]

    def time_of(layout, s):
        return medians[s.key].get(layout, medians[s.key][_file_winner(chosen, s)])

    return copied, {layout: sum(s.count * time_of(layout, s) for s in copied) for layout in ["file"] + raced}


def _decide_layout(qtype, phase, group, medians, chosen, incumbent, share, build, on_step, notes):
    """{layout_key(phase): "x8", "x16", "p16" or "file"}, or {} where no tensor's copy raced: the
    fastest in sum over the copied tensors; a change from what is in force must win a duel of
    the two layouts' kernels (the file's: its winner) on the tensors both can serve."""
    copied, times = _layout_times(group, medians, chosen)
    if not copied:
        return {}
    best = min(times, key=times.get)
    if best != incumbent and incumbent in times:
        as_variant = {"file": chosen[phase]}
        pair = [as_variant.get(name, name) for name in (best, incumbent)]
        both = [s for s in copied if all(p in medians[s.key] for p in pair)]
        where = f"{type_name(qtype)} {layout_key(phase)}"
        if not both or _challenge(qtype, *pair, both, share * len(both), build, on_step, notes, where) != pair[0]:
            best = incumbent
    return {layout_key(phase): best}


def _prefetch_groups(shapes, winners, layouts):
    """[(format, copy name, decode shapes)]: per format whose copies' prefetch the decode
    shapes' copies take (Q5_0 rows in Q8_0's copy take Q8_0's), the copy decode takes after
    this tune, and the shapes it serves."""
    groups = {}
    for qtype in dict.fromkeys(s.qtype for s in shapes if s.phase == "decode"):
        name = winners.get(type_name(qtype), {}).get(layout_key("decode"))
        if name is None and (qtype, "decode") in layouts:
            name = layouts[qtype, "decode"].variant
        for s in shapes:
            layout = s.copy_layout(name) if s.qtype == qtype and s.phase == "decode" and name in COPIES else None
            if layout in COPY_LAYOUTS:
                groups.setdefault((COPY_LAYOUTS[layout][0], name), []).append(s)
    return [(owner, name, group) for (owner, name), group in groups.items()]


def _race_prefetch(owner, name, group, share, on_step, notes, medians):
    """(winner's bytes or None, why the gate refused a distance or None): each distance's
    kernel of `owner`'s `name` copies gated, then raced on the decode shapes `group` (their
    medians into medians[shape key], by AHEAD name); the least summed time, after a duel where
    it changes what is in force."""
    where = f"{type_name(owner)} {sidecar.PREFETCH_KEY}"
    on_step(f"race {where}")
    kernels = {n: rowgroups.copy_form(owner, name, p)[2] for n, p in AHEAD.items()}
    for n, kernel in kernels.items():
        why = gate_copy(group[0], name, kernel=kernel)
        if why:
            return None, f"{AHEAD[n]} bytes ahead: {why}"
    calls = {s.key: _race_args(s, copy=name) for s in group}
    group = [s for s in group if calls[s.key] is not None]     # None: the layout declines them
    for s in group:
        medians[s.key].update(race(kernels, calls[s.key], share))
    if not group:
        return None, None
    totals = {n: sum(s.count * medians[s.key][n] for s in group) for n in AHEAD}
    best = min(totals, key=totals.get)
    incumbent = f"pf{rowgroups.prefetch_in_force(owner, name)}"
    if best != incumbent:
        def contenders(names, s):
            return {n: kernels[n] for n in names}, {n: calls[s.key] for n in names}
        best = _challenge(owner, best, incumbent, group, share * len(group), None, on_step, notes, where,
                          contenders)
    return AHEAD[best], None


def _prefetch_outcome(owner, name, group, medians, incumbent, winner):
    """The Outcome of the prefetch of `owner`'s `name` copies over the decode shapes `group`
    (bytes ahead: incumbent, winner), or None where their medians lack it."""
    default = rowgroups.PREFETCH_DEFAULTS.get(group[0].copy_layout(name), 0)
    if not all(f"pf{p}" in medians[s.key] for s in group for p in (default, winner)):
        return None

    def total(p):
        return sum(s.count * medians[s.key][f"pf{p}"] for s in group)
    return Outcome(owner, sidecar.PREFETCH_KEY, len(group), str(default), str(incumbent), str(winner), {},
                   total(default), total(winner))


def _challenge(qtype, challenger, incumbent, group, budget_s, build, on_step, notes, where, contenders=None):
    on_step(f"duel {where}: {challenger} against {incumbent}")
    won, p_value, ratio = duel(qtype, challenger, incumbent, group, budget_s, build, contenders)
    if won:
        return challenger
    notes.append(f"{where}: {challenger} was faster by median but lost its duel against {incumbent} "
                 f"(sign test p={p_value:.2g}, median round {ratio:.2f}x)")
    return incumbent


def _summaries(shapes, medians, variants, winners, incumbents=None, layouts=None):
    """One Outcome per (type, phase) in `shapes`, timed by `medians`, for what `winners` chose;
    then one per (type, phase) whose copies raced, for the layout."""
    outcomes = []
    for qtype, phase in dict.fromkeys((s.qtype, s.phase) for s in shapes):
        group = [s for s in shapes if s.qtype == qtype and s.phase == phase]
        chosen = winners.get(type_name(qtype), {})
        default = sidecar.offered(variants[qtype], phase)[0]
        winner = chosen.get(phase, default)
        per_shape = {s.key: chosen.get(sidecar.shape_key(phase, s.n_rows, s.n_cols), winner) for s in group}
        if not all({default, per_shape[s.key]} <= set(medians[s.key]) for s in group):
            continue   # rejected by the gate, or not timed: no gain to state
        outcomes.append(Outcome(
            qtype, phase, len(group), default, incumbents[qtype, phase].variant if incumbents else winner,
            winner, {k[2:]: v for k, v in per_shape.items() if v != winner},
            sum(s.count * medians[s.key][default] for s in group),
            sum(s.count * medians[s.key][per_shape[s.key]] for s in group)))
        outcomes += _layout_summary(qtype, phase, group, medians, {phase: winner, **chosen}, layouts)
    return outcomes


def _layout_summary(qtype, phase, group, medians, chosen, layouts):
    """[Outcome] of the layout of (qtype, phase), or [] where no copy raced."""
    key = layout_key(phase)
    default = rowgroups.LAYOUT_DEFAULTS.get((qtype, phase))
    copied, times = _layout_times(group, medians, chosen)
    if default not in times or not copied:
        return []
    winner = chosen.get(key, default)
    if winner not in times:
        return []
    incumbent = layouts[qtype, phase].variant if layouts else winner
    return [Outcome(qtype, key, len(copied), default, incumbent, winner, {}, times[default], times[winner])]


def _recorded(doc, shapes):
    entries = {tuple(e["key"]): e for e in doc["shapes"]}
    return {s.key: {v: ms / 1e3 for v, ms in entries[s.key]["ms"].items()} for s in shapes}


def _merged(doc, here, shapes, medians, winners, noise, force, threads, model):
    """The sidecar after this tune: a valid old one's shapes and other types, plus these."""
    doc = doc or sidecar.new_doc(here)
    doc["provenance"] = {**here, "noise": round(noise, 4), "forced": bool(force),
                         "threads": threads or numba.get_num_threads(),
                         "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    entries = {tuple(e["key"]): e for e in doc.get("shapes", [])}
    for s in shapes:
        ranked = sorted(medians[s.key].items(), key=lambda kv: kv[1])
        entries[s.key] = {"key": list(s.key), "count": s.count, "ms": {v: round(t * 1e3, 5) for v, t in ranked}}
    doc["shapes"] = [entries[k] for k in sorted(entries)]
    for tname, chosen in winners.items():
        old = doc["winners"].get(tname, {})
        phases = {k.split()[0] for k in chosen}
        kept = {k: v for k, v in old.items() if k.split()[0] not in phases}
        doc["winners"][tname] = {**kept, **chosen}
    if model:
        doc["models"] = sorted(set(doc.get("models", [])) | {os.fspath(model)})
    return doc


@dataclass
class InForce:
    rows: list      # [type name, phase or shape, variant, where the choice comes from]
    path: object    # the sidecar's path
    status: str     # when and how it was tuned, why it was refused, or "none"
    notes: list     # pins and sidecar entries refused or skipped on the way


def in_force(qtypes=None):
    """What runs for each weight type (of `qtypes`, or all) and phase, and why."""
    choices, notes = sidecar.resolve(M.VARIANTS)
    layouts, layout_notes = sidecar.resolve_layouts(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices)
    doc, refusal = sidecar.read()
    named = [(key, key[1] if len(key) == 2 else sidecar.shape_key(*key[1:]), c) for key, c in choices.items()]
    named += [(key, sidecar.layout_key(key[1]), c) for key, c in layouts.items()]
    ahead, ahead_notes = sidecar.resolve_prefetch(rowgroups.COPIED, rowgroups.PREFETCH_CHOICES)
    for (qtype, phase), c in layouts.items():     # the prefetch of the copy decode takes
        if phase == "decode" and c.variant in COPIES:
            owner = qtype if (qtype, c.variant) in rowgroups.LAYOUT_OF else rowgroups.Q8_0
            bytes_ahead = str(rowgroups.prefetch_in_force(qtype, c.variant, {}))
            named.append(((qtype, phase), sidecar.PREFETCH_KEY, ahead.get(owner, sidecar.Choice(bytes_ahead, "default"))))
    rows = [[sidecar.type_name(key[0]), phase, choice.variant, choice.source]
            for key, phase, choice in sorted(named, key=lambda r: (sidecar.type_name(r[0][0]), r[1]))
            if qtypes is None or key[0] in qtypes]
    notes += [n for n in layout_notes + ahead_notes if n not in notes]
    for note in notes:     # as building the dispatch would: `tune --show` builds none
        warnings.warn(note, sidecar.SidecarWarning, stacklevel=2)
    if doc:
        prov = doc["provenance"]
        status = (f"tuned {prov.get('created')} in {prov.get('seconds')} s, noise {prov.get('noise', 0):.1%}"
                  + (" (forced)" if prov.get("forced") else ""))
    else:
        status = str(refusal) if refusal else "none"
    return InForce(rows, sidecar.sidecar_path(), status, notes)

"""Parity of our engine with llama.cpp: prompt ids, then greedy ids side by side, and, where they
part, each engine's logit gaps there and the first layer whose activations drift apart.

The near-tie rule (from the seed project): when the two engines pick different tokens whose
logits they both hold within `tie_gap` of each other, that is a near-tie, reported as such,
not as parity and not as a fault. A broken kernel shows as a wide gap flipped, or as drift
inside the network.
"""
from dataclasses import asdict, dataclass, field

import numpy as np

# Two faithful engines (the same quantized arithmetic, other summation orders) should differ
# by hundredths of a logit and well under 0.1% of a tensor's RMS (llama.cpp at 1 and at 2
# threads gives identical logits). More means a different computation somewhere.
DEFAULT_TIE_GAP = 0.1        # logits
DEFAULT_DRIFT_BOUND = 0.001  # of a tensor's RMS
PRINT_ROUNDING = 5e-5       # llama-eval-callback prints values with 4 decimals
MAX_EXACT_STEPS = 32        # single-token decodes dumped bit for bit after the prompt batch

# Our trace names that llama.cpp spells differently in some families: with post-norms (gemma),
# its `attn_out`/`ffn_out` come before the norm and the residual sum is `sa_out`.
REF_NAMES = {"attn_out": ("attn_post_norm", "attn_out"), "ffn_inp": ("ffn_inp", "sa_out"),
             "ffn_out": ("ffn_post_norm", "ffn_out")}


@dataclass
class Divergence:
    step: int                  # index of the generated token where the engines first differ
    position: int              # its position in the sequence (prompt tokens + step)
    ours_id: int
    ref_id: int
    ours_text: str
    ref_text: str
    ours_gap: float            # our top-1 minus top-2 logit there
    ours_margin: float         # ours[our token] - ours[its token]
    ref_gap: float = None      # the reference's top-1 minus top-2 (None: logits unavailable)
    ref_margin: float = None   # ref[its token] - ref[our token] (None: ours not in its top 8)
    near_tie: bool = False


@dataclass
class Drift:
    """Our trace against llama-eval-callback's printed values and sums, layer by layer."""
    bound: float
    tokens: list               # the ids both engines ran
    rows: list = field(default_factory=list)   # [layer, our name, its name, error], graph order
    first: list = None         # the first row whose error passes the bound
    worst: list = None
    note: str = ""


@dataclass
class PromptResult:
    prompt: str
    verdict: str               # parity | near-tie | divergence | tokenizer
    prompt_ids: list
    ref_prompt_ids: list
    ids: list = field(default_factory=list)
    ref_ids: list = field(default_factory=list)
    text: str = ""
    ref_text: str = ""
    n_matched: int = 0
    min_gap: float = None      # smallest top-2 gap of either engine over the matched steps
    max_logit_delta: float = None  # largest |ours - ref| logit of the chosen token, matched steps
    max_gap_delta: float = None    # largest |ours - ref| top-1 minus top-2 logit, matched steps
    divergence: Divergence = None
    drift: Drift = None
    exact: "ExactDrift" = None

    def to_dict(self):
        return asdict(self)


@dataclass
class Step:
    """One step of our greedy run: our choice, its logit, our gap, our logits at the
    reference's candidate ids (its choice and its top 8)."""
    best: int
    logit: float
    gap: float
    probes: dict


def verify_prompt(model, ref_run, prompt, n_predict, tie_gap=DEFAULT_TIE_GAP):
    """Compare our greedy run on `prompt` with the reference's (a RefRun)."""
    ids = model.tokenizer.encode(prompt, add_special=True, parse_special=True)
    ref_ids = [int(i) for i in ref_run.ids]
    result = PromptResult(prompt, "parity", ids, [int(i) for i in ref_run.prompt_ids],
                          ref_ids=ref_ids, ref_text=piece_text(model, ref_ids, ref_run.pieces))
    if ids != result.ref_prompt_ids:
        result.verdict = "tokenizer"
        return result
    ours, steps = greedy_ours(model, ids, n_predict, ref_run)
    result.ids, result.text = ours, piece_text(model, ours)
    n = 0
    while n < min(len(ours), len(ref_ids)) and ours[n] == ref_ids[n]:
        n += 1
    result.n_matched = n
    if ref_run.top is not None and n:
        _agreement(result, steps[:n], ref_run.top[:n])
    if ours != ref_ids:
        result.divergence = divergence_at(model, ids, n, steps, ref_run, tie_gap)
        result.verdict = "near-tie" if result.divergence.near_tie else "divergence"
    return result


def _agreement(result, steps, ref_top):
    """How close the engines' logits were on the steps where they agreed."""
    gaps, deltas, gap_deltas = [], [], []
    for s, ((a, la), (b, lb), *_) in zip(steps, ref_top):
        gaps += [s.gap, la - lb]
        deltas.append(abs(s.logit - la))
        gap_deltas.append(abs((s.probes[a] - s.probes[b]) - (la - lb)))
    result.min_gap, result.max_logit_delta, result.max_gap_delta = min(gaps), max(deltas), max(gap_deltas)


def greedy_ours(model, ids, n_predict, ref_run):
    """Our greedy ids and a Step for each (stopping after an end-of-generation id)."""
    model.reset()
    logits = model.eval(ids)
    out, steps = [], []
    for s in range(n_predict):
        top2 = np.argpartition(-logits, 2)[:2]
        best, second = sorted(top2.tolist(), key=lambda i: (-logits[i], i))
        probe = set(ref_run.ids[s:s + 1])
        if ref_run.top is not None and s < len(ref_run.top):
            probe |= {int(i) for i, _ in ref_run.top[s]}
        steps.append(Step(best, float(logits[best]), float(logits[best] - logits[second]),
                          {i: float(logits[i]) for i in probe}))
        out.append(best)
        if best in model.tokenizer.eog_ids or s + 1 == n_predict:
            break
        logits = model.eval([best])
    return out, steps


def divergence_at(model, ids, n, steps, ref_run, tie_gap):
    """The Divergence at step n; a run that stopped early counts as token -1 there."""
    ours_id = steps[n].best if n < len(steps) else -1
    ref_id = int(ref_run.ids[n]) if n < len(ref_run.ids) else -1
    div = Divergence(n, len(ids) + n, ours_id, ref_id,
                     piece_text(model, [ours_id]) if ours_id >= 0 else "(stopped)",
                     piece_text(model, [ref_id], ref_run.pieces[n:n + 1] if ref_run.pieces else None)
                     if ref_id >= 0 else "(stopped)", 0.0, 0.0)
    if ours_id < 0 or ref_id < 0:
        return div
    step = steps[n]
    div.ours_gap, div.ours_margin = step.gap, step.logit - step.probes[ref_id]
    if ref_run.top is not None:
        top = {int(i): v for i, v in ref_run.top[n]}
        div.ref_gap = ref_run.top[n][0][1] - ref_run.top[n][1][1]
        if ours_id in top:
            div.ref_margin = top[ref_id] - top[ours_id]
            div.near_tie = div.ours_margin + div.ref_margin <= tie_gap
    return div


def piece_text(model, ids, pieces=None):
    """Text of ids; pieces, when given, are the reference's own bytes (as latin-1 strings)."""
    if pieces is not None:
        raw = b"".join(p.encode("latin-1") for p in pieces)
    else:
        raw = b"".join(model.tokenizer.token_to_piece(i) for i in ids)
    return raw.decode("utf-8", "replace")


# -- where inside the network ----------------------------------------------------------------


def find_drift(model, ref, ref_model_path, result, n_threads, bound=DEFAULT_DRIFT_BOUND):
    """Layer drift on the prompt plus the tokens both engines agreed on, whose last logits are
    where they parted; on the prompt alone when that text does not tokenize back the same."""
    agreed = result.prompt_ids + result.ref_ids[:result.n_matched]
    text = result.prompt + piece_text(model, result.ref_ids[:result.n_matched])
    drift = layer_drift(model, ref, ref_model_path, text, n_threads, bound)
    if drift.tokens != agreed and result.n_matched:
        drift = layer_drift(model, ref, ref_model_path, result.prompt, n_threads, bound)
        drift.note = drift.note or "ran on the prompt alone: prompt + agreed text tokenizes differently"
    return drift


def layer_drift(model, ref, ref_model_path, text, n_threads, bound=DEFAULT_DRIFT_BOUND):
    """Run `text` through llama-eval-callback and through our engine with a trace; name the
    first (layer, tensor) in graph order whose values or sum differ by more than `bound`
    (relative to the tensor's size, see tensor_error)."""
    from ..llm.forward import TRACE_NAMES
    ref_ids, dumps = ref.eval_callback(ref_model_path, text, n_threads)
    drift = Drift(bound, ref_ids)
    if len(ref_ids) > model.n_batch:
        drift.note = f"{len(ref_ids)} tokens exceed one batch of {model.n_batch}: not traced"
        return drift
    trace = model.new_trace(len(ref_ids))
    model.reset()
    model.eval(ref_ids, trace=trace)
    ours = model.trace_tensors(trace)
    printed = {d.name: d for d in dumps if d.values.size}   # a name printed twice: the last wins
    keys = sorted(ours, key=lambda k: (int(k.rsplit("-", 1)[1]), TRACE_NAMES.index(k.rsplit("-", 1)[0])))
    for key in keys:
        name, il = key.rsplit("-", 1)
        ref_name = next((r for r in REF_NAMES.get(name, (name,)) if f"{r}-{il}" in printed), None)
        err = tensor_error(ours[key], printed[f"{ref_name}-{il}"]) if ref_name else None
        if err is not None:
            drift.rows.append([int(il), name, ref_name, err])
    if not drift.rows:
        drift.note = "no tensor of our trace matched llama-eval-callback's dump"
        return drift
    drift.worst = max(drift.rows, key=lambda r: r[3])
    drift.first = next((r for r in drift.rows if r[3] > bound), None)
    return drift


def tensor_error(ours, dump):
    """max(error of the printed values, error of the sum), relative to our tensor's size.

    ours: (T, width); the dump may hold fewer tokens (llama.cpp keeps only the output rows in
    the last layer): those are our last ones. The RMS of the printed values' errors (less
    their print rounding) over our RMS; the sum's error over our L2 norm (a sum of N
    independent errors grows as sqrt(N), as the norm does). None when the shapes do not fit.
    """
    width = ours.shape[1]
    if dump.numel % width or dump.numel // width > ours.shape[0]:
        return None
    flat = np.asarray(ours[ours.shape[0] - dump.numel // width:], np.float64).reshape(-1)
    norm = float(np.sqrt(flat @ flat))
    if norm == 0.0:
        return None
    rms = norm / np.sqrt(flat.size)
    diff = np.maximum(np.abs(flat[dump.index] - dump.values) - PRINT_ROUNDING, 0.0)
    value_err = float(np.sqrt(np.mean(diff * diff))) / rms
    sum_err = abs(float(flat.sum()) - dump.total) / norm if dump.total is not None else 0.0
    return max(value_err, sum_err)


# -- exact, through the bindings ---------------------------------------------------------------


@dataclass
class TensorDiff:
    """One tensor of our trace against llama.cpp's copy of it, bit for bit."""
    step: int                  # 0: the prompt batch; s: the s-th single-token decode after it
    name: str                  # ours, e.g. "kqv_out-0"
    ref_name: str              # llama.cpp's callback name
    n: int                     # elements compared
    n_diff: int                # elements whose bits differ
    max_ulps: int
    max_abs: float

    @property
    def equal(self):
        return self.n_diff == 0


@dataclass
class ExactDrift:
    """Every tensor both engines name, in llama.cpp's graph order, per decode step."""
    tokens: list               # the prompt batch
    step_ids: list             # then these, one per decode
    rows: list = field(default_factory=list)   # TensorDiff, graph order, step by step
    first: TensorDiff = None   # the first one that differs in any bit

    def to_dict(self):
        return asdict(self)


def ulps(a, b):
    """Distance in units of the last place between float32 arrays (0 where bits are equal)."""
    def ordered(x):
        i = np.ascontiguousarray(x, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def exact_drift(model, ref, ref_model_path, prompt_ids, step_ids, n_threads):
    """Run the prompt as one batch, then each of step_ids alone, through both engines, and
    compare every tensor of our trace with llama.cpp's (its last node of that name)."""
    dumps = ref.dump_tensors(ref_model_path, prompt_ids, step_ids, n_threads, model.n_ctx)
    drift = ExactDrift(list(prompt_ids), list(step_ids))
    model.reset()
    for step, (ids, nodes) in enumerate(zip([list(prompt_ids)] + [[i] for i in step_ids], dumps)):
        trace = model.new_trace(len(ids))
        logits = model.eval(ids, trace=trace)
        tensors = model.trace_tensors(trace)
        tensors["result_output"] = logits[None, :]
        drift.rows += compare_step(step, tensors, nodes)
    drift.first = next((r for r in drift.rows if not r.equal), None)
    return drift


def compare_step(step, ours, nodes):
    """TensorDiffs of one decode: ours {name-il: (T, width)} against llama.cpp's nodes."""
    last = {name: (i, arr) for i, (name, arr) in enumerate(nodes)}
    rows = []
    for key, mine in ours.items():
        name, _, il = key.rpartition("-")
        if not name:
            ref_name = key if key in last else None
        else:
            ref_name = next((f"{r}-{il}" for r in REF_NAMES.get(name, (name,)) if f"{r}-{il}" in last), None)
        if ref_name is None:
            continue
        index, theirs = last[ref_name]
        width = mine.shape[1]
        if theirs.size % width or theirs.size // width > mine.shape[0]:
            continue
        theirs = theirs.reshape(-1, width)
        mine = np.asarray(mine[mine.shape[0] - theirs.shape[0]:], np.float32)
        d = ulps(mine, theirs)
        rows.append((index, TensorDiff(step, key, ref_name, int(d.size), int(np.count_nonzero(d)),
                                       int(d.max()), float(np.max(np.abs(mine - theirs))))))
    return [r for _, r in sorted(rows, key=lambda r: r[0])]


WORST_FIRST = ("tokenizer", "divergence", "near-tie")
FAILING = ("divergence", "tokenizer")
VERDICTS = ("parity", "near-tie", "divergence", "tokenizer")


def verify_prompts(model, reference, ref_path, prompts, n_predict, tie_gap=DEFAULT_TIE_GAP,
                   layers=None, drift_bound=DEFAULT_DRIFT_BOUND):
    """A PromptResult per prompt: llama.cpp's greedy ids (with logits when its bindings are
    there) against ours; where they part (or always, with layers=True; never with False), the
    first tensor that differs bit for bit, or without bindings the first layer that drifts."""
    runs = reference.greedy(ref_path, prompts, n_predict, model.n_threads, model.n_ctx)
    results = []
    for prompt, run in zip(prompts, runs):
        result = verify_prompt(model, run, prompt, n_predict, tie_gap)
        wanted = layers if layers is not None else result.verdict in ("divergence", "near-tie")
        if wanted and result.verdict != "tokenizer":
            if reference.has_bindings:
                steps = result.ref_ids[:min(result.n_matched, MAX_EXACT_STEPS)]
                result.exact = exact_drift(model, reference, ref_path, result.prompt_ids, steps,
                                           model.n_threads)
            elif reference.has_tool("llama-eval-callback"):
                result.drift = find_drift(model, reference, ref_path, result, model.n_threads, drift_bound)
        results.append(result)
    return results

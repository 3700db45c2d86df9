"""Parity of our Whisper with whisper.cpp: greedy transcriptions of the same samples, compared
token by token in the form whisper.cpp reports them, and the transcripts.

whisper.cpp reports segments: a start and end time (centiseconds) and the token ids in between,
without the timestamp that opens each segment (its time is the segment's t0). Our sampled
tokens are cut into segments by whisper.cpp's own rules (`whisper_segments`), so both sides
read as the same stream: per segment, its t0, then its tokens. Where the streams part, we name
the segment and token index, both tokens, and our top-2 logit gap there; our logit margin
between the two tokens within `tie_gap` is a near-tie (pywhispercpp gives no logits, so the
margin is ours alone).
"""
import math
from dataclasses import asdict, dataclass, field

from .verify_llm import DEFAULT_TIE_GAP
from ..asr.decode import DecodeOptions, check_language, transcribe

T0 = "t0"         # an entry holding a segment's start time rather than a token id


@dataclass(frozen=True)
class Entry:
    """One item of a reported stream: a segment's start time (kind T0, value in centiseconds)
    or a token id (kind "token"); for ours, the window and step that sampled it."""
    kind: str
    value: int
    segment: int
    index: int                 # token index within the segment (-1: its start time)
    window: int = None
    step: int = None

    @property
    def key(self):
        return self.kind, self.value


@dataclass
class AsrDivergence:
    segment: int               # where the streams first differ: segment index,
    index: int                 # and token index in it (-1: the segment's start time)
    ours_id: int               # -1: the stream ended there
    ref_id: int
    ours_text: str
    ref_text: str
    ours_gap: float = None     # our top-1 minus top-2 logit at that step
    ours_margin: float = None  # our logit of our token minus of its token (None: not in our top 8)
    near_tie: bool = False


@dataclass
class ClipResult:
    audio: str
    verdict: str               # parity | near-tie | divergence | transcript (same tokens, other
                               # text or language)
    duration: float
    language: str
    ref_language: str
    text: str = ""
    ref_text: str = ""
    ids: list = field(default_factory=list)       # [segment, index, kind, value] per entry
    ref_ids: list = field(default_factory=list)
    n_matched: int = 0
    min_gap: float = None      # smallest top-2 gap of ours over the matched entries
    divergence: AsrDivergence = None

    def to_dict(self):
        return asdict(self)


def greedy_options(language=None, task="transcribe", timestamps=True):
    """Greedy decoding only, as whisper.cpp is run: no temperature fallback."""
    return DecodeOptions(task=task, language=language, timestamps=timestamps, temperatures=(0.0,))


def verify_clip(model, ref, name, samples, opts, tie_gap=DEFAULT_TIE_GAP):
    """Compare our greedy transcription of `samples` with whisper.cpp's (a WhisperCpp)."""
    trace = []
    ours = transcribe(model, samples, opts, trace=trace)
    # an English-only model is told "en" (as ours is): whisper.cpp would otherwise detect a
    # language it then cannot use
    language = check_language(model.tokenizer, opts)
    theirs = ref.transcribe(samples, language, opts.task, opts.timestamps)
    tok = model.tokenizer
    mine = our_entries(trace, tok, opts.timestamps)
    other = ref_entries(theirs.segments, opts.timestamps)
    result = ClipResult(name, "parity", ours.duration, ours.language, theirs.language, ours.text,
                        theirs.text, ids=[_row(e) for e in mine], ref_ids=[_row(e) for e in other])
    n = 0
    while n < min(len(mine), len(other)) and mine[n].key == other[n].key:
        n += 1
    result.n_matched = n
    gaps = [g for g in (trace[e.window].steps[e.step].gap for e in mine[:n]) if math.isfinite(g)]
    result.min_gap = min(gaps) if gaps else None
    if n < max(len(mine), len(other)):
        result.divergence = divergence_at(tok, trace, mine, other, n, tie_gap)
        result.verdict = "near-tie" if result.divergence.near_tie else "divergence"
    elif ours.text != theirs.text or ours.language != theirs.language:
        result.verdict = "transcript"
    return result


def _row(e):
    return [e.segment, e.index, e.kind, e.value]


# -- the streams ----------------------------------------------------------------------------


def whisper_segments(tokens, seek, tok, timestamps, end=None):
    """whisper.cpp's segments of one window's sampled tokens: [(t0, t1, [(step, id)...], t0_step)].

    Its rules (whisper_full_with_state, step 3): with timestamps, tokens after the last
    timestamp are dropped; a timestamp after <|0.00|> with text before it closes a segment; the
    timestamps that follow are skipped, the last giving the next segment's t0; what remains at
    the end is a segment up to `end` (centiseconds; default: the last timestamp).
    """
    beg = tok.timestamp_begin
    at = lambda t: seek + 2 * (t - beg)                       # noqa: E731
    if timestamps:
        last = max((i for i, t in enumerate(tokens) if t > beg), default=-1)
        tokens = tokens[:last + 1]
    if not tokens:
        return []
    segments, text, i0 = [], False, 0
    t0 = at(tokens[0]) if tokens[0] >= beg else seek
    t0_step = 0
    i = 0
    while i < len(tokens):
        t = tokens[i]
        text = text or t < tok.eot
        if timestamps and t > beg:
            if text:
                segments.append((t0, at(t), list(enumerate(tokens))[i0:i + 1], t0_step))
            text, t0, t0_step = False, at(t), i
            while i + 1 < len(tokens) and tokens[i + 1] > beg:
                i += 1
                t0, t0_step = at(tokens[i]), i
            i0 = i + 1
        i += 1
    if text:
        last_ts = [t for t in tokens if t > beg]
        t1 = end if end is not None else (at(last_ts[-1]) if last_ts else seek + 3000)
        segments.append((t0, t1, list(enumerate(tokens))[i0:], t0_step))
    return segments


def our_entries(trace, tok, timestamps):
    """Our reported stream from the windows we decoded (no-speech windows left out)."""
    entries, n_seg = [], 0
    for w, window in enumerate(trace):
        if not window.kept:
            continue
        for t0, _t1, tokens, t0_step in whisper_segments(window.tokens, window.seek, tok, timestamps):
            if timestamps:
                entries.append(Entry(T0, t0, n_seg, -1, w, t0_step))
            entries += [Entry("token", t, n_seg, j, w, step) for j, (step, t) in enumerate(tokens)]
            n_seg += 1
    return entries


def ref_entries(segments, timestamps):
    entries = []
    for n, seg in enumerate(segments):
        if timestamps:
            entries.append(Entry(T0, seg.t0, n, -1))
        entries += [Entry("token", t, n, j) for j, t in enumerate(seg.tokens)]
    return entries


# -- where they part --------------------------------------------------------------------------


def divergence_at(tok, trace, mine, other, n, tie_gap):
    """The AsrDivergence at entry n; a stream that ended there counts as token -1."""
    ours = mine[n] if n < len(mine) else None
    theirs = other[n] if n < len(other) else None
    where = ours or theirs
    window, step = _step_at(trace, mine, n)
    seek = trace[window].seek if window is not None else 0
    ours_id = trace[window].tokens[step] if ours is not None else -1
    ref_id = _token_of(theirs, seek, tok) if theirs is not None else -1
    div = AsrDivergence(where.segment, where.index, ours_id, ref_id,
                        _text(tok, ours, ours_id), _text(tok, theirs, ref_id))
    if window is None or step >= len(trace[window].steps):
        return div
    s = trace[window].steps[step]
    div.ours_gap = s.gap if math.isfinite(s.gap) else None    # None: the rules left one token
    chosen = ours_id if ours_id >= 0 else tok.eot
    # when we stopped, our choice there was EOT (or the window ran out of context)
    if ref_id >= 0 and s.logit(chosen) is not None and s.logit(ref_id) is not None:
        div.ours_margin = s.logit(chosen) - s.logit(ref_id)
        div.near_tie = div.ours_margin <= tie_gap
    return div


def _step_at(trace, mine, n):
    """(window, step) of our entry n; past our last entry, the step after it (its EOT)."""
    if n < len(mine):
        return mine[n].window, mine[n].step
    if not mine:
        kept = [w for w, window in enumerate(trace) if window.kept]
        return (kept[0], 0) if kept else (None, None)
    last = mine[-1]
    return last.window, len(trace[last.window].tokens)


def _token_of(entry, seek, tok):
    """The token id an entry stands for; a start time as the timestamp of the window at seek."""
    if entry.kind != T0:
        return entry.value
    rel = (entry.value - seek) // 2
    return tok.timestamp_begin + rel if 0 <= rel <= 1500 else -1


def _text(tok, entry, token):
    if entry is None:
        return "(stopped)"
    if entry.kind == T0:
        return f"start {entry.value / 100:.2f} s"
    return tok.token_text(token)


WORST_FIRST = ("divergence", "transcript", "near-tie")
FAILING = ("divergence", "transcript")
VERDICTS = ("parity", "near-tie", "divergence", "transcript")

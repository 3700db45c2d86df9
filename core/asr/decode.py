"""Whisper decoding: openai-whisper's logit rules, greedy decoding with temperature fallback,
language detection, and the 30 s seek loop that turns timestamp tokens into segments.

The rules follow openai-whisper (decoding.py, transcribe.py): the SOT sequence, suppressed
tokens, no blank first token, timestamp pairs that never go back, a first timestamp of at most
1 s, timestamps forced when their total probability beats every text token. One difference,
shared with whisper.cpp: a window that ends before 30 s sees the log-mel of the zero padding
after the audio, not a window of zeros. And one rule of whisper.cpp's, not openai's: a window
stops at a timestamp within 100 ms of the end of the audio (there is nothing left to hear).
"""
import time
import zlib
from dataclasses import dataclass, field

import numpy as np

from dasllama.kernels.speech.encoder_ops import log_softmax as _log_softmax, logsumexp as _logsumexp

from .mel import HOP_LENGTH, N_FFT, N_FRAMES, SAMPLE_RATE
from .tokenizer import LANGUAGES

TIME_PRECISION = 0.02                  # seconds per timestamp step (2 mel frames)
INPUT_STRIDE = 2                       # mel frames per encoder position
MIN_FRAMES = 10                        # windows under 100 ms are not decoded (whisper.cpp)
TOP_K = 8                              # candidates a step records for `dasllama verify`
# A window whose samples all stay below -80 dBFS is digital silence: Whisper would hallucinate
# a word into it ("you"), so it is skipped without decoding.
SILENCE_PEAK = 1e-4


class TranscribeError(ValueError):
    """Options the model cannot serve (a language it lacks, translation on an English model)."""


@dataclass
class DecodeOptions:
    task: str = "transcribe"
    language: str = None               # None: detect (multilingual models) or English
    timestamps: bool = True
    temperatures: tuple = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    best_of: int = 5                   # candidates sampled at each temperature > 0
    compression_ratio_threshold: float = 2.4
    logprob_threshold: float = -1.0
    no_speech_threshold: float = 0.6
    condition_on_previous_text: bool = True
    max_initial_timestamp: float = 1.0
    seed: int = 0


@dataclass
class DecodeResult:
    tokens: list                       # sampled tokens, without the closing EOT
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    text: str = ""
    compression_ratio: float = 0.0
    at_audio_end: bool = False         # stopped at a timestamp at the end of the audio


@dataclass
class Step:
    """One greedy step as `dasllama verify` needs it: the best ids after the logit rules,
    best first, and their logits."""
    top_ids: list
    top_logits: list

    @property
    def gap(self):
        """Top-1 minus top-2 logit (inf when the rules leave one candidate)."""
        return self.top_logits[0] - self.top_logits[1]

    def logit(self, token):
        """Our logit of `token` here; None when it is not among our top TOP_K."""
        return dict(zip(self.top_ids, self.top_logits)).get(token)


@dataclass
class WindowTrace:
    """What one 30 s window decoded: where it starts (mel frames), its sampled tokens, a Step
    per token (one more for the closing EOT when there is one), and whether its segments were
    kept (a no-speech window is dropped)."""
    seek: int
    tokens: list
    steps: list
    kept: bool = True


@dataclass
class Segment:
    start: float
    end: float
    text: str
    tokens: list
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float


@dataclass
class Transcript:
    segments: list
    language: str
    duration: float                    # seconds of audio
    timings: dict = field(default_factory=dict)

    @property
    def text(self):
        return "".join(s.text for s in self.segments)

    @property
    def tokens(self):
        return [t for s in self.segments for t in s.tokens]


def compression_ratio(text):
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class LogitRules:
    """openai-whisper's logit filters for one window, applied in place to a logits row."""

    def __init__(self, model, timestamps, max_initial_timestamp):
        tok = model.tokenizer
        self.tok = tok
        self.suppress = np.asarray(model.suppress_ids, np.int64)
        self.blank = np.asarray(model.blank_ids, np.int64)
        self.timestamps = timestamps
        self.max_initial = (None if max_initial_timestamp is None
                            else round(max_initial_timestamp / TIME_PRECISION))

    def text_masked(self, sampled):
        """Whether apply will mask every id below <|endoftext|> after `sampled`: a segment
        just ended on its closing timestamp, so a timestamp or EOT comes next."""
        ts_begin = self.tok.timestamp_begin
        return (self.timestamps and len(sampled) >= 2 and sampled[-1] >= ts_begin
                and sampled[-2] < ts_begin)

    def apply(self, logits, sampled, refine=None):
        """refine(logits, upto): makes exact the entries below `upto` that could be the best
        (StepLogits.refine), before the one rule that weighs values."""
        tok = self.tok
        ts_begin = tok.timestamp_begin
        if not sampled:
            logits[self.blank] = -np.inf
        logits[self.suppress] = -np.inf
        logits[tok.no_timestamps] = -np.inf
        if not self.timestamps:                  # whisper.cpp's no_timestamps: text only
            logits[ts_begin:] = -np.inf
            if refine is not None:
                refine(logits, ts_begin)
            return logits
        last_ts = len(sampled) >= 1 and sampled[-1] >= ts_begin
        penult_ts = len(sampled) < 2 or sampled[-2] >= ts_begin
        if last_ts:
            if penult_ts:                        # a pair just closed: text (or EOT) next
                logits[ts_begin:] = -np.inf
            else:                                # a segment's end: timestamp or EOT next
                logits[:tok.eot] = -np.inf
        stamps = [t for t in sampled if t >= ts_begin]
        if stamps:
            # timestamps never decrease, and a segment has nonzero length
            floor = stamps[-1] if (last_ts and not penult_ts) else stamps[-1] + 1
            logits[ts_begin:floor] = -np.inf
        if not sampled:
            logits[:ts_begin] = -np.inf          # the first token is a timestamp
            if self.max_initial is not None:
                logits[ts_begin + self.max_initial + 1:] = -np.inf
        if refine is not None:
            refine(logits, ts_begin)
        # the timestamps' summed probability against the best text token's: both log-probs
        # share the normaliser, so compare log-sum-exp and max of the logits themselves
        if _logsumexp(logits[ts_begin:]) > logits[:ts_begin].max():
            logits[:ts_begin] = -np.inf
        return logits


def log_softmax(x):
    """log-softmax of a logits row, as f64."""
    return _log_softmax(np.ascontiguousarray(x, np.float32))


def detect_language(model, cross):
    """(code, {code: probability}) from the decoder's first step after <|startoftranscript|>."""
    tok = model.tokenizer
    logits = model.decode([tok.sot], model.new_cache(), cross)[-1].astype(np.float64)
    ids = np.array([tok.language_token(c) for c in tok.language_codes])
    lang_logits = logits[ids]
    probs = np.exp(lang_logits - lang_logits.max())
    probs /= probs.sum()
    best = int(probs.argmax())
    return tok.language_codes[best], dict(zip(tok.language_codes, probs.tolist()))


def decode_window(model, cross, prompt, sot_sequence, opts, temperature, rng, end_ts=None,
                  steps=None):
    """Decode one window at one temperature; at t > 0 the best of `best_of` samples.

    end_ts: the first timestamp id within 100 ms of the end of the audio (None: no such rule);
    steps: a list that receives a Step per greedy step."""
    tok = model.tokenizer
    hp = model.hparams
    prefix = []
    if prompt:
        prefix = [tok.sot_prev] + prompt[-(hp.n_text_ctx // 2 - 1):]
    initial = prefix + sot_sequence + ([] if opts.timestamps else [tok.no_timestamps])
    sot_index = len(prefix)
    cache = model.new_cache()
    # the logits of <|startoftranscript|> (no-speech) and of the last token (the first choice)
    logits = model.decode(initial, cache, cross, rows=[sot_index, len(initial) - 1])
    no_speech_prob = float(np.exp(log_softmax(logits[0])[tok.no_speech]))
    rules = LogitRules(model, opts.timestamps, opts.max_initial_timestamp)
    sample_len = hp.n_text_ctx // 2
    n_candidates = 1 if temperature == 0 else max(1, opts.best_of)
    best = None
    for c in range(n_candidates):
        run_cache = cache if c == n_candidates - 1 else _copy_cache(cache)
        tokens, sum_logprob, at_end = _sample(model, cross, run_cache, logits[-1], rules,
                                              temperature, rng,
                                              min(sample_len, hp.n_text_ctx - len(initial)),
                                              end_ts, steps if temperature == 0 else None)
        score = sum_logprob / max(1, len(tokens))
        if best is None or score > best[0]:
            best = (score, tokens, sum_logprob, at_end)
    _, tokens, sum_logprob, at_end = best
    text = tok.decode(tokens)
    return DecodeResult(tokens, sum_logprob / (len(tokens) + 1), no_speech_prob, temperature,
                        text, compression_ratio(text), at_end)


def _copy_cache(cache):
    clone = type(cache).__new__(type(cache))
    clone.k, clone.v, clone.n = cache.k.copy(), cache.v.copy(), cache.n
    return clone


def _sample(model, cross, cache, logits, rules, temperature, rng, max_tokens, end_ts, steps):
    """(tokens, sum of their log-probabilities, stopped at the end of the audio).

    After the first step the logits come screened (model.decode_step): each choice refines
    the entries that could win, so it is the choice exact logits give. The normaliser of the
    log-probabilities (temperature fallback's average, no-speech aside) still sums the
    unrefined entries' screened values: those lie over two margins below the best, so their
    share is small, but it is not exact (not measured)."""
    tok = model.tokenizer
    tokens, sum_logprob = [], 0.0
    refine = None
    for _ in range(max_tokens):
        row = rules.apply(logits.astype(np.float32), tokens, refine)
        if temperature == 0:
            nxt = int(row.argmax())
        else:
            logprobs = log_softmax(row)
            p = np.exp(logprobs / temperature - (logprobs / temperature).max())
            nxt = int(rng.choice(len(p), p=p / p.sum()))
        if steps is not None:
            steps.append(top_step(row))
        sum_logprob += float(np.float64(row[nxt]) - _logsumexp(row))
        if nxt == tok.eot:
            break
        tokens.append(nxt)
        if end_ts is not None and nxt >= end_ts:
            return tokens, sum_logprob, True
        step = model.decode_step(nxt, cache, cross, text=not rules.text_masked(tokens))
        logits, refine = step.row, step.refine
    return tokens, sum_logprob, False


def top_step(row):
    """The Step of a logits row: its TOP_K best ids (ties to the lower id) and logits."""
    best = np.argpartition(-row, TOP_K)[:TOP_K]
    best = best[np.lexsort((best, -row[best]))]
    return Step([int(i) for i in best], [float(row[i]) for i in best])


def end_timestamp(tok, seek, audio_frames):
    """The first timestamp id of the window at `seek` that lies within MIN_FRAMES of the end
    of the audio: whisper.cpp ends a window there (`seek + seek_delta + delta_min >= seek_end`;
    <|0.00|> does not count)."""
    return tok.timestamp_begin + max(1, -(-(audio_frames - MIN_FRAMES - seek) // INPUT_STRIDE))


def decode_with_fallback(model, cross, prompt, sot_sequence, opts, rng, end_ts=None, steps=None):
    """openai's fallback: retry hotter while the text is too repetitive or too improbable."""
    result = None
    for t in opts.temperatures:
        if steps is not None:
            steps.clear()
        result = decode_window(model, cross, prompt, sot_sequence, opts, t, rng, end_ts, steps)
        too_repetitive = (opts.compression_ratio_threshold is not None
                          and result.compression_ratio > opts.compression_ratio_threshold)
        too_unlikely = (opts.logprob_threshold is not None
                        and result.avg_logprob < opts.logprob_threshold)
        silence = (opts.no_speech_threshold is not None
                   and result.no_speech_prob > opts.no_speech_threshold and too_unlikely)
        if silence or not (too_repetitive or too_unlikely):
            break
    return result


def check_language(tok, opts):
    """The language code to decode in (None: detect), or TranscribeError naming the mend."""
    if opts.task not in ("transcribe", "translate"):
        raise TranscribeError(f"unknown task {opts.task!r}: use transcribe or translate.")
    if not tok.multilingual:
        if opts.task == "translate":
            raise TranscribeError("this model is English-only: translation needs a "
                                  "multilingual model (one without .en in its name).")
        if opts.language not in (None, "en", "english"):
            raise TranscribeError(f"this model is English-only and cannot transcribe "
                                  f"{opts.language!r}.")
        return "en"
    if opts.language is None or opts.language == "auto":
        return None
    code = opts.language.lower()
    names = {name: c for c, name in LANGUAGES.items()}
    code = names.get(code, code)
    if code not in tok.language_codes:
        raise TranscribeError(f"unknown language {opts.language!r}; this model knows "
                              f"{', '.join(tok.language_codes)}.")
    return code


def transcribe(model, samples, opts=None, progress=None, trace=None):
    """Transcript of 16 kHz mono samples: 30 s windows, each seeking to its last timestamp.

    trace: a list that receives a WindowTrace per decoded window (for `dasllama verify`)."""
    opts = opts or DecodeOptions()
    tok = model.tokenizer
    timings = {"mel_s": 0.0, "encode_s": 0.0, "decode_s": 0.0, "windows": 0}
    duration = len(samples) / SAMPLE_RATE
    t0 = time.perf_counter()
    mel = model.log_mel(samples)                                   # (n_mels, frames + 3000)
    timings["mel_s"] = time.perf_counter() - t0
    content_frames = mel.shape[1] - N_FRAMES
    # whisper.cpp's count of the audio's frames (mel.n_len_org), one less than ours for most
    # lengths: where its end-of-audio rule falls
    audio_frames = 1 + (len(samples) - N_FFT // 2) // HOP_LENGTH
    language = check_language(tok, opts)
    rng = np.random.default_rng(opts.seed)
    segments, all_tokens = [], []
    prompt_reset_since = 0
    seek = 0
    while content_frames - seek > MIN_FRAMES:
        time_offset = seek * HOP_LENGTH / SAMPLE_RATE
        segment_size = min(N_FRAMES, content_frames - seek)
        window = samples[seek * HOP_LENGTH:(seek + segment_size) * HOP_LENGTH]
        if not np.any(np.abs(window) >= SILENCE_PEAK):
            seek += segment_size
            if progress is not None:
                progress(segment_size)
            continue
        t0 = time.perf_counter()
        features = model.encode(mel[:, seek:seek + N_FRAMES])
        cross = model.cross_kv(features)
        t1 = time.perf_counter()
        timings["encode_s"] += t1 - t0
        timings["windows"] += 1
        if language is None:
            language, _ = detect_language(model, cross)
        sot_sequence = tok.sot_sequence(language, opts.task)
        prompt = all_tokens[prompt_reset_since:] if opts.condition_on_previous_text else []
        end_ts = end_timestamp(tok, seek, audio_frames) if opts.timestamps else None
        steps = [] if trace is not None else None
        result = decode_with_fallback(model, cross, prompt, sot_sequence, opts, rng, end_ts, steps)
        timings["decode_s"] += time.perf_counter() - t1
        previous_seek = seek
        skip = (opts.no_speech_threshold is not None
                and result.no_speech_prob > opts.no_speech_threshold
                and not (opts.logprob_threshold is not None
                         and result.avg_logprob > opts.logprob_threshold))
        if trace is not None:
            trace.append(WindowTrace(previous_seek, result.tokens, steps, kept=not skip))
        if skip:
            seek += segment_size
        else:
            new, seek = _segments(tok, result, seek, segment_size, time_offset)
            if result.at_audio_end:
                seek = previous_seek + segment_size
            new = [s for s in new if s.start != s.end and s.text.strip()]
            segments += new
            all_tokens += [t for s in new for t in s.tokens]
            if not opts.condition_on_previous_text or result.temperature > 0.5:
                prompt_reset_since = len(all_tokens)
        if progress is not None:
            progress(min(content_frames, seek) - previous_seek)
    return Transcript(segments, language or "en", duration, timings)


def _segments(tok, result, seek, segment_size, time_offset):
    """Segments of one window's tokens and the next seek (openai-whisper's rules)."""
    tokens = result.tokens
    ts_begin = tok.timestamp_begin
    is_ts = [t >= ts_begin for t in tokens]

    def segment(start, end, toks):
        text_ids = [t for t in toks if t < tok.eot]
        text = tok.decode(text_ids)
        return Segment(round(start, 3), round(end, 3), text, toks, result.avg_logprob,
                       result.no_speech_prob, result.temperature, result.compression_ratio)

    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    if cuts:
        if single_ending:
            cuts.append(len(tokens))
        out, last = [], 0
        for cut in cuts:
            part = tokens[last:cut]
            out.append(segment(time_offset + (part[0] - ts_begin) * TIME_PRECISION,
                               time_offset + (part[-1] - ts_begin) * TIME_PRECISION, part))
            last = cut
        if single_ending:
            seek += segment_size              # no speech after the last timestamp
        else:
            seek += (tokens[last - 1] - ts_begin) * INPUT_STRIDE
        return out, seek
    duration = segment_size * HOP_LENGTH / SAMPLE_RATE
    stamps = [t for t in tokens if t >= ts_begin]
    if stamps and stamps[-1] != ts_begin:
        duration = (stamps[-1] - ts_begin) * TIME_PRECISION
    return [segment(time_offset, time_offset + duration, tokens)], seek + segment_size


__all__ = ["TranscribeError", "DecodeOptions", "DecodeResult", "Segment", "Transcript", "Step",
           "WindowTrace", "transcribe", "check_language", "detect_language", "decode_window", "LogitRules"]

"""`dasllama verify --asr`: our greedy Whisper transcriptions against whisper.cpp's on the same
clips and weights. Exit 0 parity, 1 divergence, 2 setup."""
import json
import os

import click

from dasllama.core.tools import verdict
from dasllama.core.tools.verify_asr import FAILING, VERDICTS, WORST_FIRST, greedy_options, verify_clip
from dasllama.core.asr.model import WhisperModel, WhisperModelError, default_model_path
from dasllama.core.asr.decode import TranscribeError, check_language
from dasllama.core.tools.ref_whisper import WhisperCpp, WhisperCppError, check_available, ggml_bin
from dasllama.formats.audio import AudioError, load

ASR_ERRORS = (WhisperModelError, WhisperCppError, AudioError, TranscribeError)


def load_clips(audio):
    """[(name, samples)] of every clip, read before anything runs: a bad one stops all."""
    if not audio:
        raise click.UsageError("no audio: --asr verifies a Whisper model on AUDIO files.")
    return [(name, load(name)) for name in audio]


def reference_model(model, ref_model, command="verify"):
    """The .bin whisper.cpp loads: --ref-model, or our model as a ggml .bin (a CT2 dir is
    converted once into the cache dir)."""
    if ref_model:
        return os.path.abspath(ref_model)
    if model.format != "ggml":
        click.echo(f"{command}: giving whisper.cpp the weights of {model.path} as a ggml .bin "
                   "(converted once, kept in the cache dir)", err=True)
    return os.fspath(ggml_bin(model.path))


def verify_asr(setup_error, model_path, audio, ref_model, threads, language, task, timestamps,
               tie_gap, strict, as_json):
    opts = greedy_options(language, task, timestamps)
    try:
        clips = load_clips(audio)
        model = WhisperModel(model_path or default_model_path(), n_threads=threads)
        check_available()
        check_language(model.tokenizer, opts)
        ref_path = reference_model(model, ref_model)
        click.echo(f"verify: {model.path} against whisper.cpp (pywhispercpp) on {ref_path}, "
                   f"{model.n_threads} threads, greedy", err=True)
        with WhisperCpp(ref_path, model.n_threads) as ref:
            results = [verify_clip(model, ref, name, samples, opts, tie_gap) for name, samples in clips]
            version = ref.describe()
    except ASR_ERRORS as e:
        raise setup_error(str(e)) from None
    code = verdict.exit_code(results, FAILING, strict)
    if as_json:
        report = {"verdict": verdict.overall(results, WORST_FIRST), "exit_code": code, "model": str(model.path),
                  "ref_model": ref_path, "reference": version, "tie_gap": tie_gap,
                  "options": {"language": language, "task": task, "timestamps": timestamps},
                  "clips": [r.to_dict() for r in results]}
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        for i, r in enumerate(results, 1):
            click.echo(render(i, r, tie_gap))
        click.echo(verdict.summary(results, VERDICTS, code, "clips"))
    click.get_current_context().exit(code)


def render(i, r, tie_gap):
    head = f"clip {i} {r.audio} ({r.duration:.1f} s, {r.language})"
    n_seg = len({row[0] for row in r.ids})
    gap = f" (min top-2 gap {r.min_gap:.3f})" if r.min_gap is not None else ""
    d = r.divergence
    if d is None:
        segments = "1 segment" if n_seg == 1 else f"{n_seg} segments"
        what = "tokens and start times" if any(row[2] == "t0" for row in r.ids) else "tokens"
        line = f"{head}: {r.verdict} over {len(r.ids)} {what} in {segments}{gap}"
        if r.verdict == "transcript":
            line += ("; the tokens agree but the transcripts differ:\n" + _texts(r))
        return line
    where = (f"the start time of segment {d.segment}" if d.index < 0
             else f"segment {d.segment} token {d.index}")
    lines = [f"{head}: {r.verdict} at {where} after {r.n_matched} matching{gap}"]
    ours_gap = f", top-2 gap {d.ours_gap:.3f}" if d.ours_gap is not None else ""
    lines.append(f"  ours        {json.dumps(d.ours_text, ensure_ascii=False)} (id {d.ours_id}{ours_gap})")
    lines.append(f"  whisper.cpp {json.dumps(d.ref_text, ensure_ascii=False)} (id {d.ref_id})")
    if d.ours_margin is not None:
        kind = "a near-tie" if d.near_tie else "not a near-tie"
        lines.append(f"  our logits of these two differ by {d.ours_margin:.3f}: {kind} (bound {tie_gap})")
    elif d.ref_id >= 0 and d.ours_id >= 0:
        lines.append("  its token is not in our top 8 there: not a near-tie")
    return "\n".join(lines) + "\n" + _texts(r)


def _texts(r):
    return (f"  ours        {json.dumps(r.text, ensure_ascii=False)}\n"
            f"  whisper.cpp {json.dumps(r.ref_text, ensure_ascii=False)}")

"""`dasllama verify`: greedy tokens of our engine against llama.cpp's on the same prompts, and
where inside the network the two part when they do; with --asr (or a Whisper -m), our Whisper
against whisper.cpp on AUDIO files. Exit 0 parity, 1 divergence, 2 setup."""
import json
import os

import click

from dasllama.core import load
from dasllama.core.tools.ref_llama import ReferenceError, find_reference
from dasllama.core.tools import verdict
from dasllama.core.tools.verify_llm import (DEFAULT_DRIFT_BOUND, DEFAULT_TIE_GAP, FAILING, VERDICTS,
                                            WORST_FIRST, verify_prompts)
from dasllama.core.asr.model import is_whisper_model
from dasllama.core.tools.verify_mtmd import DEFAULT_EMBD_BOUND, QUANTISED_EMBD_BOUND

from .errors import USER_ERRORS
from .options import THREADS, FiniteFloat, complete_model_names, media_option, model_name
from .verify_asr import verify_asr
from .verify_mtmd import verify_mtmd
from .verify_tts import verify_tts

DEFAULT_PROMPTS = ("The capital of France is", "Once upon a time,", "def fibonacci(n):")


class SetupError(click.ClickException):
    """Nothing was compared: a missing model or reference, or a reference that failed."""
    exit_code = 2


@click.command()
@click.argument("audio", nargs=-1)
@click.option("-m", "--model", "model_path", type=click.Path(),
              callback=model_name(), shell_complete=complete_model_names(),
              help="GGUF model file or a name `dasllama models` lists (default: the installed default "
                   "model); with --asr a whisper.cpp .bin or a faster-whisper (CT2) dir (default: an installed tiny.en).")
@click.option("--asr", is_flag=True,
              help="Verify a Whisper model on AUDIO files against whisper.cpp (pywhispercpp), "
                   "greedy on both sides; implied when -m is a Whisper model.")
@click.option("-p", "--prompt", "prompts", multiple=True,
              help="Prompt to decode greedily; repeat for several (default: three short ones).")
@click.option("-n", "--n-predict", default=64, show_default=True, type=click.IntRange(1),
              help="Tokens to generate per prompt.")
@click.option("--ref", type=click.Choice(["llama.cpp", "whisper.cpp", "piper", "kokoro-onnx"]), default=None,
              help="Reference engine (default: llama.cpp; whisper.cpp with --asr; piper-tts for a "
                   "Piper voice .onnx, kokoro-onnx for a Kokoro one, whose sentences are the -p texts).")
@click.option("-s", "--speaker", "--voice", "speaker", default=None,
              help="A voice .onnx's speaker: a Kokoro voice name (default: the pack's first) or a Piper speaker.")
@click.option("--ref-bin", type=click.Path(file_okay=False, exists=True),
              help="Dir with llama.cpp's tools (default: PATH, then llama-cpp-python, then dasllama's cache).")
@click.option("--ref-model", type=click.Path(dir_okay=False, exists=True),
              help="File for the reference to load instead of -m (e.g. the source of a requantized "
                   "file; with --asr a whisper.cpp .bin, default: -m converted to one).")
@click.option("-t", "--threads", type=THREADS, default=None, help="Threads for both engines (default: all cores).")
@click.option("-c", "--ctx-size", default=4096, show_default=True, type=click.IntRange(1),
              help="Context size for both engines.")
@click.option("--tie-gap", default=DEFAULT_TIE_GAP, show_default=True, type=FiniteFloat(0),
              help="A flip is a near-tie when the two engines' margins between the two tokens "
                   "add up to no more than this (logits).")
@click.option("--drift-bound", default=DEFAULT_DRIFT_BOUND, show_default=True,
              type=FiniteFloat(0, min_open=True),
              help="Drift past this (relative to a tensor's RMS) names the layer where the engines part.")
@click.option("--layers/--no-layers", default=None,
              help="Compare per-layer activations always / never (default: when tokens differ).")
@click.option("-l", "--language", default=None,
              help="--asr: spoken language for both engines (default: detect; English-only models: en).")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe",
              show_default=True, help="--asr: the task for both engines.")
@click.option("-nt", "--no-timestamps", is_flag=True, help="--asr: decode without timestamp tokens.")
@click.option("--mmproj", "mmproj_path", type=click.Path(dir_okay=False, exists=True),
              help="A multimodal turn: the model's mmproj GGUF; its towers' embeddings are compared with "
                   "libmtmd's, the turn's greedy text with llama-mtmd-cli's (-p the prompt, one).")
@media_option("--mmproj: ")
@click.option("--embd-bound", type=FiniteFloat(0, min_open=True),
              help="--mmproj: the largest relative error of a tower's embeddings against libmtmd's "
                   f"[default: {DEFAULT_EMBD_BOUND:g}, {QUANTISED_EMBD_BOUND:g} for a quantised mmproj].")
@click.option("--strict", is_flag=True, help="Fail (exit 1) on near-ties too.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON report instead of text.")
def verify_cmd(audio, model_path, asr, prompts, n_predict, ref, speaker, ref_bin, ref_model, threads, ctx_size,
               tie_gap, drift_bound, layers, language, task, no_timestamps, mmproj_path, media,
               embd_bound, strict, as_json):
    """Check that our engine decodes the same greedy tokens as llama.cpp on the same prompts,
    or (--asr) that our Whisper transcribes AUDIO as whisper.cpp does, or (a voice .onnx) that
    our speech matches piper-tts's or kokoro-onnx's on the same phoneme ids, or (--mmproj) that
    a turn about images or audio matches libmtmd's embeddings and llama-mtmd-cli's text."""
    if media and not mmproj_path:
        raise click.UsageError("--image and --audio need --mmproj, the model's vision or audio tower.")
    if mmproj_path:
        if audio or asr or ref not in (None, "llama.cpp"):
            raise click.UsageError("a media turn is verified against llama.cpp's libmtmd and llama-mtmd-cli, "
                                   "with --image/--audio files and no AUDIO arguments.")
        if not media:
            raise click.UsageError("--mmproj verifies a turn about media: give --image FILE or --audio FILE.")
        verify_mtmd(SetupError, model_path, mmproj_path, media, prompts, n_predict, threads,
                    ctx_size, embd_bound, as_json)
    if model_path and model_path.endswith((".onnx", ".onnx.json")):
        if audio or asr or ref not in (None, "piper", "kokoro-onnx"):
            raise click.UsageError("a voice .onnx is verified against --ref piper or kokoro-onnx "
                                   "on -p texts, with no AUDIO.")
        verify_tts(SetupError, model_path.removesuffix(".json"), prompts, threads, speaker, strict,
                   as_json, {"piper": "piper-tts"}.get(ref, ref))
    if ref in ("piper", "kokoro-onnx"):
        raise click.UsageError(f"--ref {ref} verifies voices: pass one with -m VOICE.onnx.")
    if speaker:
        raise click.UsageError("--voice is for a voice .onnx (-m VOICE.onnx).")
    if asr or (model_path and is_whisper_model(model_path)):
        if prompts or ref == "llama.cpp":
            raise click.UsageError("-p and --ref llama.cpp are for language models; --asr takes "
                                   "AUDIO files and whisper.cpp.")
        verify_asr(SetupError, model_path, audio, ref_model, threads, language, task,
                   not no_timestamps, tie_gap, strict, as_json)
    if audio:
        raise click.UsageError(f"unexpected argument {audio[0]!r}: AUDIO files go with --asr "
                               "and a Whisper model.")
    if ref == "whisper.cpp":
        raise click.UsageError("--ref whisper.cpp verifies Whisper models: pass one with -m (and --asr).")
    if model_path and os.path.isdir(model_path):
        raise SetupError(f"{model_path} is a directory: pass a GGUF file, or --asr for a "
                         "faster-whisper (CT2) dir.")
    if n_predict < 1:
        raise click.UsageError("-n must be at least 1.")
    prompts = prompts or DEFAULT_PROMPTS
    try:
        model = load(model_path, n_ctx=ctx_size, n_threads=threads)
        reference = find_reference(ref_bin)
    except (ReferenceError, *USER_ERRORS) as e:
        raise SetupError(str(e)) from None
    ref_path = os.path.abspath(ref_model or model.path)
    click.echo(f"verify: {model.path} against llama.cpp ({reference.origin}) on {ref_path}", err=True)
    if not reference.has_bindings:
        click.echo("verify: llama.cpp's Python bindings (llama_cpp) are absent: ids come from "
                   "llama-completion, so logit gaps are unavailable.", err=True)
    try:
        results = verify_prompts(model, reference, ref_path, prompts, n_predict, tie_gap, layers,
                                 drift_bound)
    except (ReferenceError, *USER_ERRORS) as e:
        raise SetupError(str(e)) from None
    code = verdict.exit_code(results, FAILING, strict)
    if as_json:
        report = {"verdict": verdict.overall(results, WORST_FIRST), "exit_code": code, "model": model.path,
                  "ref_model": ref_path, "reference": reference.describe(), "n_predict": n_predict,
                  "tie_gap": tie_gap, "drift_bound": drift_bound,
                  "prompts": [r.to_dict() for r in results]}
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        for i, r in enumerate(results, 1):
            click.echo(render(i, r, tie_gap, reference.has_bindings))
        click.echo(verdict.summary(results, VERDICTS, code, "prompts"))
    click.get_current_context().exit(code)


def render(i, r, tie_gap, have_logits):
    head = f"prompt {i} {json.dumps(r.prompt, ensure_ascii=False)}"
    if r.verdict == "tokenizer":
        k = next((j for j, (a, b) in enumerate(zip(r.prompt_ids, r.ref_prompt_ids)) if a != b),
                 min(len(r.prompt_ids), len(r.ref_prompt_ids)))
        return (f"{head}: the prompt tokenizes differently at token {k}: ours {r.prompt_ids[k:k + 4]}..., "
                f"llama.cpp {r.ref_prompt_ids[k:k + 4]}... ({len(r.prompt_ids)} vs {len(r.ref_prompt_ids)} tokens)")
    lines = [f"{head}: {len(r.prompt_ids)} prompt tokens match; " + _tokens_line(r, have_logits)]
    d = r.divergence
    if d is not None:
        ours_text = json.dumps(d.ours_text, ensure_ascii=False)
        lines.append(f"  ours      {ours_text} (id {d.ours_id}, top-2 gap {d.ours_gap:.3f})")
        ref_gap = f", top-2 gap {d.ref_gap:.3f}" if d.ref_gap is not None else ""
        lines.append(f"  llama.cpp {json.dumps(d.ref_text, ensure_ascii=False)} (id {d.ref_id}{ref_gap})")
        if d.ref_margin is not None:
            kind = "a near-tie" if d.near_tie else "not a near-tie"
            lines.append(f"  the engines disagree by {d.ours_margin + d.ref_margin:.3f} on these two "
                         f"logits: {kind} (bound {tie_gap})")
        elif have_logits:
            lines.append("  our token is not in llama.cpp's top 8 there: not a near-tie")
    if r.drift is not None:
        lines.append("  " + _drift_line(r.drift))
    if r.exact is not None:
        lines.append("  " + _exact_line(r.exact))
    return "\n".join(lines)


def _exact_line(exact):
    where = f"the prompt batch and {len(exact.step_ids)} single-token steps"
    if exact.first is None:
        return f"tensors: all {len(exact.rows)} compared are bit-identical over {where}"
    f = exact.first
    step = "the prompt batch" if f.step == 0 else f"decode step {f.step}"
    alias = f" (llama.cpp {f.ref_name})" if f.ref_name != f.name else ""
    return (f"tensors: first bit difference in {step} at {f.name}{alias}: {f.n_diff} of {f.n} "
            f"values, up to {f.max_ulps} ulps ({f.max_abs:.3g} absolute); compared {where}")


def _tokens_line(r, have_logits):
    logits = (f" (min top-2 gap {r.min_gap:.3f}; chosen logits within {r.max_logit_delta:.3f}, "
              f"top-2 gaps within {r.max_gap_delta:.3f})" if have_logits and r.min_gap is not None else "")
    if r.divergence is None:
        return f"parity over {len(r.ids)} generated tokens{logits}"
    d = r.divergence
    return (f"{r.verdict} at generated token {d.step} (position {d.position}) after "
            f"{r.n_matched} matching{logits}")


def _drift_line(drift):
    if not drift.rows:
        return f"layers: {drift.note}"
    worst = f"worst: layer {drift.worst[0]} {drift.worst[1]} ({drift.worst[3]:.4f})"
    where = f"over {len(drift.tokens)} tokens"
    note = f"; {drift.note}" if drift.note else ""
    if drift.first is None:
        return f"layers: no tensor drifts past {drift.bound} {where}; {worst}{note}"
    il, name, ref_name, err = drift.first
    alias = f" (llama.cpp {ref_name})" if ref_name != name else ""
    return f"layers: first drift past {drift.bound} at layer {il} {name}{alias} ({err:.4f}) {where}; {worst}{note}"

"""`dasllama verify -m VOICE.onnx`: our Piper VITS against piper-tts (onnxruntime) on the same
phoneme ids, noise at 0: durations identical, waveform within the bound. Exit 0 parity,
1 divergence, 2 setup."""
import json

import click

from dasllama.core.tools import verdict
from dasllama.core.tools.bench_tts import SENTENCES
from dasllama.core.tools.verify_tts import (FAILING, MAX_ABS_DIFF, MIN_SNR_DB, VERDICTS, WORST_FIRST,
                                            ReferenceUnavailable, load_reference, reference_version,
                                            verify_texts)
from dasllama.core.tts import PhonemizerUnavailable, VoiceError, load_voice

TTS_ERRORS = (VoiceError, PhonemizerUnavailable, ReferenceUnavailable)


def verify_tts(setup_error, model_path, texts, threads, speaker, strict, as_json):
    texts = list(texts) or list(SENTENCES[:3])
    try:
        voice = load_voice(model_path, n_threads=threads)
        ref = load_reference(voice.path)
        click.echo(f"verify: {voice.path} against piper-tts (onnxruntime) on the same phoneme ids, "
                   f"noise scales 0, {voice.n_threads} threads", err=True)
        results = verify_texts(voice, ref, texts, speaker)
    except TTS_ERRORS as e:
        raise setup_error(str(e)) from None
    code = verdict.exit_code(results, FAILING, strict)
    if as_json:
        report = {"verdict": verdict.overall(results, WORST_FIRST), "exit_code": code,
                  "model": str(voice.path), "reference": reference_version(),
                  "bounds": {"max_abs_diff": MAX_ABS_DIFF, "min_snr_db": MIN_SNR_DB},
                  "sentences": [r.to_dict() for r in results]}
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        for i, r in enumerate(results, 1):
            click.echo(render(i, r))
        click.echo(verdict.summary(results, VERDICTS, code, "sentences"))
    click.get_current_context().exit(code)


def render(i, r):
    head = f"sentence {i} {json.dumps(r.text, ensure_ascii=False)} ({r.n_ids} ids)"
    if not r.phonemes_match:
        return f"{head}: phonemes-differ: espeak-ng gave us other phonemes than piper-tts"
    if r.verdict == "durations-differ":
        return (f"{head}: durations-differ: {r.n_samples} samples against piper-tts's {r.ref_samples}"
                if r.n_samples != r.ref_samples else f"{head}: durations-differ per phoneme id")
    return (f"{head}: {r.verdict}: durations identical ({r.n_samples} samples), waveform max |diff| "
            f"{r.max_abs_diff:.2e} (bound {MAX_ABS_DIFF:.0e}), SNR {r.snr_db:.1f} dB (bound {MIN_SNR_DB:.0f})")

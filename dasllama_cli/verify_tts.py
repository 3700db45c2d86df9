"""`dasllama verify -m VOICE.onnx`: our speech against the voice's reference runtime on the same
phoneme ids (piper-tts for a Piper voice, noise at 0; kokoro-onnx for a Kokoro voice):
durations identical, then the waveform (Piper) or its log-mel (Kokoro) within the bound.
Exit 0 parity, 1 divergence, 2 setup."""
import json

import click

from dasllama.core.tools import verdict, verify_kokoro, verify_tts as verify_piper
from dasllama.core.tools.bench_tts import SENTENCES
from dasllama.core.tools.verify_tts import FAILING, VERDICTS, WORST_FIRST, ReferenceUnavailable
from dasllama.core.tts import PhonemizerUnavailable, VoiceError, load_voice
from dasllama.core.tts.kokoro import KokoroVoice

TTS_ERRORS = (VoiceError, PhonemizerUnavailable, ReferenceUnavailable)


def verify_tts(setup_error, model_path, texts, threads, speaker, strict, as_json, ref_name=None):
    """ref_name: the reference the user asked for (None: the voice's own)."""
    texts = list(texts) or list(SENTENCES[:3])
    try:
        voice = load_voice(model_path, n_threads=threads)
        checks = verify_kokoro if isinstance(voice, KokoroVoice) else verify_piper
        if ref_name not in (None, checks.REFERENCE):
            raise click.UsageError(f"{voice.path.name} is verified against --ref {checks.REFERENCE}, "
                                   f"not {ref_name}.")
        ref = checks.load_reference(voice)
        how = "noise scales 0" if checks is verify_piper else f"voice {speaker or voice.voice_names()[0]}"
        click.echo(f"verify: {voice.path} against {checks.REFERENCE} (onnxruntime) on the same phoneme "
                   f"ids, {how}, {voice.n_threads} threads", err=True)
        results = checks.verify_texts(voice, ref, texts, speaker)
    except TTS_ERRORS as e:
        raise setup_error(str(e)) from None
    code = verdict.exit_code(results, FAILING, strict)
    if as_json:
        report = {"verdict": verdict.overall(results, WORST_FIRST), "exit_code": code,
                  "model": str(voice.path), "reference": checks.reference_version(),
                  "bounds": checks.BOUNDS, "sentences": [r.to_dict() for r in results]}
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        for i, r in enumerate(results, 1):
            click.echo(render(i, r, checks.REFERENCE, checks.BOUNDS))
        click.echo(verdict.summary(results, VERDICTS, code, "sentences"))
    click.get_current_context().exit(code)


def render(i, r, reference, bounds):
    head = f"sentence {i} {json.dumps(r.text, ensure_ascii=False)} ({r.n_ids} ids)"
    if not r.phonemes_match:
        return f"{head}: phonemes-differ: espeak-ng gave us other phonemes than {reference}"
    if r.verdict == "durations-differ":
        per_id = (f"{r.durations_off} of {r.n_ids} ids' durations differ (by up to {r.max_duration_off} "
                  "frames)" if r.durations_off else "durations differ per phoneme id")
        return f"{head}: durations-differ: {per_id}, {r.n_samples} samples against {reference}'s {r.ref_samples}"
    waveform = f"waveform max |diff| {r.max_abs_diff:.2e}, SNR {r.snr_db:.1f} dB"
    if "max_mel_db" in bounds:
        return (f"{head}: {r.verdict}: durations identical ({r.n_samples} samples), log-mel "
                f"{r.mel_db:.2f} dB apart (bound {bounds['max_mel_db']:.1f}); {waveform} (not judged)")
    return (f"{head}: {r.verdict}: durations identical ({r.n_samples} samples), {waveform} "
            f"(bounds {bounds['max_abs_diff']:.0e}, {bounds['min_snr_db']:.0f} dB)")

"""`dasllama transcribe`: speech to text with Whisper (whisper.cpp .bin or faster-whisper dir)."""
import os
import sys
import time
from pathlib import Path

import click

from dasllama.core.asr.model import WhisperModel, WhisperModelError, default_model_path
from dasllama.core.asr.decode import DecodeOptions, TranscribeError, check_language, transcribe
from dasllama.core.asr.writers import FORMATS, RENDER
from dasllama.formats.audio import SAMPLE_RATE, AudioError, load

from .options import THREADS, complete_model_names, model_name, std_stream

MIN_SECONDS = 1.0


def read_audio(name):
    if name == "-":
        return load(std_stream("rb"), name="<stdin>")
    return load(name)


@click.command()
@click.argument("audio", nargs=-1)
@click.option("-m", "--model", "model_path", type=click.Path(),
              callback=model_name("whisper"), shell_complete=complete_model_names("whisper"),
              help="whisper.cpp ggml .bin or faster-whisper (CTranslate2) model directory, or a name "
                   "`dasllama models` lists (default: an installed tiny.en).")
@click.option("-f", "--format", "fmt", type=click.Choice(FORMATS), default="txt",
              show_default=True, help="Output format.")
@click.option("-o", "--output-dir", type=click.Path(file_okay=False),
              help="Write <audio name>.<format> files here instead of printing to stdout.")
@click.option("-l", "--language", default=None,
              help="Spoken language (code or name); default: detect (multilingual models).")
@click.option("--task", type=click.Choice(["transcribe", "translate"]), default="transcribe",
              show_default=True, help="translate: English text from any language.")
@click.option("-nt", "--no-timestamps", is_flag=True, help="Decode without timestamp tokens.")
@click.option("-t", "--threads", type=THREADS, default=None, help="Threads (default: all cores).")
@click.option("-q", "--quiet", is_flag=True, help="No timings or progress on stderr.")
def transcribe_cmd(audio, model_path, fmt, output_dir, language, task, no_timestamps, threads,
                   quiet):
    """Transcribe AUDIO files (wav, flac, ogg, mp3; '-' for stdin) with a Whisper model."""
    if not audio:
        if std_stream("rb").isatty():
            raise click.UsageError("no audio: pass one or more files, or '-' to read stdin.")
        audio = ("-",)
    try:
        model = WhisperModel(model_path or default_model_path(), n_threads=threads)
    except WhisperModelError as e:
        raise click.ClickException(str(e)) from None
    except MemoryError:
        raise click.ClickException("out of memory loading the model: use a smaller one.") from None
    opts = DecodeOptions(task=task, language=language, timestamps=not no_timestamps)
    try:
        check_language(model.tokenizer, opts)
    except TranscribeError as e:
        raise click.ClickException(str(e)) from None
    if not quiet:
        click.echo(f"model {model.path} ({model.size_name}, {model.format}) loaded in "
                   f"{model.load_s:.2f} s", err=True)
    if output_dir:
        try:
            Path(output_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise click.ClickException(f"cannot create the output directory {output_dir} "
                                       f"({e.strerror or e}): choose another -o.") from None
    failed = 0
    for name in audio:
        try:
            text = transcribe_one(model, name, opts, fmt, quiet)
        except AudioError as e:
            click.echo(f"error: {e}", err=True)
            failed += 1
            continue
        if output_dir:
            stem = "stdin" if name == "-" else Path(name).stem
            target = Path(output_dir) / f"{stem}.{fmt}"
            write_whole(target, text)
            if not quiet:
                click.echo(f"wrote {target}", err=True)
        else:
            std_stream("w").write(text)
            sys.stdout.flush()
    if failed:
        raise click.exceptions.Exit(1)


def write_whole(target, text):
    """Write under a temporary name and rename: a Ctrl-C or a full disk leaves the old file
    or none, never half a transcript."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}.part")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(target)
    except OSError as e:
        raise click.ClickException(f"cannot write {target} ({e.strerror or e}): choose another "
                                   "-o.") from None
    finally:
        tmp.unlink(missing_ok=True)


def warn_short(name, duration):
    """An empty transcript of a clip with nothing to hear says so, so silence is told from
    broken input (shown with -q too: it is about the input, not progress)."""
    if duration == 0:
        click.echo(f"dasllama: warning: {name} holds no audio samples, so its transcript is "
                   "empty.", err=True)
    elif duration < MIN_SECONDS:
        click.echo(f"dasllama: warning: {name} is only {duration:.2f} s long; Whisper needs "
                   "about a second of speech, so expect an empty transcript.", err=True)


def transcribe_one(model, name, opts, fmt, quiet):
    samples = read_audio(name)
    duration = len(samples) / SAMPLE_RATE
    warn_short(name, duration)
    bar = None
    if not quiet and duration > 30 and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=int(duration * 100), unit="frames", file=sys.stderr, leave=False)
    t0 = time.perf_counter()
    try:
        transcript = transcribe(model, samples, opts, progress=bar.update if bar else None)
    finally:
        if bar:
            bar.close()
    wall = time.perf_counter() - t0
    if not quiet:
        t = transcript.timings
        rtf = wall / duration if duration else 0.0
        click.echo(f"{name}: {duration:.1f} s audio, {t['windows']} windows | mel "
                   f"{t['mel_s']:.2f} s | encode {t['encode_s']:.2f} s | decode "
                   f"{t['decode_s']:.2f} s | total {wall:.2f} s (RTF {rtf:.3f})", err=True)
    params = {"model": str(model.path), "language": transcript.language,
              "translate": opts.task == "translate"}
    return RENDER[fmt](transcript, model=model, params=params)

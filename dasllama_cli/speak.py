"""`dasllama speak`: text to speech with a Piper voice (voice.onnx + voice.onnx.json), a thin
layer over dasllama.core.tts.synthesize: input lines (plain or piper's JSON lines), sinks (WAV
file, WAV or raw PCM on stdout), resampling and a progress bar."""
import io
import json
import sys
import time
import wave
from dataclasses import dataclass

import click
from tqdm import tqdm

from dasllama.core.tts import (PHONEMIZERS, PhonemizerUnavailable, SynthesisError, VoiceError,
                               load_voice, resampled, sentence_phonemes, synthesize, to_int16)

from .options import THREADS, FiniteFloat, check_encoding, complete_model_names, decode, model_name, std_stream

USER_ERRORS = (VoiceError, SynthesisError, PhonemizerUnavailable)
PROGRESS_MIN_CHARS = 500        # a progress bar (on a terminal) for text longer than this


@dataclass
class Utterance:
    text: str
    speaker: object = None          # None: --speaker
    output_file: str = None         # None: the command's output


def json_utterances(lines):
    """Piper's --json-input lines: {"text": ..., "speaker_id": N or "speaker": NAME,
    "output_file": PATH}, every key but text optional."""
    out = []
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as e:
            raise click.ClickException(f"--json-input line {n} is not JSON ({e}): give one object "
                                       'a line, such as {"text": "Hello."}.') from None
        text = obj.get("text") if isinstance(obj, dict) else None
        if not isinstance(text, str):
            raise click.ClickException(f'--json-input line {n} has no "text" string: give one object '
                                       'a line, such as {"text": "Hello."}.')
        speaker = obj.get("speaker_id", obj.get("speaker"))
        if speaker is not None and not isinstance(speaker, (int, str)) or isinstance(speaker, bool):
            raise click.ClickException(f"--json-input line {n}: speaker_id must be a number and "
                                       "speaker a name.")
        output_file = obj.get("output_file")
        if output_file is not None and not isinstance(output_file, str):
            raise click.ClickException(f"--json-input line {n}: output_file must be a path.")
        out.append(Utterance(text, speaker, output_file))
    return out


def utterances(text, file, encoding):
    """The text to speak: the argument, or FILE / piped stdin one utterance per line."""
    if text:
        return [" ".join(text)]
    if file is not None:
        data, where = file.read(), f"-f {file.name}"
    elif not std_stream("rb").isatty():
        data, where = std_stream("rb").read(), "stdin"
    else:
        raise click.UsageError("no text: pass it as an argument, with -f FILE, or on stdin.")
    lines = [line.strip() for line in decode(data, encoding, where).splitlines()]
    return [line for line in lines if line]


class WavSink:
    """16-bit mono WAV: streamed to a file, or built whole for stdout (a pipe cannot seek back
    to write the header's sizes). Opened at the first audio, so a failure leaves no file."""

    def __init__(self, target, rate):
        self.target, self.rate, self.wav, self.buffer = target, rate, None, None

    def write(self, pcm):
        if self.wav is None:
            self.buffer = io.BytesIO() if self.target is None else None
            self.wav = wave.open(self.buffer if self.target is None else self.target, "wb")
            self.wav.setnchannels(1)
            self.wav.setsampwidth(2)
            self.wav.setframerate(self.rate)
        self.wav.writeframes(pcm)

    def close(self):
        if self.wav is None:
            return
        self.wav.close()
        if self.buffer is not None:
            out = std_stream("wb")
            out.write(self.buffer.getvalue())
            out.flush()


class RawSink:
    """s16le PCM to stdout, flushed per sentence so a player starts on the first."""

    def __init__(self):
        self.out = std_stream("wb")

    def write(self, pcm):
        self.out.write(pcm)
        self.out.flush()

    def close(self):
        pass


@click.command()
@click.argument("text", nargs=-1)
@click.option("-m", "--model", "model_path", required=True, type=click.Path(),
              callback=model_name("piper"), shell_complete=complete_model_names("piper"),
              help="Piper voice .onnx (its .onnx.json beside it), Kokoro .onnx (its voice pack "
                   "beside it), or a name `dasllama models` lists.")
@click.option("-f", "--file", type=click.File("rb"),
              help="Read the text from FILE ('-' for stdin), one utterance per line.")
@click.option("--encoding", default="utf-8", show_default=True, callback=check_encoding,
              help="Text encoding of -f FILE or stdin.")
@click.option("-o", "--output-file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Write a WAV file ('-' for stdout; the default when stdout is not a terminal).")
@click.option("--output-raw", is_flag=True,
              help="Stream raw s16le mono PCM to stdout (the sample rate goes to stderr).")
@click.option("--json-input", is_flag=True,
              help='Input lines are JSON objects as piper reads them: {"text": ..., "speaker_id" or '
                   '"speaker", "output_file"}.')
@click.option("--rate", type=click.IntRange(1000, 384000), default=None,
              help="Resample the output to this many Hz (soxr; default: the voice's rate).")
@click.option("-s", "--speaker", "--voice", "speaker", default=None,
              help="Speaker id or name (multi-speaker Piper voices), or a Kokoro voice name.")
@click.option("--voices", "voices_path", type=click.Path(dir_okay=False), default=None,
              help="Kokoro voice pack (.npz; default: the one beside the model).")
@click.option("--list-voices", is_flag=True, help="List the model's voices (Kokoro) or speakers and exit.")
@click.option("--speed", type=FiniteFloat(0, 10, min_open=True), default=1.0, show_default=True,
              help="Speaking rate: 2 is twice as fast (length scale = the voice's / speed).")
@click.option("--length-scale", type=FiniteFloat(0, 10, min_open=True), default=None,
              help="Phoneme length, as piper names it (overrides --speed; default: the voice's).")
@click.option("--noise-scale", type=FiniteFloat(0, 10), default=None, help="Generator noise (default: the voice's).")
@click.option("--noise-w", "--noise-w-scale", "noise_w", type=FiniteFloat(0, 10), default=None,
              help="Phoneme width noise (default: the voice's).")
@click.option("--sentence-silence", type=FiniteFloat(0, 60), default=None,
              help="Seconds of silence between sentences (default: the voice's runtime's: "
                   "0 for Piper voices, 0.25 for Kokoro's).")
@click.option("--phonemizer", type=click.Choice(sorted(PHONEMIZERS)), default="lexicon",
              show_default=True,
              help="Text to phonemes: lexicon (built in, English) or espeak (the exact espeak-ng "
                   "phonemes the voice was trained on, any language; needs piper-tts for Piper "
                   "voices, kokoro-onnx for Kokoro's: each bundles espeak-ng).")
@click.option("-t", "--threads", type=THREADS, default=None, help="Threads (default: all cores).")
@click.option("-q", "--quiet", is_flag=True, help="No timings on stderr.")
def speak_cmd(text, model_path, file, encoding, output_file, output_raw, json_input, rate, speaker, voices_path,
              list_voices, speed, length_scale, noise_scale, noise_w, sentence_silence, phonemizer,
              threads, quiet):
    """Speak TEXT (or -f FILE, or stdin) with a Piper or Kokoro voice, as WAV or raw PCM."""
    if list_voices:
        try:
            voice = load_voice(model_path, n_threads=threads, voices_path=voices_path)
        except VoiceError as e:
            raise click.ClickException(str(e)) from None
        names = voice.voice_names() if hasattr(voice, "voice_names") else sorted(voice.config.speaker_id_map)
        click.echo("\n".join(names or ["(one speaker)"]))
        return
    lines = utterances(text, file, encoding)
    if not lines:
        raise click.ClickException("no text to speak: the input is empty.")
    items = json_utterances(lines) if json_input else [Utterance(line) for line in lines]
    to_stdout = output_raw or output_file == "-" or output_file is None
    if to_stdout and any(u.output_file is None for u in items) \
            and std_stream("wb").isatty():
        raise click.UsageError("stdout is a terminal: pass -o out.wav, or pipe the audio somewhere.")
    if output_raw and output_file not in (None, "-"):
        raise click.UsageError("--output-raw writes to stdout; drop -o or --output-raw.")
    t0 = time.perf_counter()
    try:
        voice = load_voice(model_path, n_threads=threads, voices_path=voices_path)
        if hasattr(voice, "voice_names") and speaker is not None:
            voice.style(speaker, 1)                 # an unknown voice name fails before any audio
    except VoiceError as e:
        raise click.ClickException(str(e)) from None
    except ValueError as e:                          # KokoroError
        raise click.ClickException(str(e)) from None
    rate = rate or voice.sample_rate
    if not quiet:
        click.echo(f"voice {voice.path.name} ({voice.sample_rate} Hz) loaded in "
                   f"{time.perf_counter() - t0:.2f} s", err=True)
    if output_raw:
        click.echo(f"sample rate {rate} Hz, s16le mono", err=True)
    sink = RawSink() if output_raw else WavSink(None if to_stdout else output_file, rate)
    options = dict(speed=speed, noise_scale=noise_scale, noise_w=noise_w,
                   sentence_silence=sentence_silence, length_scale=length_scale, phonemizer=phonemizer)
    n_samples, t0, first = 0, time.perf_counter(), None
    try:
        bar = progress_bar(items, voice, phonemizer, quiet)
        for item in items:
            target = WavSink(item.output_file, rate) if item.output_file else sink
            chunks = synthesize(item.text, voice, speaker=speaker if item.speaker is None else item.speaker,
                                **options)
            try:
                for _, samples in resampled(counted(chunks, bar), rate):
                    first = first or time.perf_counter() - t0
                    target.write(to_int16(samples).tobytes())
                    n_samples += len(samples)
            finally:
                if target is not sink:
                    target.close()
        bar.close()
    except USER_ERRORS as e:
        raise click.ClickException(str(e)) from None
    finally:
        sink.close()
    if not quiet:
        took = time.perf_counter() - t0
        seconds = n_samples / rate
        click.echo(f"{seconds:.2f} s of audio in {took:.2f} s (real-time factor {took / max(seconds, 1e-9):.3f}, "
                   f"first audio after {first or 0:.2f} s)", err=True)
        for path in dict.fromkeys([u.output_file for u in items if u.output_file] +
                                  ([output_file] if output_file not in (None, "-") and not output_raw
                                   and any(u.output_file is None for u in items) else [])):
            click.echo(f"wrote {path}", err=True)
    sys.stdout.flush()


def counted(chunks, bar):
    for chunk in chunks:
        bar.update(1)
        yield chunk


def progress_bar(items, voice, phonemizer, quiet):
    """A bar over sentences on stderr, for long text on a terminal only (tqdm's disable)."""
    show = (not quiet and sys.stderr.isatty()
            and sum(len(u.text) for u in items) > PROGRESS_MIN_CHARS)
    total = sum(len(sentence_phonemes(u.text, voice, phonemizer)) for u in items) if show else None
    return tqdm(total=total, unit="sentence", disable=not show, file=sys.stderr, leave=False)

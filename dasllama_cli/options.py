"""Option types every subcommand shares: numbers that must be finite, thread counts bounded
by the pool numba can start, text encodings of input files and stdin, and the standard streams."""
import codecs
import math
import os

import click


def std_stream(mode):
    """The process's stdin ("r", "rb") or stdout ("w", "wb") as click opens "-": the stream
    click.get_binary_stream / get_text_stream gave, which click 8.5 deprecates (stdin is never
    closed by it)."""
    return click.open_file("-", mode)


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (which compare false to any bound)."""

    name = "number"

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value} is not a finite number.", param, ctx)
        return number


def max_threads():
    """numba's pool size: NUMBA_NUM_THREADS, else the CPU count (what numba starts)."""
    try:
        return max(1, int(os.environ.get("NUMBA_NUM_THREADS") or os.cpu_count() or 1))
    except ValueError:
        return os.cpu_count() or 1


class ThreadCount(click.IntRange):
    """1 to numba's pool size; the help says "cores", not this machine's count, so the man
    pages generated from the help read the same on every machine."""

    def __init__(self):
        super().__init__(1, max_threads())

    def _describe_range(self):
        return "1<=x<=cores"

    def convert(self, value, param, ctx):
        number = click.INT.convert(value, param, ctx)
        if not 1 <= number <= self.max:
            self.fail(f"{number} is not in the range 1<=x<={self.max} (the threads numba can start here).",
                      param, ctx)
        return number


THREADS = ThreadCount()


def check_encoding(ctx, param, value):
    try:
        codecs.lookup(value)
    except LookupError:
        raise click.BadParameter(f"{value!r} is not a text encoding Python knows "
                                 "(e.g. utf-8, latin-1, cp1252, utf-16).") from None
    return value


def decode(data, encoding, where):
    """Bytes of a prompt as text; a byte the encoding cannot read is named with its offset."""
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise click.ClickException(
            f"{where} is not valid {encoding} text (byte 0x{data[e.start]:02x} at offset "
            f"{e.start}): pass --encoding with its encoding (e.g. --encoding latin-1).") from None


def writable_file(ctx, param, value):
    """A callback for an output path: refuse one that cannot be written before any work,
    not after a run of minutes."""
    if value is None:
        return value
    parent = os.path.dirname(os.path.abspath(value)) or "."
    if os.path.isdir(value):
        raise click.BadParameter(f"{value} is a directory; give a file name.")
    if not os.path.isdir(parent):
        raise click.BadParameter(f"the directory {parent} does not exist; create it first.")
    if not os.access(parent, os.W_OK) or (os.path.exists(value) and not os.access(value, os.W_OK)):
        raise click.BadParameter(f"{value} cannot be written (permission denied).")
    return value


def model_name(*kinds):
    """A callback for -m: a path as given, or the path of a model `dasllama models` lists by that
    name (None for the default model's name: the command then loads it as without -m)."""
    def resolve(ctx, param, value):
        from dasllama.core.runtime.catalog import KINDS, UnknownModel, resolve as resolve_name
        try:
            return resolve_name(value, kinds or KINDS)
        except UnknownModel as e:
            raise click.BadParameter(str(e)) from None
    return resolve


def complete_model_names(*kinds):
    """Shell completion for -m: the installed models' names that match, else the shell's own file
    names (click's bash script drops the names when a file completion comes with them)."""
    def complete(ctx, param, incomplete):
        from click.shell_completion import CompletionItem
        from dasllama.core.runtime.catalog import installed
        names = [CompletionItem(m.name, help=m.kind) for m in installed()
                 if m.name.startswith(incomplete) and (not kinds or m.kind in kinds)]
        return names or [CompletionItem(incomplete, type="file")]
    return complete


def media_option(scope=""):
    """--image / --audio, one list in the order given, as llama-mtmd-cli takes them (mtmd, and
    verify/bench with --mmproj); `scope` prefixes the help ("--mmproj: ")."""
    return click.option("--image", "--audio", "media", multiple=True,
                        help=f"{scope}{'an' if scope else 'An'} image (JPEG, PNG, ...) or audio file (wav, flac, mp3, ogg), in the prompt's "
                             "order; repeatable or comma-separated. Either flag takes either kind: it is read from "
                             "the file, as llama-mtmd-cli reads it.")

"""`dasllama tune`: race the kernel variants on this machine for a model's shapes, keep the winners."""
import os
import subprocess
import sys

import click
from tqdm import tqdm

from dasllama.core import default_model_path
from dasllama.core.runtime.threads import DECODE_LAYERS, prefer_threading_layers
from dasllama.core.llm.model import open_runnable
from dasllama.kernels import sidecar
from dasllama.kernels.tune import Noisy, in_force, model_shapes, tune

from .errors import USER_ERRORS
from .options import THREADS, FiniteFloat, complete_model_names, model_name


@click.command()
@click.option("-m", "--model", "model_path", type=click.Path(dir_okay=False), envvar="DASLLAMA_MODEL",
              callback=model_name("gguf"), shell_complete=complete_model_names("gguf"),
              help="GGUF model to tune for (its weight formats and shapes), or a name `dasllama models` lists "
                   "(default: $DASLLAMA_MODEL, else the installed default model).")
@click.option("--budget", default=60.0, show_default=True, type=FiniteFloat(0, min_open=True),
              help="Seconds of timing races; compiling the variants comes on top.")
@click.option("-t", "--threads", type=THREADS, default=None,
              help="Threads to race with (default: numba's, as generation uses).")
@click.option("--show", is_flag=True, help="Print the variant in force for each weight type and why, and exit.")
@click.option("--reset", is_flag=True, help="Delete this machine's tuning sidecar (then tune, if -m is given).")
@click.option("--force", is_flag=True,
              help="Tune even on a busy machine, and race again what the sidecar already holds.")
@click.option("--no-warm", is_flag=True,
              help="Do not compile the decode step with the new winners now (the next run will).")
def tune_cmd(model_path, budget, threads, show, reset, force, no_warm):
    """Race the kernel variants on this machine and keep the fastest (pin one with DASLLAMA_KERNELS)."""
    if reset:
        path = sidecar.sidecar_path()
        if path.is_dir():
            raise click.ClickException(f"{path} is a directory, not a tune sidecar: remove it yourself.")
        if path.exists():
            path.unlink()
            click.echo(f"tune: removed {path}", err=True)
        else:
            click.echo(f"tune: no sidecar at {path}", err=True)
    if show:
        click.echo(render_in_force(model_qtypes(model_path) if model_path else None), nl=False)
        return
    if reset and not model_path:
        return
    path = model_path or _default_model()
    try:
        shapes = model_shapes(open_runnable(path))
    except USER_ERRORS as e:
        raise click.ClickException(str(e)) from None
    if not shapes:
        raise click.ClickException(f"{path} has no matrix weights of a format dasllama multiplies: nothing to tune.")
    # race on the threading layer generation runs on (libgomp's where present): it launches
    # the parallel regions the races time
    prefer_threading_layers(DECODE_LAYERS)
    tag_before = sidecar.selection_tag()
    n_types = len({s.qtype for s in shapes})
    with tqdm(total=n_types + len(shapes), desc="tune", unit="step", file=sys.stderr,
              disable=not sys.stderr.isatty(), leave=False) as bar:
        def on_step(what):
            if what.startswith("duel") or what.endswith("prefetch"):    # steps past the count
                bar.total += 1
            bar.set_description(what)
            bar.update(1)
        try:
            report = tune(shapes, budget_s=budget, force=force, threads=threads, on_step=on_step,
                          model=os.path.abspath(path))
        except Noisy as e:
            raise click.ClickException(str(e)) from None
    click.echo(render_report(report), nl=False)
    _tell(report)
    if not report.skipped and sidecar.selection_tag() != tag_before and not no_warm:
        warm(path)


def _default_model():
    try:
        return default_model_path()
    except USER_ERRORS as e:
        raise click.ClickException(f"{e} Or name one with -m.") from None


def model_qtypes(path):
    try:
        return {s.qtype for s in model_shapes(open_runnable(path))}
    except USER_ERRORS as e:
        raise click.ClickException(str(e)) from None


def render_report(report):
    """The winners table: per weight type and phase, the default, the winner, their times
    summed over the model's tensors (decode: one token; prefill: PREFILL_TOKENS) and the gain;
    a "<phase> layout" row says whether the copied tensors multiply through their 8- or
    16-row copy (x8, x16) or the file's blocks, timed over those tensors; a "decode prefetch"
    row how many bytes ahead the copy decode takes prefetches its weights."""
    rows = []
    for o in report.outcomes:
        n = len(o.shape_winners)
        winner = o.winner + (f" (+{n} shape{'s' * (n > 1)})" if n else "")
        rows.append([sidecar.type_name(o.qtype), o.phase, str(o.n_shapes), o.default, winner,
                     f"{o.default_s * 1e3:.3f}", f"{o.chosen_s * 1e3:.3f}", f"{o.gain:.2f}x"])
    return table(["type", "phase", "shapes", "default", "winner", "default ms", "winner ms", "gain"], rows)


def _tell(report):
    """The how and why on stderr: sidecar, noise, time, rejected variants, lost duels."""
    if report.skipped:
        click.echo(f"tune: {report.path} already covers this model; --force races again.", err=True)
        return
    click.echo(f"tune: wrote {report.path} (noise {report.noise:.1%}, {report.seconds:.0f} s)", err=True)
    for (tname, variant), why in sorted(report.rejected.items()):
        click.echo(f"tune: the correctness gate rejected {tname} {variant}: {why}", err=True)
    for note in report.notes:
        click.echo(f"tune: {note}", err=True)


def render_in_force(qtypes=None):
    """What runs for each weight type and phase, where that choice comes from, and what was
    refused or skipped on the way."""
    state = in_force(qtypes)
    text = table(["type", "phase", "variant", "source"], state.rows)
    text += f"\nsidecar: {state.path}: {state.status}\n"
    return text + "".join(f"note: {n}\n" for n in state.notes)


def table(head, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() + "\n"
    return line(head) + "".join(line(r) for r in rows)


def warm(path):
    """Compile the decode step with the winners just written, in a fresh process (the variants
    are linked into it, so it is compiled once per choice of winners and cached: the child
    names its cache folder after them, kernels/__init__.py)."""
    click.echo("tune: compiling the decode step with the new winners (once; the numba cache keeps it)", err=True)
    code = "import sys; from dasllama.core import load; load(sys.argv[1], n_ctx=64).eval([0, 0])"
    subprocess.run([sys.executable, "-c", code, os.fspath(path)], check=False)

"""`dasllama models`: the models installed here (packages and the cache dir), by the names -m takes."""
import json

import click

from dasllama.core.runtime.catalog import KINDS, installed


def size_text(n_bytes):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


@click.command()
@click.option("--kind", type=click.Choice(KINDS), help="Only models of this kind.")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per model (name, kind, size, path, source).")
def models_cmd(kind, as_json):
    """List the models installed as packages or in the cache dir: name (what -m takes), kind, size, path."""
    found = [m for m in installed() if kind in (None, m.kind)]
    if as_json:
        for m in found:
            click.echo(json.dumps({"name": m.name, "kind": m.kind, "size": m.size, "path": str(m.path),
                                   "source": m.source, "default": m.default}))
        return
    if not found:
        click.echo("dasllama: no models installed; pip install 'dasllama-toolkit[default-model]' or pass -m PATH.", err=True)
        return
    rows = [(m.name + (" (default)" if m.default else ""), m.kind, size_text(m.size), str(m.path)) for m in found]
    widths = [max(len(r[i]) for r in rows + [("NAME", "KIND", "SIZE", "PATH")]) for i in range(3)]
    for row in [("NAME", "KIND", "SIZE", "PATH"), *rows]:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[3])

"""What the benches share: the output formats (json: records + receipt, jsonl, csv, markdown)
and the warning that the machine is busy."""
import csv
import io
import json

import click


def warn_if_busy(hardware):
    if hardware["loadavg_1m"] and hardware["loadavg_1m"] > 0.5 * hardware["logical_cpus"]:
        click.echo(f"bench: the machine is busy (load {hardware['loadavg_1m']:.1f} on "
                   f"{hardware['logical_cpus']} CPUs): figures will be low and noisy.", err=True)


def render(records, fmt, receipt, with_ref, fields, to_markdown):
    """`records` in `fmt` (json|jsonl|csv|md); `fields` are the csv columns after the engine,
    `to_markdown(records, with_ref)` draws the table of the bench at hand."""
    if fmt == "json":
        return json.dumps({"results": records, "receipt": receipt}, indent=2) + "\n"
    if fmt == "jsonl":
        return "".join(json.dumps(r) + "\n" for r in records)
    if fmt == "csv":
        return to_csv(records, with_ref, fields)
    return to_markdown(records, with_ref)


def to_csv(records, with_ref, fields):
    columns = ["engine", *fields] + (["ratio"] if with_ref else [])
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(columns)
    for r in records:
        writer.writerow([r.get(c, "") for c in columns])
    return out.getvalue()

"""The output formats both benches share: json (records + receipt), jsonl, csv, markdown."""
import csv
import io
import json


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

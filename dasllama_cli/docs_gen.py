"""The man pages and shell completions, written from the click tree so they cannot drift from
the flags: dasllama(1) plus one page per command (dasllama-generate(1), ... as git does), and
the bash/zsh/fish scripts of click's own completion (the shell asks `dasllama` itself, through
_DASLLAMA_COMPLETE, so a completion always knows the installed flags and model names).

    python -m dasllama_cli.docs_gen OUTDIR     # writes OUTDIR/man/*.1, OUTDIR/completions/{dasllama,_dasllama,dasllama.fish}

tests/test_docs.py regenerates into a temporary directory and compares with the tree."""
import inspect
import re
import sys
from pathlib import Path

import click
from click.shell_completion import get_completion_class

from . import docs_text

PROG = "dasllama"
# Each script under the name its shell loads it by from a completions directory (bash-completion
# looks for the command's name, zsh's fpath for _COMMAND, fish for COMMAND.fish).
SCRIPTS = {"bash": PROG, "zsh": f"_{PROG}", "fish": f"{PROG}.fish"}


def completion_script(shell):
    """The script `dasllama --completion SHELL` prints: click's, for the `dasllama` program."""
    from .main import cli
    complete_var = f"_{PROG.upper()}_COMPLETE"
    return get_completion_class(shell)(cli, {}, PROG, complete_var).source().rstrip("\n") + "\n"


def man_pages():
    """{file name: roff text} for dasllama.1 and each command's dasllama-COMMAND.1."""
    from dasllama.core.runtime.about import version
    from .main import cli
    ctx = click.Context(cli, info_name=PROG, **cli.context_settings)
    footer = f'"" "{PROG} {version()}" "User Commands"'
    pages = {f"{PROG}.1": _group_page(cli, ctx, footer)}
    for name in cli.list_commands(ctx):
        cmd = cli.get_command(ctx, name)
        if not cmd.hidden:
            pages[f"{PROG}-{name}.1"] = _command_page(cmd, click.Context(cmd, info_name=name, parent=ctx), footer)
    return pages


def _group_page(cli, ctx, footer):
    lines = [f".TH {PROG.upper()} 1 {footer}", ".SH NAME", f"{PROG} \\- {escape(_first_line(cli))}",
             ".SH SYNOPSIS", f".B {PROG}", r"[\fIOPTIONS\fR] \fICOMMAND\fR [\fIARGS\fR]...",
             ".SH DESCRIPTION", docs_text.DESCRIPTION.strip(), ".SH COMMANDS"]
    names = [n for n in cli.list_commands(ctx) if not cli.get_command(ctx, n).hidden]
    for name in names:
        cmd = cli.get_command(ctx, name)
        lines += [".TP", f"\\fB{PROG}\\-{name}\\fR(1)", escape(cmd.get_short_help_str(limit=300))]
    lines += [".SH OPTIONS", *_options(cli, ctx), docs_text.SECTIONS.strip(), ".SH SEE ALSO",
              ",\n".join(f".BR {PROG}\\-{n} (1)" for n in names) + ",", docs_text.SEE_ALSO_REFERENCES]
    return "\n".join(lines) + "\n"


def _command_page(cmd, ctx, footer):
    name = ctx.info_name
    pieces = " ".join(_italic_usage(p) for p in cmd.collect_usage_pieces(ctx))
    lines = [f".TH {PROG.upper()}\\-{name.upper()} 1 {footer}", ".SH NAME",
             f"{PROG}\\-{name} \\- {escape(_first_line(cmd))}", ".SH SYNOPSIS", f".B {PROG} {name}", pieces,
             ".SH DESCRIPTION", *_paragraphs(cmd)]
    if name in docs_text.DETAILS:
        lines += [".PP", docs_text.DETAILS[name].strip()]
    lines += [".SH OPTIONS", *_options(cmd, ctx), ".SH SEE ALSO", f".BR {PROG} (1)"]
    return "\n".join(lines) + "\n"


def _first_line(cmd):
    """The NAME line: the help's first sentence, lower-cased as man pages have it."""
    text = cmd.get_short_help_str(limit=300).rstrip(".")
    return text[:1].lower() + text[1:]


def _paragraphs(cmd):
    """The command's help as roff paragraphs; click's \\b paragraphs stay as written."""
    text = inspect.cleandoc(cmd.help or "").split("\f")[0]
    out = []
    for para in re.split(r"\n\s*\n", text):
        if para.startswith("\b"):
            out += [".PP", ".nf", escape(para[1:].strip("\n")), ".fi"]
        elif para.strip():
            out += [".PP", escape(" ".join(para.split()))]
    return out[1:]


def _options(cmd, ctx):
    """Each visible option as click's --help has it: its names and metavar, then its help with
    the default, range and choices click appends."""
    lines = []
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
        if record is None:
            continue
        names = set(param.opts) | set(param.secondary_opts)
        words = []
        for word in record[0].split(" "):
            bare = word.rstrip(",")
            if bare in names:
                words.append(f"\\fB{escape(bare)}\\fR" + word[len(bare):])
            elif word == "/":
                words.append(word)
            else:
                words.append(f"\\fI{escape(word)}\\fR")
        lines += [".TP", " ".join(words), escape(record[1])]
    return lines


def _italic_usage(piece):
    return re.sub(r"[A-Z][A-Z_]+", lambda m: f"\\fI{m.group(0)}\\fR", escape(piece))


def escape(text):
    """Plain text as roff: backslashes and minus signs escaped, no line read as a request."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join("\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n"))


def write(outdir):
    """Write man/*.1 and the completions (SCRIPTS) under outdir; the paths written."""
    outdir = Path(outdir)
    written = []
    for sub, files in (("man", man_pages()),
                       ("completions", {name: completion_script(s) for s, name in SCRIPTS.items()})):
        (outdir / sub).mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            path = outdir / sub / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m dasllama_cli.docs_gen OUTDIR   (the tree's root regenerates man/ and completions/)")
    for path in write(sys.argv[1]):
        print(path)

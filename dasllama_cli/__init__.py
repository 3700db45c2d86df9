"""The dasllama command line."""
import sys
import warnings


def _show_engine_notes():
    """The engine's notes on a tuning choice it did not use (SidecarWarning) as one line on
    stderr, once per process, instead of Python's file:line warning with its source line.
    Installed here, before the subcommands import the kernels (which resolve at import)."""
    python_show = warnings.showwarning
    shown = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ != "SidecarWarning":
            return python_show(message, category, filename, lineno, file, line)
        text = str(message)
        if text not in shown:
            shown.add(text)
            print(f"dasllama: {text}", file=file or sys.stderr)

    warnings.showwarning = show


_show_engine_notes()

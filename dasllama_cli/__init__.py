"""The dasllama command line."""
import importlib.util
import sys
import warnings


def _check_engine_importable():
    """The engine is the namespace package dasllama.* (dasllama.core, .kernels, .formats); PyPI's
    `dasllama` (another product) is a regular package of the same name. Installed into one
    site-packages the two merge and both work; a `dasllama` regular package on another sys.path
    entry hides ours wherever it stands, and every import would fail with a traceback."""
    try:
        found = importlib.util.find_spec("dasllama.core") is not None
    except ImportError:
        found = False
    if not found:
        other = getattr(sys.modules.get("dasllama"), "__file__", None) or "another sys.path entry"
        sys.exit(f"dasllama: the engine (dasllama.core) is hidden by another package named dasllama at {other}, "
                 "on another sys.path entry than dasllama-toolkit: install dasllama-toolkit into that same "
                 "environment, or remove the other one (pip uninstall dasllama).")


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


_check_engine_importable()
_show_engine_notes()

"""The `dasllama` command group: one engine, single-purpose subcommands."""
import errno
import importlib
import os
import signal
import sys
import traceback

import click

EXIT_INTERRUPTED = 128 + signal.SIGINT     # 130, what a shell reports for a Ctrl-C
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE    # 141, what `yes | head` reports for yes


# Each subcommand's module, imported when that command runs (or help lists it): `generate`
# does not pay for the speech, server and bench code it never calls.
COMMANDS = {
    "generate": "generate:generate_cmd",
    "transcribe": "transcribe:transcribe_cmd",
    "speak": "speak:speak_cmd",
    "verify": "verify:verify_cmd",
    "bench": "bench:bench_cmd",
    "tune": "tune:tune_cmd",
    "serve": "serve:serve_cmd",
    "mtmd": "mtmd:mtmd_cmd",
    "models": "models:models_cmd",
    "warmup": "warmup:warmup_cmd",
}


class Commands(click.Group):
    """click's group, with the endings a shell expects: Ctrl-C exits 130 and a closed pipe
    141, both without a word; a bug in dasllama shows its traceback and asks for a report.
    Subcommands load on first use (COMMANDS)."""

    def list_commands(self, ctx):
        return list(COMMANDS) + sorted(set(super().list_commands(ctx)) - set(COMMANDS))

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return super().get_command(ctx, name)
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(f"{__package__}.{module}"), attr)

    def main(self, args=None, prog_name=None, **extra):
        extra.pop("standalone_mode", None)
        _default_sigpipe()
        try:
            code = super().main(args, prog_name, standalone_mode=False, **extra)
            _flush_stdout()
        except click.ClickException as e:
            e.show()
            code = e.exit_code
        except click.exceptions.Exit as e:
            code = e.exit_code
        except (KeyboardInterrupt, click.Abort):
            _flush_stdout()
            click.echo("dasllama: interrupted", err=True)
            code = EXIT_INTERRUPTED
        except OSError as e:
            if e.errno != errno.EPIPE:
                _report_bug()
                code = 1
            else:
                _silence_stdout()
                code = EXIT_BROKEN_PIPE
        except Exception:  # noqa: BLE001 -- every other exception is a bug of ours
            _report_bug()
            code = 1
        sys.exit(code if isinstance(code, int) else 0)


def _default_sigpipe():
    """When stdout is the process's own, die of SIGPIPE as `yes` does when the reader goes
    (Python ignores the signal and raises BrokenPipeError later, from wherever it writes)."""
    if sys.stdout is sys.__stdout__ and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)


def _flush_stdout():
    try:
        sys.stdout.flush()
    except OSError as e:
        if e.errno != errno.EPIPE:
            raise
        _silence_stdout()
        sys.exit(EXIT_BROKEN_PIPE)


def _silence_stdout():
    """Point stdout at /dev/null, so the interpreter's last flush at exit finds no pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass    # not a real file (a test runner's buffer): nothing will flush into a pipe


def _report_bug():
    traceback.print_exc(file=sys.stderr)
    click.echo("dasllama: this is a bug in dasllama, not a problem with your input: please "
               "report it to the dasllama maintainers with the command line and the "
               "traceback above.", err=True)


def _print_version(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from dasllama.core.runtime.about import report
    click.echo("\n".join(report()))
    ctx.exit()


def _print_completion(ctx, param, value):
    if not value or ctx.resilient_parsing:
        return
    from .docs_gen import completion_script
    click.echo(completion_script(value), nl=False)
    ctx.exit()


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version, commit, numba/llvmlite, CPU class and threading layer, and exit.")
@click.option("--completion", type=click.Choice(["bash", "zsh", "fish"]), expose_value=False, is_eager=True,
              callback=_print_completion, help="Print the shell's completion script (e.g. eval \"$(dasllama "
              "--completion bash)\" in ~/.bashrc), and exit.")
def cli():
    """Run local AI models on the CPU from stock GGUF files."""


if __name__ == "__main__":
    cli()

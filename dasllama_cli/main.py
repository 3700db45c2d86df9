"""The `dasllama` command group: one engine, single-purpose subcommands."""
import click

from .bench import bench_cmd
from .generate import generate_cmd
from .speak import speak_cmd
from .transcribe import transcribe_cmd
from .tune import tune_cmd
from .verify import verify_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dasllama")
def cli():
    """Run local AI models on the CPU from stock GGUF files."""


cli.add_command(generate_cmd, "generate")
cli.add_command(transcribe_cmd, "transcribe")
cli.add_command(speak_cmd, "speak")
cli.add_command(verify_cmd, "verify")
cli.add_command(bench_cmd, "bench")
cli.add_command(tune_cmd, "tune")

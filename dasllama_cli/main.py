"""The `dasllama` command group."""
import click


@click.group()
def cli():
    """Run local AI models on the CPU."""

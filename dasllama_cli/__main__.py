"""`python -m dasllama_cli`: the `dasllama` command."""
from .main import cli

cli(prog_name="dasllama")

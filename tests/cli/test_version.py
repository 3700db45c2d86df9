"""`dasllama --version` says what a bug report needs, and `python -m dasllama_cli` is the CLI."""
import subprocess
import sys

import numba
from click.testing import CliRunner

from dasllama.kernels.cpu import probe
from dasllama_cli.main import cli


def test_version_names_the_build_numba_cpu_class_and_threading():
    r = CliRunner().invoke(cli, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("dasllama ") and "commit " in r.output
    assert f"numba {numba.__version__}" in r.output
    assert f"class {probe().cpu_class}" in r.output and "threading layer " in r.output


def test_python_m_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "dasllama_cli", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Usage: dasllama" in r.stdout and "generate" in r.stdout

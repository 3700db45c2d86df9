"""The man pages and completion scripts in the tree are what docs_gen writes from the click
tree today (regenerate: python -m dasllama_cli.docs_gen .), and every page renders with man."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    r = subprocess.run([sys.executable, "-m", "dasllama_cli.docs_gen", str(out)], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.parametrize("sub", ["man", "completions"])
def test_tree_matches_the_click_tree(generated, sub):
    made = {p.name: p.read_text() for p in (generated / sub).iterdir()}
    kept = {p.name: p.read_text() for p in (ROOT / sub).iterdir()}
    assert set(made) == set(kept), f"{sub}/ has other files than docs_gen writes: run python -m dasllama_cli.docs_gen ."
    stale = [name for name in made if made[name] != kept[name]]
    assert not stale, f"{sub}/{stale} drifted from the commands: run python -m dasllama_cli.docs_gen ."


def test_every_command_has_a_page_listing_its_flags():
    from dasllama_cli.main import cli
    import click
    ctx = click.Context(cli, info_name="dasllama")
    for name in cli.list_commands(ctx):
        page = (ROOT / "man" / f"dasllama-{name}.1").read_text()
        for param in cli.get_command(ctx, name).params:
            for opt in getattr(param, "opts", []) if isinstance(param, click.Option) else []:
                assert f"\\fB{opt.replace('-', chr(92) + '-')}\\fR" in page, (name, opt)


@pytest.mark.skipif(shutil.which("man") is None, reason="man-db is not installed (apt-get install man-db)")
def test_man_pages_render_without_warnings():
    for page in sorted((ROOT / "man").glob("*.1")):
        r = subprocess.run(["man", "--warnings", "-l", "-P", "cat", str(page)], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "MANWIDTH": "80", "LC_ALL": "C.UTF-8"})
        assert r.returncode == 0 and not r.stderr.strip(), (page.name, r.stderr)
        name = page.stem.upper()
        assert r.stdout.lstrip().startswith(f"{name}(1)") and "OPTIONS" in r.stdout, page.name

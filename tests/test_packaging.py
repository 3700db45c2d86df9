"""The sdist and the wheel carry what packagers and users need: the licence, the man page and
the shell completions (installed where man and the shells look), the docs and the tests; and
twine finds their metadata valid."""
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build", reason="python -m build is in the test extra")

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "-o", str(out), str(ROOT)], capture_output=True, text=True,
                       timeout=900)
    if r.returncode and "Could not find a version" in r.stdout + r.stderr:
        pytest.skip("the package registry is out of reach: build cannot fetch setuptools")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def test_sdist_has_licence_man_completions_docs_and_tests(dist):
    sdist, = dist.glob("*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    for want in ("LICENSE", "man/dasllama.1", "man/dasllama-generate.1", "completions/dasllama",
                 "completions/_dasllama", "completions/dasllama.fish", "docs/ARCHITECTURE.md", "tests/test_packaging.py"):
        assert want in names, want


def test_wheel_installs_man_page_and_completions(dist):
    wheel, = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    data = {n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n}
    pages = {f"share/man/man1/{p.name}" for p in (ROOT / "man").glob("*.1")}
    assert "share/man/man1/dasllama-transcribe.1" in pages
    assert data == pages | {"share/bash-completion/completions/dasllama", "share/zsh/site-functions/_dasllama",
                            "share/fish/vendor_completions.d/dasllama.fish"}
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not any(n.startswith(("core/", "kernels/", "formats/")) for n in names), "a generic top-level name"


def test_twine_check_passes(dist):
    pytest.importorskip("twine")
    r = subprocess.run([sys.executable, "-m", "twine", "check", *map(str, dist.iterdir())], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_regular_dasllama_package_elsewhere_on_the_path_is_one_sentence(dist, tmp_path):
    """PyPI's `dasllama` (another product) is a regular package; on another sys.path entry than
    our namespace portion it hides dasllama.core: the command says so instead of a traceback."""
    wheel, = dist.glob("*.whl")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    zipfile.ZipFile(wheel).extractall(ours)
    (theirs / "dasllama").mkdir(parents=True)
    (theirs / "dasllama" / "__init__.py").write_text('"""a regular package named dasllama"""\n')
    launch = (f"import sys, runpy; sys.path[:0] = [{str(ours)!r}, {str(theirs)!r}]; "
              "runpy.run_module('dasllama_cli', run_name='__main__')")
    # -S: no site-packages, so this checkout's editable install does not map dasllama.* by name
    r = subprocess.run([sys.executable, "-S", "-c", launch], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "hidden by another package named dasllama" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    both = tmp_path / "one-site-packages"          # the same two in one directory: they merge
    zipfile.ZipFile(wheel).extractall(both)
    shutil.copy(theirs / "dasllama" / "__init__.py", both / "dasllama" / "__init__.py")
    r = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path[:0] = [{str(both)!r}]; import importlib.util; "
                        "assert importlib.util.find_spec('dasllama.core'); import dasllama_cli"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr

"""The wheel carries every package of the tree: pyproject lists packages one by one (to map
them under the `dasllama` namespace), so a new sub-package left off the list installs
editable but is missing from every wheel (kernels/formats and core/mtmd once were)."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = {"core": "dasllama.core", "kernels": "dasllama.kernels", "formats": "dasllama.formats",
         "dasllama_cli": "dasllama_cli"}


def test_every_package_dir_is_in_the_wheel():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed, dirs = set(config["packages"]), config["package-dir"]
    found = {}
    for top, name in TREES.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top)
            found[".".join((name, *rel.parts))] = init.parent.relative_to(ROOT).as_posix()
    assert set(found) - listed == set()
    assert {pkg: dirs.get(pkg) for pkg in found} == found

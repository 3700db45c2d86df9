"""The layering rule of docs/ARCHITECTURE.md, read off every module's imports: data flows
dasllama_cli -> core -> kernels, files are read by formats, the products (core/llm, core/asr, core/tts)
share core/runtime and kernels but never import each other, and the engine never imports a
tool (verify, bench, the reference runners)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"dasllama_cli": "dasllama_cli", "core": "dasllama.core", "kernels": "dasllama.kernels",
            "formats": "dasllama.formats"}

# importer prefix -> prefixes it must not import
FORBIDDEN = {
    "dasllama.kernels": ("dasllama.core", "dasllama_cli", "dasllama.formats"),
    "dasllama.formats": ("dasllama.core", "dasllama.kernels", "dasllama_cli"),
    "dasllama.core.runtime": ("dasllama.core.serve", "dasllama.core.llm", "dasllama.core.asr", "dasllama.core.tts", "dasllama.core.tools", "dasllama_cli"),
    "dasllama.core.llm": ("dasllama.core.serve", "dasllama.core.asr", "dasllama.core.tts", "dasllama.core.tools", "dasllama_cli"),
    "dasllama.core.asr": ("dasllama.core.serve", "dasllama.core.llm", "dasllama.core.tts", "dasllama.core.tools", "dasllama_cli"),
    "dasllama.core.tts": ("dasllama.core.serve", "dasllama.core.llm", "dasllama.core.asr", "dasllama.core.tools", "dasllama_cli"),
    # image turns: a product over llm (the splice), like serve
    "dasllama.core.mtmd": ("dasllama.core.serve", "dasllama.core.asr", "dasllama.core.tts", "dasllama.core.tools", "dasllama_cli"),
    "dasllama.core.tools": ("dasllama_cli",),
    "dasllama.core.serve": ("dasllama.core.tools", "dasllama_cli"),
}


def module_name(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:]]
    return ".".join(p for p in parts if p != "__init__")


def imports(path):
    """Every dasllama module `path` imports, relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            found.add(target)
            found |= {f"{target}.{a.name}" for a in node.names}
    return {m for m in found if m and m.startswith(("dasllama.", "dasllama_cli"))}


SOURCES = sorted(p for top in PACKAGES for p in (ROOT / top).rglob("*.py"))


def test_the_sources_are_found():
    assert len(SOURCES) > 50


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_follow_the_layers(path):
    name = module_name(path)
    for importer, banned in FORBIDDEN.items():
        if name == importer or name.startswith(importer + "."):
            wrong = sorted(m for m in imports(path) for b in banned if m == b or m.startswith(b + "."))
            assert not wrong, f"{name} imports {wrong}: against the layering rule"


def test_relative_imports_resolve_to_their_package():
    # core/asr/model.py's `from ..runtime.threads import ...` is core.runtime.threads
    assert "dasllama.core.runtime.threads" in imports(ROOT / "core" / "asr" / "model.py")

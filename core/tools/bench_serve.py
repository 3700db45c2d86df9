"""Load on a running `dasllama serve`: concurrent streaming clients (some of which hang up
early), throughput and time to first token. Plain http.client threads, no client library.

    python -m dasllama.core.tools.bench_serve http://127.0.0.1:8080 --concurrency 1,4
"""
import argparse
import http.client
import json
import random
import statistics
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass
class Result:
    index: int
    text: str = ""
    ttft_s: float | None = None       # request sent -> first content chunk
    total_s: float = 0.0
    completed: bool = False           # the stream ended with [DONE]
    hung_up: bool = False             # the client disconnected on purpose
    finish_reason: str | None = None
    completion_tokens: int = 0
    ids: tuple = ()                   # the response ids seen (one expected)
    error: str | None = None


def stream_completion(url, body, key=None, hang_up_after=None, index=0, timeout=600):
    """POST a streaming /v1/completions; hang_up_after: close after that many chunks."""
    u = urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    result = Result(index)
    t0 = time.perf_counter()
    ids = []
    try:
        conn.request("POST", "/v1/completions", json.dumps({**body, "stream": True,
                     "stream_options": {"include_usage": True}}), headers)
        response = conn.getresponse()
        if response.status != 200:
            result.error = f"HTTP {response.status}: {response.read()[:200]!r}"
            return result
        n_chunks = 0
        for line in response:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                result.completed = True
                break
            chunk = json.loads(data)
            if "error" in chunk:
                result.error = chunk["error"]["message"]
                break
            if chunk["id"] not in ids:
                ids.append(chunk["id"])
            if chunk.get("usage"):
                result.completion_tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                if choice["text"] and result.ttft_s is None:
                    result.ttft_s = time.perf_counter() - t0
                result.text += choice["text"]
                result.finish_reason = choice["finish_reason"] or result.finish_reason
            n_chunks += 1
            if hang_up_after is not None and n_chunks >= hang_up_after:
                result.hung_up = True
                break
    except (OSError, http.client.HTTPException, ValueError) as e:
        result.error = f"{type(e).__name__}: {e}"
    finally:
        conn.close()
        result.total_s = time.perf_counter() - t0
        result.ids = tuple(ids)
    return result


def run_load(url, bodies, concurrency, key=None, hang_up=(), seed=0):
    """Send `bodies` with `concurrency` clients at once; hang_up: indices that disconnect
    after a few chunks. Returns (results in body order, wall seconds)."""
    rng = random.Random(seed)
    plan = {i: rng.randint(1, 4) for i in hang_up}
    results = [None] * len(bodies)
    next_index = iter(range(len(bodies)))
    lock = threading.Lock()

    def client():
        while True:
            with lock:
                i = next(next_index, None)
            if i is None:
                return
            results[i] = stream_completion(url, bodies[i], key, plan.get(i), i)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - t0


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    return values[min(len(values) - 1, max(0, round(q / 100 * len(values) + 0.5) - 1))]


def summary(results, wall_s):
    done = [r for r in results if r.completed]
    ttft = [r.ttft_s for r in results if r.ttft_s is not None]
    tokens = sum(r.completion_tokens for r in done)
    return {"requests": len(results), "completed": len(done), "wall_s": wall_s,
            "gen_tokens": tokens, "tokens_per_s": tokens / wall_s if wall_s else 0.0,
            "ttft_p50_s": statistics.median(ttft) if ttft else None, "ttft_p99_s": percentile(ttft, 99)}


def bodies_for(n, max_tokens, model=None):
    topics = ("rivers", "mountains", "the sea", "old towns", "trains", "bread", "winter", "music")
    return [{"prompt": f"A short story about {topics[i % len(topics)]} (part {i}):",
             "max_tokens": max_tokens, "temperature": 0, **({"model": model} if model else {})}
            for i in range(n)]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("url")
    p.add_argument("--concurrency", default="1,4", help="comma-separated client counts")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--api-key")
    args = p.parse_args(argv)
    for c in (int(v) for v in args.concurrency.split(",")):
        results, wall = run_load(args.url, bodies_for(args.requests, args.max_tokens), c, args.api_key)
        print(json.dumps({"concurrency": c, **summary(results, wall)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

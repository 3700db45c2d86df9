"""Bounded load on a real `dasllama serve -np 4`: concurrent streams with hang-ups, a full
queue, and throughput with 4 sequences at once against 1 (printed; a benchmark, not a test)."""
import json
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from dasllama.core.tools.bench_serve import bodies_for, run_load, stream_completion, summary
from tests import assets

from .server import running_server

pytestmark = pytest.mark.slow
N_PARALLEL = 4
QUEUE = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = assets.or_skip(assets.smollm2_q4_1)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with running_server("-m", model, "-c", 256 * N_PARALLEL, "-np", N_PARALLEL, "--queue", QUEUE,
                        log=log) as (url, proc):
        yield url
        assert proc.poll() is None, "the server died under load"


def health(url):
    with urllib.request.urlopen(url + "/health", timeout=10) as r:
        return json.loads(r.read())


def wait_idle(url, timeout_s=10):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        h = health(url)
        if h["slots_active"] == 0 and h["queue"] == 0:
            return h
        time.sleep(0.1)
    raise AssertionError(f"the server is still busy after {timeout_s} s: {health(url)}")


def alone(url, body):
    """The same request on its own, not streamed: the whole text it must produce."""
    r = httpx.post(url + "/v1/completions", json=body, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_sixteen_streaming_clients_with_hangups(server):
    bodies = bodies_for(16, 24)
    hang_up = {1, 4, 6, 11, 14}
    results, _ = run_load(server, bodies, concurrency=16, hang_up=hang_up, seed=3)
    assert all(r is not None and r.error is None for r in results), [r.error for r in results]
    ids = [r.ids for r in results]
    assert all(len(i) == 1 for i in ids) and len({i[0] for i in ids}) == 16   # none lost, none shared
    for i, r in enumerate(results):
        assert r.hung_up == (i in hang_up)
        if i in hang_up:
            continue
        assert r.completed and r.finish_reason in ("stop", "length")
        expected = alone(server, bodies[i])
        assert r.text == expected["text"], f"client {i}'s stream is not whole"
    wait_idle(server)


def test_a_hang_up_cancels_its_sequence(server):
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 220, "temperature": 0}
    before = health(server)["requests_cancelled"]
    r = stream_completion(server, body, hang_up_after=2)
    assert r.hung_up and r.error is None
    assert wait_idle(server)["requests_cancelled"] == before + 1


def test_a_full_queue_answers_503_with_retry_after(server):
    body = {"prompt": "Write a long letter:", "max_tokens": 48, "temperature": 0}
    n = N_PARALLEL + QUEUE + 8

    def one(_):
        return httpx.post(server + "/v1/completions", json=body, timeout=600)
    with ThreadPoolExecutor(n) as pool:
        responses = list(pool.map(one, range(n)))
    busy = [r for r in responses if r.status_code == 503]
    ok = [r for r in responses if r.status_code == 200]
    assert len(busy) + len(ok) == n and busy and ok, [r.status_code for r in responses]
    for r in busy:
        assert r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "server_busy"
    texts = {r.json()["choices"][0]["text"] for r in ok}
    assert len(texts) == 1               # the same greedy request: the same whole text each time
    wait_idle(server)


def test_throughput_four_sequences_against_one(server):
    rows = []
    for concurrency in (1, N_PARALLEL, 1, N_PARALLEL):        # alternated: the host is noisy
        results, wall = run_load(server, bodies_for(8, 32), concurrency)
        assert all(r.completed for r in results)
        rows.append({"concurrency": concurrency, **summary(results, wall)})
    for row in rows:
        print(f"serve load: {json.dumps(row)}", file=sys.stderr)
    by = {c: [r["tokens_per_s"] for r in rows if r["concurrency"] == c] for c in (1, N_PARALLEL)}
    print(f"serve load: {N_PARALLEL} sequences / 1 = "
          f"{sum(by[N_PARALLEL]) / sum(by[1]):.2f}x tokens/s", file=sys.stderr)


def test_bench_serve_mode_reports_both_concurrencies(server):
    from click.testing import CliRunner

    from dasllama_cli.main import cli
    r = CliRunner().invoke(cli, ["bench", "--serve", server, "-n", "8", "-r", "1", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["concurrency"] for row in rows] == [1, 4]
    assert all(row["completed"] == 8 and row["gen_tokens"] == 64 and row["ttft_p50_s"] > 0 for row in rows)


def test_a_client_gone_from_a_plain_request_cancels_it(server):
    body = {"prompt": "1, 2, 3, 4, 5, 6, 7,", "max_tokens": 220, "temperature": 0}
    before = health(server)["requests_cancelled"]
    with pytest.raises(httpx.TimeoutException):
        httpx.post(server + "/v1/completions", json=body, timeout=0.3)
    assert wait_idle(server)["requests_cancelled"] == before + 1

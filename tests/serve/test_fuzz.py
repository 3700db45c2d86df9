"""A fuzz pass over `dasllama serve`'s HTTP API from its own OpenAPI spec (schemathesis):
whatever the body, the answer is never a 500. Bounded: a few examples per operation."""
import pytest

from tests import assets, whisper_assets

from .server import running_server

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402  (schemathesis brings hypothesis)
from schemathesis.checks import not_a_server_error  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = 15       # per operation; 7 operations


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = assets.or_skip(assets.smollm2_q4_1)
    whisper = assets.or_skip(whisper_assets.tiny_en)
    voice = assets.or_skip(whisper_assets.piper_voice)
    log = tmp_path_factory.mktemp("serve") / "stderr.txt"
    with running_server("-m", model, "-c", 256, "--max-body", 1 << 20, "--whisper-model", whisper,
                        "--voice-model", voice, log=log) as (url, proc):
        yield url
        assert proc.poll() is None, "the server died under the fuzz pass"


@pytest.fixture(scope="module")
def api_schema(server):
    return schemathesis.openapi.from_url(server + "/openapi.json")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_request_is_a_server_error(case, server):
    case.call_and_validate(base_url=server, checks=[not_a_server_error], timeout=120)

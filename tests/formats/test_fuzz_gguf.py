"""A bounded fuzz of the GGUF reader: a few thousand mutants of tiny valid files, each either
read or refused with GGUFError (one sentence), never another exception."""
import pytest

from dasllama.formats.gguf import GGUFError, open_gguf

from tests.gguf_mutants import mutants, seed_corpus

N_MUTANTS = 3000


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return seed_corpus(tmp_path_factory.mktemp("fuzz-seeds"))


def test_seeds_are_valid(seeds):
    for data in seeds:
        assert len(data) > 100


def test_mutants_are_read_or_refused_with_a_sentence(seeds, tmp_path):
    path = tmp_path / "mutant.gguf"
    refused = 0
    for i, data in enumerate(mutants(seeds, N_MUTANTS)):
        path.write_bytes(data)
        try:
            open_gguf(path)
        except GGUFError as e:
            refused += 1
            message = str(e)
            assert message.endswith(".") and "\n" not in message, (i, message)
        except Exception as e:  # noqa: BLE001 -- the point of the test
            pytest.fail(f"mutant {i} ({len(data)} bytes) raised {type(e).__name__}: {e}")
    assert 0 < refused < N_MUTANTS    # the mutator neither misses nor always breaks the header

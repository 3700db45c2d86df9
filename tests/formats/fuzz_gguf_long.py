"""A long, coverage-guided fuzz of reading a GGUF LLM (atheris): the reader, then what model
load takes from the metadata (family, hyper-parameters, weight tables, vocab), everything but
the KV cache and the kernels. Not a test (pytest does not collect it); run by hand:

    python tests/formats/fuzz_gguf_long.py OUT_DIR -max_total_time=600

Every input must load or raise one of the project's own errors; the tally of outcomes is
written to OUT_DIR/outcomes.json as it goes.
"""
import collections
import json
import os
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from dasllama.core.llm.families import UnsupportedModel, family
    from dasllama.core.llm.model import Model
    from dasllama.core.llm.tokenizer import TokenizerError
    from dasllama.formats.gguf import GGUFError, open_gguf

import numpy as np  # noqa: E402

from tests import gguf_factory  # noqa: E402
from tests.gguf_mutants import seed_corpus  # noqa: E402

OWN_ERRORS = (GGUFError, UnsupportedModel, TokenizerError)


def load_metadata(path):
    """Model.__init__ up to its allocations."""
    g = open_gguf(path)
    model = Model.__new__(Model)
    model.path, model.gguf, model.family = path, g, family(g.architecture)
    model._describe()
    model._tokenizer()


def main():
    out = Path(sys.argv[1])
    corpus = out / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    seeds = seed_corpus(out)
    vocab = gguf_factory.write_tiny_vocab(out / "ggml-vocab-tiny.gguf")
    for arch in ("llama", "qwen3", "phi3"):
        model = gguf_factory.write_model(out / "models", arch, "Q8_0" if arch == "llama" else "F32",
                                         n_embd=32, n_ff=64, n_head=2, n_head_kv=1,
                                         vocab_from=vocab)
        seeds.append(model.read_bytes())
    for i, data in enumerate(seeds):
        (corpus / f"seed{i}").write_bytes(data)
    target = Path(f"/dev/shm/fuzz-gguf-{os.getpid()}.gguf")
    outcomes = collections.Counter()

    def one(data):
        target.write_bytes(data)
        try:
            load_metadata(target)
            outcomes["loads"] += 1
        except OWN_ERRORS as e:
            words = str(e).replace(str(target), "FILE").replace("'", "").split()
            outcomes[f"{type(e).__name__}: {' '.join(w for w in words[:7] if not w[0].isdigit())}"] += 1
        total = sum(outcomes.values())
        if total % 2000 == 0:
            (out / "outcomes.json").write_text(json.dumps(
                {"inputs": total, "outcomes": dict(outcomes.most_common())}, indent=1))

    atheris.Setup([sys.argv[0], str(corpus), "-max_len=200000", "-rss_limit_mb=2048",
                   f"-artifact_prefix={out}/",
                   *sys.argv[2:]], one)
    atheris.Fuzz()


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()

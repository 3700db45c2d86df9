"""`dasllama bench --batched`: batched decode timed as llama-batched-bench times it, with it
beside. Benchmarks are not tests: these check the shape of the output, not the speed."""
import json

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli


def run(*args):
    return CliRunner().invoke(cli, ["bench", "--wait-idle", "0", *map(str, args)])


def test_batched_rows_of_ours(tiny_model):
    model = tiny_model("llama", "Q8_0")
    r = run("-m", model, "--batched", "1,3", "-p", 5, "-n", 4, "-r", 2, "-t", 2, "-o", "jsonl")
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["engine"], x["n_seq"], x["n_prompt"], x["n_gen"]) for x in rows] == [
        ("dasllama", 1, 5, 4), ("dasllama", 3, 5, 4)]
    assert all(x["avg_ts"] > 0 and len(x["samples_ts"]) == 2 for x in rows)
    assert rows[0]["vs_b1"] == 1.0 and rows[1]["vs_b1"] == pytest.approx(rows[1]["avg_ts"] / rows[0]["avg_ts"])


@pytest.mark.slow
def test_batched_beside_llama_batched_bench(smollm2, llama_bin):
    if not (llama_bin / "llama-batched-bench").exists():
        pytest.skip("this llama.cpp build has no llama-batched-bench: bash .ci/build-llama-cpp adds it")
    r = run("-m", smollm2, "--batched", "1,2", "-p", 8, "-n", 8, "-r", 1, "-t", 2, "--ref", "llama.cpp",
            "--ref-bin", llama_bin)
    assert r.exit_code == 0, r.output
    table = r.stdout.splitlines()
    assert table[0].endswith("| llama.cpp t/s | llama.cpp vs B=1 | ratio |")
    assert [line.split("|")[3].strip() for line in table[2:4]] == ["tg8@B1 (pp8 each)", "tg8@B2 (pp8 each)"]


def test_batched_takes_only_llama_cpp_as_reference(tiny_model):
    r = run("-m", tiny_model("llama", "Q8_0"), "--batched", "2", "-p", 4, "-n", 4, "--ref", "seed")
    assert r.exit_code == 2 and "llama-batched-bench" in r.output

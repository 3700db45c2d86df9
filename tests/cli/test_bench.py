"""`dasllama bench`: llama-bench's tests and fields for our engine, llama-bench beside it, and
the receipt. Benchmarks are not tests: these check the shape of the output, not the speed."""
import json
import os

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import assets


def run(*args):
    """bench without waiting for an idle machine: these tests check output, not speed."""
    return CliRunner().invoke(cli, ["bench", "--wait-idle", "0", *map(str, args)])


def test_nothing_to_measure_is_a_usage_error():
    r = run("-p", 0, "-n", 0)
    assert r.exit_code == 2 and "nothing to measure" in r.stderr


@pytest.mark.slow
def test_json_has_both_engines_ratio_and_receipt(llama_bin, smollm2, tmp_path):
    receipt_file = tmp_path / "receipt.json"
    r = run("-m", smollm2, "-p", 32, "-n", 8, "-r", 1, "-t", 2, "--ref", "llama.cpp",
            "--ref-bin", llama_bin, "-o", "json", "--receipt", receipt_file)
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    records = doc["results"]
    assert [(x["engine"], x["n_prompt"], x["n_gen"]) for x in records] == [
        ("dasllama", 32, 0), ("llama.cpp", 32, 0), ("dasllama", 0, 8), ("llama.cpp", 0, 8)]
    for x in records:
        assert x["avg_ts"] > 0 and len(x["samples_ns"]) == len(x["samples_ts"]) == 1
        assert x["n_threads"] == 2 and {"avg_ns", "stddev_ts", "model_type"} <= set(x)
    for ours, theirs in zip(records[::2], records[1::2]):
        assert ours["ratio"] == pytest.approx(ours["avg_ts"] / theirs["avg_ts"])
    # tg records carry the bytes a token streams and a plain read of the weights beside them
    size = os.path.getsize(smollm2)
    for x in records[2:]:
        assert 0.5 * size < x["decode_bytes_per_token"] <= size
        assert x["decode_gbps"] == pytest.approx(x["decode_bytes_per_token"] * x["avg_ts"] / 1e9)
        assert x["read_gbps"] == records[2]["read_gbps"] > 0.1
    assert "decode_gbps" not in records[0] and "% of a plain read" in r.stderr

    receipt = doc["receipt"]
    assert receipt["commands"]["dasllama"].startswith("dasllama bench -m ")
    assert [c.split()[0].endswith("llama-bench") for c in receipt["commands"]["llama.cpp"]] == [True, True]
    assert receipt["inputs"][0]["sha256"] == assets.SHA256["SmolLM2-135M-Instruct.Q4_1.gguf"]
    assert receipt["software"]["numba"] and receipt["software"]["llvmlite"]
    assert receipt["reference"]["commit"] == "0c1e570"
    tuned = receipt["tune_sidecar"]
    assert tuned == "none" or tuned["in_force"] and (tuned["sidecar"] is None or tuned["sidecar"]["sha256"])
    hw = receipt["hardware"]
    assert hw["cpu_model"] and hw["logical_cpus"] >= 1 and hw["physical_cores"] >= 1
    assert hw["memory_bytes"] > 0 and isinstance(hw["cpu_features"], list)
    assert json.loads(receipt_file.read_text()) == doc


@pytest.mark.slow
def test_markdown_and_csv_follow_llama_bench(smollm2):
    md = run("-m", smollm2, "-p", 16, "-n", 4, "-r", 2, "-t", 1)
    assert md.exit_code == 0, md.stderr
    lines = md.stdout.splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "model", "size", "params", "backend", "threads", "test", "t/s"]
    assert "pp16" in lines[2] and "tg4" in lines[3] and "±" in lines[2]
    assert "t/s" in md.stderr and "bench:" not in md.stdout     # progress goes to stderr

    csv = run("-m", smollm2, "-p", 0, "-n", 4, "-r", 1, "-t", 1, "-o", "csv")
    head, row = csv.stdout.splitlines()
    assert head.startswith('"engine","build_commit"') and '"avg_ts"' in head
    assert row.startswith('"dasllama"')

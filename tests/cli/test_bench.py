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


@pytest.fixture(scope="module")
def seed_exe():
    return assets.or_skip(assets.seed_bench)


@pytest.mark.slow
def test_llama_cpp_and_the_seed_interleaved_in_one_run(llama_bin, seed_exe, tmp_path):
    """Both peers on the same file, threads and tests, a ratio to each; the seed's prepared
    weight image lands in dasllama's cache, not beside the model."""
    gemma3 = assets.or_skip(assets.gemma3_q4km)
    r = run("-m", gemma3, "-p", 16, "-n", 4, "-r", 1, "-t", 2, "--ref", "llama.cpp", "--ref", "seed",
            "--ref-bin", llama_bin, "--seed-bench", seed_exe, "-o", "json")
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    records = doc["results"]
    assert [(x["engine"], x["n_prompt"], x["n_gen"]) for x in records] == [
        ("dasllama", 16, 0), ("llama.cpp", 16, 0), ("seed", 16, 0),
        ("dasllama", 0, 4), ("llama.cpp", 0, 4), ("seed", 0, 4)]
    for ours, llama, seed in zip(records[::3], records[1::3], records[2::3]):
        assert seed["avg_ts"] > 0 and seed["n_threads"] == 2
        assert ours["ratios"] == pytest.approx({"llama.cpp": ours["avg_ts"] / llama["avg_ts"],
                                                "seed": ours["avg_ts"] / seed["avg_ts"]})
        assert ours["ratio"] == ours["ratios"]["llama.cpp"]
    assert "seed" in r.stderr and "decode_gbps" in records[5]
    commands = doc["receipt"]["commands"]
    assert [c.split()[0] for c in commands["seed"]] == [str(seed_exe)] * 2
    assert [ref["engine"] for ref in doc["receipt"]["reference"]] == ["llama.cpp", "dasllama (seed)"]
    assert not list(gemma3.parent.glob(gemma3.name + ".*"))

    md = run("-m", gemma3, "-p", 0, "-n", 2, "-r", 1, "-t", 2, "--ref", "seed", "--seed-bench", seed_exe)
    assert md.exit_code == 0, md.stderr
    assert [c.strip() for c in md.stdout.splitlines()[0].strip("|").split("|")][-2:] == ["seed t/s", "ratio"]


def test_the_seed_refusing_a_file_or_missing_is_one_sentence(seed_exe, smollm2, tmp_path):
    """The seed loads no Q4_1; a --seed-bench that is not its executable; two refs on a voice."""
    r = run("-m", smollm2, "-p", 0, "-n", 2, "-r", 1, "-t", 2, "--ref", "seed", "--seed-bench", seed_exe)
    assert r.exit_code == 1 and "seed engine" in r.stderr and "Traceback" not in r.stderr
    fake = tmp_path / "dasllama-bench.exe"
    fake.write_text("not it")
    r = run("-m", smollm2, "-n", 2, "--ref", "seed", "--seed-bench", fake)
    assert r.exit_code == 1 and "is not an executable" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = run("-m", "voice.onnx", "--ref", "llama.cpp", "--ref", "seed")
    assert r.exit_code == 2 and "a voice is timed" in r.stderr

"""`verify` and `bench` for a turn about media, on tiny random-weight pairs (tests.mtmd_pairs)
against the real llama.cpp build's libmtmd and llama-mtmd-cli."""
import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests import assets, mtmd_pairs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def image_pair(tmp_path_factory):
    assets.or_skip(assets.llama_mtmd_bin)
    return mtmd_pairs.write_pair(tmp_path_factory.mktemp("mtmd"), "gemma3", "tiny")


def run(*args):
    return CliRunner().invoke(cli, list(map(str, args)))


def test_verify_an_image_turn_holds_and_a_tight_bound_fails(image_pair):
    image = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    args = ["verify", "-m", image_pair[0], "--mmproj", image_pair[1], "--image", image, "-n", 12, "-t", 2, "--json"]
    r = run(*args)
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    media, = report["media"]
    assert media["shape"] == media["ref_shape"] and 0 < media["rel_err"] < report["embd_bound"]
    assert report["text"]["same"] and report["text"]["ours"].strip()
    # the towers differ by ~3e-4 (f16 K/V in libmtmd): a bound below that is a divergence
    r = run(*args[:-1], "--embd-bound", 1e-6)
    assert r.exit_code == 1, r.output
    assert "past the bound" in r.stdout and "verify: divergence" in r.stdout


def test_verify_an_audio_turn(tmp_path_factory):
    assets.or_skip(assets.llama_mtmd_bin)
    model, mmproj = mtmd_pairs.write_pair(tmp_path_factory.mktemp("qwen2a"), "qwen2a", "tiny")
    clip = assets.or_skip(assets.mtmd_media, "test-2.mp3")
    r = run("verify", "-m", model, "--mmproj", mmproj, "--audio", clip, "-n", 12, "-t", 2)
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"audio {clip}: ") and "verify: parity" in r.stdout


def test_bench_times_the_encoder_and_the_turn_beside_llama_mtmd_cli(image_pair):
    image = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    # a process of its own, as a user runs it (ours runs `python -m dasllama_cli.main mtmd` in turn)
    r = subprocess.run([sys.executable, "-m", "dasllama_cli.main", "bench", "-m", str(image_pair[0]),
                        "--mmproj", str(image_pair[1]), "--image", str(image), "-n", "4", "-r", "1", "-t", "2",
                        "--ref", "llama.cpp", "--wait-idle", "0", "-o", "jsonl"],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    ours, theirs = map(json.loads, r.stdout.splitlines())
    assert (ours["engine"], theirs["engine"]) == ("dasllama", "llama-mtmd-cli")
    for record in (ours, theirs):
        assert 0 < record["encoder_s"] < record["turn_s"], record
    assert ours["ratios"]["turn"] == pytest.approx(theirs["turn_s"] / ours["turn_s"])


@pytest.mark.parametrize("command", ["verify", "bench"])
def test_media_without_mmproj_and_mmproj_without_media_are_usage_errors(image_pair, command):
    image = assets.or_skip(assets.mtmd_media, "test-1.jpeg")
    r = run(command, "-m", image_pair[0], "--image", image)
    assert r.exit_code == 2 and "--image and --audio need --mmproj" in r.output
    r = run(command, "-m", image_pair[0], "--mmproj", image_pair[1])
    assert r.exit_code == 2 and "give --image FILE or --audio FILE" in r.output

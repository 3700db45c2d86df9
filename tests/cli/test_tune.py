"""`dasllama tune`: the winners table on stdout, the how and why on stderr, refusals as one
sentence, --show / --reset, and a second tune that trusts the sidecar. Tiny budgets: these
check the command, not the speed."""
import json

import pytest
from click.testing import CliRunner

from dasllama.kernels import sidecar
from dasllama.kernels import tune as T
from dasllama_cli.main import cli


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(sidecar.CONFIG_ENV, str(tmp_path / "config"))
    monkeypatch.delenv(sidecar.PIN_ENV, raising=False)
    return tmp_path / "config"


def run(*args):
    return CliRunner().invoke(cli, ["tune", *map(str, args)])


@pytest.fixture(scope="module")
def q8_model(tiny_model):
    return tiny_model("llama", "Q8_0")


def test_tune_writes_the_sidecar_and_prints_the_winners(q8_model):
    r = run("-m", q8_model, "--budget", 0.2, "--force", "--no-warm")
    assert r.exit_code == 0, r.output
    head, *rows = r.stdout.splitlines()
    assert head.split()[:5] == ["type", "phase", "shapes", "default", "winner"]
    assert {tuple(row.split()[:2]) for row in rows} == {("Q8_0", "decode"), ("Q8_0", "prefill")}
    assert all(row.split()[-1].endswith("x") for row in rows)
    assert "tune: wrote" in r.stderr and "noise" in r.stderr
    doc = json.loads(sidecar.sidecar_path().read_text())
    assert set(doc["winners"]["Q8_0"]) >= {"decode", "prefill", "decode layout", "prefill layout"}
    assert {tuple(row.split()[1:3]) for row in rows} >= {("decode", "layout"), ("prefill", "layout")}
    assert doc["provenance"]["forced"] and doc["provenance"]["seconds"] > 0

    again = run("-m", q8_model)
    assert again.exit_code == 0 and "already covers this model" in again.stderr
    assert again.stdout.splitlines()[0] == head


def test_a_busy_machine_is_refused_in_one_sentence(q8_model, monkeypatch):
    monkeypatch.setattr(T, "NOISE_LIMIT", -1.0)
    r = run("-m", q8_model, "--budget", 0.2)
    assert r.exit_code == 1 and r.stdout == ""
    assert "Error: the machine is too busy to rank kernels" in r.stderr and "--force" in r.stderr
    assert "Traceback" not in r.output


def test_show_names_the_source_of_each_choice(monkeypatch):
    monkeypatch.setenv(sidecar.PIN_ENV, "Q8_0:decode=ref,Q4_0=nonesuch,Q8_0:prefill=file")
    r = run("--show")
    assert r.exit_code == 0, r.output
    # columns: type, phase (one or two words: "decode", "decode layout", "prefill 64x256"),
    # variant or layout, source (one or two words: "pin", "profile x86-avx2")
    rows = {}
    for line in r.stdout.split("\n\n")[0].splitlines()[1:]:    # the table, below its head
        cells = line.split()
        two_word_source = cells[-2] == "profile"
        value_at = -3 if two_word_source else -2
        rows[cells[0], " ".join(cells[1:value_at])] = cells[value_at:]
    assert rows["Q8_0", "decode"] == ["ref", "pin"]
    assert rows["Q4_0", "decode"][1] in ("default", "profile")
    assert rows["Q8_0", "prefill layout"] == ["file", "pin"]
    assert rows["Q8_0", "decode layout"][0] in sidecar.LAYOUT_NAMES
    assert "sidecar: " in r.stdout and ": none" in r.stdout
    assert "'nonesuch' is not offered" in r.stdout


def test_show_tells_why_a_sidecar_was_refused(config_dir):
    config_dir.mkdir()
    sidecar.sidecar_path().write_text("not json")
    r = run("--show")
    assert r.exit_code == 0 and "unreadable" in r.stdout


def test_reset_removes_the_sidecar(config_dir):
    sidecar.write(sidecar.new_doc(sidecar.machine()))
    r = run("--reset")
    assert r.exit_code == 0 and "removed" in r.stderr and not sidecar.sidecar_path().exists()
    assert "no sidecar" in run("--reset").stderr


def test_a_file_that_is_not_a_model_is_a_one_line_error(tmp_path):
    bogus = tmp_path / "bogus.gguf"
    bogus.write_text("hello")
    r = run("-m", bogus)
    assert r.exit_code == 1 and r.stderr.startswith("Error: ") and "Traceback" not in r.output

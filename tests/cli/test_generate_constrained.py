"""`generate` with constrained output (--json-schema, --grammar), --stop, a prompt joined with
piped stdin, and the multi-turn --chat session on a terminal, on real models."""
import json
import os
import pty
import subprocess
import sys

import jsonschema
import pytest
from click.testing import CliRunner

from dasllama_cli.main import cli
from tests.assets import gemma3_q4km, or_skip, qwen25_05b_q4km, smollm2_q4_1

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


def run(*args, input=None):
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture(scope="module")
def gemma3():
    return str(or_skip(gemma3_q4km))


def greedy(model, prompt, *flags, n=24):
    r = run("generate", "-m", model, "-n", str(n), "--temp", "0", "-q", "--json", *flags, prompt)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_json_schema_output_validates_and_says_why_it_stopped():
    qwen = str(or_skip(qwen25_05b_q4km))
    rec = greedy(qwen, "Describe a made-up person as JSON.", "--chat", "--json-schema",
                 json.dumps(PERSON), "--seed", "7", n=80)
    jsonschema.validate(json.loads(rec["text"]), PERSON)
    assert rec["stop_reason"] == "eos" and rec["seed"] == 7


def test_a_grammar_that_allows_everything_changes_nothing(gemma3, tmp_path):
    grammar = tmp_path / "all.gbnf"
    grammar.write_text('root ::= [^\\x00]*\n')
    free = greedy(gemma3, "The capital of France is")
    constrained = greedy(gemma3, "The capital of France is", "--grammar", str(grammar))
    assert constrained["tokens"] == free["tokens"] and constrained["text"] == free["text"]
    assert free["stop_reason"] == "length"


def test_a_grammar_picks_among_its_strings(gemma3, tmp_path):
    grammar = tmp_path / "yn.gbnf"
    grammar.write_text('root ::= "yes" | "no"\n')
    rec = greedy(gemma3, "Is the sky blue? Answer:", "--grammar", str(grammar), n=10)
    assert rec["text"] in ("yes", "no") and rec["stop_reason"] == "eos"


def test_stop_cuts_before_the_string_even_across_tokens(gemma3):
    free = greedy(gemma3, "The capital of France is")["text"]
    stop = free[12:19]            # a few characters that need not start or end on a token
    rec = greedy(gemma3, "The capital of France is", "--stop", "zzz-never", "--stop", stop)
    assert rec["text"] == free[:free.index(stop)] and rec["stop_reason"] == "stop"


def test_a_prompt_argument_and_piped_stdin_are_joined(gemma3):
    joined = run("generate", "-m", gemma3, "-n", "1", "--temp", "0", "-q", "--json", "List:",
                 input="pears and apples\n")
    alone = greedy(gemma3, "List:\n\npears and apples\n", n=1)
    assert joined.exit_code == 0, joined.output
    assert json.loads(joined.stdout)["prompt_tokens"] == alone["prompt_tokens"]


@pytest.mark.parametrize("flags, says", [
    (["--grammar", "{bad}"], "cannot read the grammar file"),
    (["--json-schema", "{bad"], "not valid JSON"),
])
def test_bad_constraints_are_one_sentence(gemma3, flags, says):
    r = run("generate", "-m", gemma3, "-q", *flags, "x")
    assert r.exit_code == 1 and says in r.output and "Traceback" not in r.output


def test_invalid_gbnf_is_one_sentence(gemma3, tmp_path):
    grammar = tmp_path / "bad.gbnf"
    grammar.write_text('root ::= "yes" |\n(')
    r = run("generate", "-m", gemma3, "-q", "--grammar", str(grammar), "x")
    assert r.exit_code == 1 and "not valid GBNF" in r.output and "Traceback" not in r.output


def test_chat_on_a_terminal_keeps_the_cache_between_turns():
    """Two turns and /exit typed on a pty: both answer, and the second evaluates only the
    tokens the first turn's cache does not hold (its timing line counts them)."""
    smol = str(or_skip(smollm2_q4_1))
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "dasllama_cli.main", "generate", "-m", smol, "--chat",
                             "-n", "12", "--temp", "0"], stdin=follower, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    os.close(follower)
    os.write(leader, b"Name a colour.\nAnd another one?\n/exit\n")
    out, err = proc.communicate(timeout=600)
    os.close(leader)
    assert proc.returncode == 0, err
    replies = [line for line in out.split("\n") if line.strip()]
    assert len(replies) >= 2, out
    prompts = [int(line.split("prompt ")[1].split(" tok")[0]) for line in err.splitlines() if "tok/s" in line]
    assert len(prompts) == 2, err
    # turn 2's rendered conversation holds turn 1's prompt, reply and its own message: far more
    # than the tokens it evaluated if the cache was kept
    assert prompts[1] < prompts[0], prompts

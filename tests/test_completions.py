"""The completion scripts load in bash, zsh and fish started non-interactively, and complete
subcommands and flags by asking `dasllama` itself (click's _DASLLAMA_COMPLETE protocol)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_shell(shell, script):
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (apt-get install {shell})")
    if not (BIN / "dasllama").exists():
        pytest.skip("the dasllama command is not installed beside this python")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run([shell, *{"bash": ["--norc", "--noprofile"], "zsh": ["-f"], "fish": ["--no-config"]}[shell],
                        "-c", script], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    return r.stdout.split()


def test_completion_option_prints_the_tree_scripts():
    for shell, name in (("bash", "dasllama"), ("zsh", "_dasllama"), ("fish", "dasllama.fish")):
        r = subprocess.run([sys.executable, "-m", "dasllama_cli", "--completion", shell], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0 and r.stdout == (ROOT / "completions" / name).read_text(), shell


BASH = """source completions/dasllama
complete -p dasllama >/dev/null || exit 3
COMP_WORDS=({words}); COMP_CWORD={cword}; COMPREPLY=()
_dasllama_completion dasllama
printf '%s\\n' "${{COMPREPLY[@]}}"
"""


def test_bash_completes_commands_and_flags():
    assert run_shell("bash", BASH.format(words="dasllama gen", cword=1)) == ["generate"]
    flags = run_shell("bash", BASH.format(words="dasllama transcribe --t", cword=2))
    assert {"--task", "--threads"} <= set(flags) and all(f.startswith("--t") for f in flags)


# zsh offers completions only from inside its line editor; here _describe and compadd, the
# functions that hand them to it, print the candidates instead.
ZSH = """autoload -U compinit && compinit -u -D
source completions/_dasllama
[[ $_comps[dasllama] == _dasllama_completion ]] || exit 3
_describe() { print -l -- ${${(P)3}%%:*} }
compadd() { print -l -- ${(P)${@[-1]}} }
words=(WORDS); CURRENT=CURRENT
_dasllama_completion
"""


def test_zsh_completes_commands_and_flags():
    assert run_shell("zsh", ZSH.replace("WORDS", "dasllama sp").replace("=CURRENT", "=2")) == ["speak"]
    flags = run_shell("zsh", ZSH.replace("WORDS", "dasllama generate --top").replace("=CURRENT", "=3"))
    assert set(flags) == {"--top-k", "--top-p"}


def test_fish_completes_commands_and_flags():
    script = "source completions/dasllama.fish; complete -C 'dasllama {}'"
    assert run_shell("fish", script.format("tr"))[0] == "transcribe"
    words = run_shell("fish", script.format("serve --api"))
    assert words[0] == "--api-key"


def test_bash_completes_model_names_after_m():
    from dasllama.core.runtime.catalog import installed
    whisper = sorted(m.name for m in installed() if m.kind == "whisper")
    if not whisper:
        pytest.skip("no Whisper model is installed (pip install -e '.[default-whisper]')")
    names = run_shell("bash", BASH.format(words="dasllama transcribe -m whisper", cword=3))
    assert sorted(names) == [n for n in whisper if n.startswith("whisper")]

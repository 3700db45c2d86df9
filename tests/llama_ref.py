"""Greedy token ids from the llama.cpp reference, exactly as its `llama-completion` sampled them.

llama-completion prints text, not ids, and no log level prints the sampled ids (the line that
did is commented out in 0c1e570). Tokenizing the printed text again is not exact. But with
`--prompt-cache FILE --prompt-cache-all` it writes at exit a session file whose header holds
every token of the run: the prompt as llama.cpp tokenized it, then each sampled id, the last
one and a stopping end-of-generation token included. Reading that header is exact.

One side effect: to save the state before the last prompt token, llama.cpp then decodes the
prompt as N-1 tokens plus 1 instead of one batch of N, which can move logits in the last float
bits. tests/test_gguf_factory.py checks that such a run prints the text of a plain run.

The printed text itself is not reliable: llama.cpp's logger thread writes stdout and is not
flushed at exit (common_log_main is leaked on purpose, llama.cpp issue 22142), so on a busy
machine the last tokens of the text, and the log lines after them, are sometimes missing.
"""
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SESSION_MAGIC = 0x6767736E  # 'ggsn', LLAMA_SESSION_MAGIC
SESSION_VERSION = 10        # LLAMA_SESSION_VERSION of llama.cpp 0c1e570


def completion_cmd(bindir, model_path, prompt, n, *, n_ctx=4096, threads=2, session=None):
    """The llama-completion command of a greedy run; with `session`, one that saves its ids."""
    cmd = [str(Path(bindir) / "llama-completion"), "-m", str(model_path), "-p", prompt,
           "-n", str(n), "--temp", "0", "-s", "1", "-t", str(threads), "-c", str(n_ctx),
           "-no-cnv", "--no-warmup", "--no-context-shift", "--no-display-prompt"]
    if session is not None:
        cmd += ["--verbose-prompt", "--prompt-cache", str(session), "--prompt-cache-all"]
    return cmd


def reference_greedy_ids(bindir, model_path, prompt, n, *, n_ctx=4096, threads=2):
    """(prompt_ids, generated_ids) of llama.cpp's greedy run of `n` tokens after `prompt`.

    prompt_ids are as llama-completion tokenized the prompt (BOS per the vocab, special tokens
    parsed). generated_ids has n ids, or fewer when an end-of-generation token, which is then
    the last id, stopped the run.
    """
    with tempfile.TemporaryDirectory(prefix="dasllama-ref-") as tmp:
        session = Path(tmp) / "session.bin"
        cmd = completion_cmd(bindir, model_path, prompt, n, n_ctx=n_ctx, threads=threads,
                             session=session)
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace")
        if done.returncode != 0 or not session.exists():
            raise RuntimeError(f"llama-completion failed ({done.returncode}):\n{done.stderr[-3000:]}")
        tokens = session_tokens(session)
    # Logged before generation starts, so never lost with the tail of the log (see test).
    found = re.search(r"number of tokens in prompt = (\d+)", done.stderr)
    if found is None:
        raise RuntimeError("llama-completion did not log the prompt size (--verbose-prompt)")
    n_prompt = int(found.group(1))
    if not 0 < len(tokens) - n_prompt <= n:
        raise RuntimeError(f"session holds {len(tokens)} tokens for a prompt of {n_prompt} and "
                           f"n={n}: did the context of {n_ctx} fill up?")
    return tokens[:n_prompt], tokens[n_prompt:]


def session_tokens(path):
    """Token ids in the header of a llama.cpp session file (magic, version, count, ids, state)."""
    head = np.fromfile(path, "<u4", 3)
    if len(head) < 3 or head[0] != SESSION_MAGIC or head[1] != SESSION_VERSION:
        raise RuntimeError(f"{path} is not a llama.cpp v{SESSION_VERSION} session file")
    return np.fromfile(path, "<i4", int(head[2]), offset=12).tolist()

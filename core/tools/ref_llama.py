"""The reference engine, llama.cpp: finding it where users keep it, and running it.

Three ways in, each giving what it can:
- its tools (`llama-bench`, `llama-completion`, `llama-eval-callback`, ...) under --ref-bin DIR,
  on PATH, or in dasllama's cache (built by .ci/build-llama-cpp): speed, greedy ids, layer dumps;
- its shared library through llama-cpp-python's ctypes package `llama_cpp` (pip-installed, or
  kept beside the cached build): greedy ids *and* the logits of every step.
Greedy runs go through a subprocess (this file run as a script), so llama.cpp's threads, logs
and crashes stay out of our process.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import ClassVar
from pathlib import Path

import numpy as np

from ..runtime.cache import cache_dir

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
TOOLS = ("llama-bench", "llama-completion", "llama-tokenize", "llama-eval-callback")
WORKER = Path(__file__).resolve().parent / "ref_llama_worker.py"
SESSION_MAGIC = 0x6767736E     # 'ggsn', LLAMA_SESSION_MAGIC
SESSION_VERSION = 10           # LLAMA_SESSION_VERSION of llama.cpp 0c1e570
# llama.cpp's tools log through a worker thread; twice, on a 2-core host at load 7-8, a tool
# exited 0 without a line it always logs (llama-completion's prompt size, llama-batched-bench's
# record), and passed alone: a run whose log lacks it runs again, up to this many times
LOG_TRIES = 3

HOW_TO_GET = (
    "put llama.cpp's tools (llama-bench, llama-completion, llama-eval-callback) on PATH or pass "
    "--ref-bin DIR, or `pip install llama-cpp-python`; from a dasllama checkout, "
    "`bash .ci/build-llama-cpp` builds the pinned reference (llama-cpp-python "
    f"{LLAMA_CPP_PYTHON_VERSION}, ~10 min) into the cache dir")


class ReferenceError(RuntimeError):
    """The reference engine is missing or failed; the message is one sentence for the user."""


def cached_build():
    """Root of the llama.cpp build .ci/build-llama-cpp keeps in the cache dir (may not exist)."""
    return cache_dir() / "ref" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def built_for_this_cpu(root):
    """The build at root was made (GGML_NATIVE) on a CPU with this one's features: its CPU file,
    written last by .ci/build-llama-cpp, holds cpu.build_key() of the machine that built it."""
    from dasllama.kernels.cpu import build_key
    stamp = Path(root) / "CPU"
    return stamp.exists() and stamp.read_text().strip() == build_key()


@dataclass(frozen=True)
class Reference:
    """Where the reference's parts are; any may be absent (None)."""
    name: ClassVar[str] = "llama.cpp"
    bin_dir: Path = None       # dir with the llama.cpp tools
    lib_dir: Path = None       # libllama.so for llama_cpp (LLAMA_CPP_LIB_PATH); None: its own
    python_dir: Path = None    # dir holding the `llama_cpp` package; None: the environment's
    has_bindings: bool = False  # llama_cpp importable: greedy runs come with logits
    origin: str = ""           # how it was found, for reports
    version: dict = field(default_factory=dict, compare=False)

    def tool(self, name):
        path = self.bin_dir / name if self.bin_dir else None
        if path is None or not path.exists():
            where = f"in {self.bin_dir}" if self.bin_dir else "anywhere"
            raise ReferenceError(f"the reference tool {name} is not {where}: {HOW_TO_GET}.")
        return path

    def has_tool(self, name):
        return self.bin_dir is not None and (self.bin_dir / name).exists()

    def describe(self):
        """What a receipt records about the reference."""
        return {"engine": "llama.cpp", "found": self.origin,
                "bin_dir": str(self.bin_dir) if self.bin_dir else None,
                "bindings": ("llama_cpp" + (f" from {self.python_dir}" if self.python_dir else "")
                             if self.has_bindings else None),
                "lib_dir": str(self.lib_dir) if self.lib_dir else None, **self.version}

    # -- greedy decoding --------------------------------------------------------------------

    def greedy(self, model_path, prompts, n_predict, n_threads, n_ctx=4096):
        """Greedy runs of each prompt: a list of RefRun, one per prompt.

        With the bindings each step has its top logits; with the tools only, ids are exact but
        there are no logits.
        """
        if self.has_bindings:
            return self._greedy_bindings(model_path, prompts, n_predict, n_threads, n_ctx)
        return [self.greedy_by_completion(model_path, p, n_predict, n_threads, n_ctx) for p in prompts]

    def _greedy_bindings(self, model_path, prompts, n_predict, n_threads, n_ctx):
        request = {"model": os.fspath(model_path), "n_predict": n_predict, "n_threads": n_threads,
                   "n_ctx": n_ctx, "prompts": list(prompts)}
        done = self._run_worker("greedy", request)
        if done.returncode != 0:
            raise ReferenceError(f"llama.cpp (through llama_cpp) failed on {model_path}: "
                                 f"{last_line(done.stderr)}")
        reply = json.loads(done.stdout)
        self.version.setdefault("llama_cpp_python", reply["version"])
        return [RefRun(r["prompt_ids"], r["ids"], r["pieces"], r["top"]) for r in reply["runs"]]

    def embeddings(self, model_path, prompts_ids, n_threads=2, n_ctx=512):
        """llama.cpp's mean-pooled embedding (not normalised) of each token-id list: (n, n_embd)."""
        if not self.has_bindings:
            raise ReferenceError(f"embeddings need llama.cpp's Python bindings: {HOW_TO_GET}.")
        request = {"model": os.fspath(model_path), "n_threads": n_threads, "n_ctx": n_ctx,
                   "prompts": [[int(i) for i in ids] for ids in prompts_ids]}
        done = self._run_worker("embed", request)
        if done.returncode != 0:
            raise ReferenceError(f"llama.cpp's embeddings failed on {model_path}: {last_line(done.stderr)}")
        return np.array(json.loads(done.stdout)["embeddings"], np.float32)

    def greedy_by_completion(self, model_path, prompt, n_predict, n_threads, n_ctx):
        """Exact greedy ids from llama-completion, read back from the session file it saves.

        llama-completion prints only text, and re-tokenizing text is not exact. With
        --prompt-cache-all it writes at exit a session whose header lists every token of the
        run: the prompt as it tokenized it, then each sampled id. (To save that state it decodes
        the prompt as N-1 tokens and then 1, which can move logits in their last bits.)
        """
        for _ in range(LOG_TRIES):
            with tempfile.TemporaryDirectory(prefix="dasllama-ref-") as tmp:
                session = Path(tmp) / "session.bin"
                cmd = self.completion_cmd(model_path, prompt, n_predict, n_threads, n_ctx, session)
                done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                      errors="replace")
                if done.returncode != 0 or not session.exists():
                    raise ReferenceError(f"llama-completion failed on {model_path}: {last_line(done.stderr)}")
                tokens = session_tokens(session)
            # logged before generation starts; yet on a host at load 7 a run exited 0 with its
            # session saved and this line missing (LOG_TRIES): the run is deterministic, so it
            # runs again
            found = re.search(r"number of tokens in prompt = (\d+)", done.stderr)
            if found is not None:
                break
        if found is None:
            raise ReferenceError(f"llama-completion did not log the prompt size (--verbose-prompt) in "
                                 f"{LOG_TRIES} runs.")
        n_prompt = int(found.group(1))
        if not 0 < len(tokens) - n_prompt <= n_predict:
            raise ReferenceError(f"llama-completion's session holds {len(tokens)} tokens for a prompt "
                                 f"of {n_prompt} and -n {n_predict}: did the context of {n_ctx} fill up?")
        return RefRun(tokens[:n_prompt], tokens[n_prompt:])

    def completion_cmd(self, model_path, prompt, n_predict, n_threads=2, n_ctx=4096, session=None):
        """The llama-completion command of a greedy run; with `session`, one that saves its ids
        (and logs the prompt's size)."""
        cmd = [str(self.tool("llama-completion")), "-m", os.fspath(model_path), "-p", prompt,
               "-n", str(n_predict), "--temp", "0", "-s", "1", "-t", str(n_threads),
               "-c", str(n_ctx), "-no-cnv", "--no-warmup", "--no-context-shift", "--no-display-prompt"]
        if session is not None:
            cmd += ["--verbose-prompt", "--prompt-cache", str(session), "--prompt-cache-all"]
        return cmd

    # -- layer dumps --------------------------------------------------------------------------

    def eval_callback(self, model_path, prompt, n_threads):
        """(token ids, [TensorDump...] in graph order) of llama-eval-callback on one prompt."""
        n_ctx = max(512, len(prompt.encode()) + 16)   # a token is at least one byte, BOS aside
        cmd = [str(self.tool("llama-eval-callback")), "-m", os.fspath(model_path), "-p", prompt,
               "-t", str(n_threads), "-c", str(n_ctx), "-b", str(n_ctx), "-ub", str(n_ctx)]
        done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace")
        if done.returncode != 0:
            raise ReferenceError(f"llama-eval-callback failed on {model_path}: {last_line(done.stderr)}")
        return parse_input_tokens(done.stderr), parse_tensor_dumps(done.stdout)

    # -- exact tensors -------------------------------------------------------------------------

    def dump_tensors(self, model_path, prompt_ids, step_ids=(), n_threads=2, n_ctx=4096,
                     max_elems=1 << 24):
        """Every F32/F16 node llama.cpp computes, bit for bit, through the bindings: a list with
        one [(name, array (ne3, ne2, ne1, ne0) f32), ...] per decode, in graph order; the prompt
        as one batch, then each of step_ids alone (see core/tools/ref_llama_worker.py)."""
        if not self.has_bindings:
            raise ReferenceError(f"exact tensor dumps need llama.cpp's Python bindings: {HOW_TO_GET}.")
        with tempfile.TemporaryDirectory(prefix="dasllama-dump-") as tmp:
            out = Path(tmp) / "dump.npz"
            request = {"model": os.fspath(model_path), "prompt_ids": [int(i) for i in prompt_ids],
                       "step_ids": [int(i) for i in step_ids], "n_threads": n_threads,
                       "n_ctx": n_ctx, "out": str(out), "max_elems": max_elems}
            done = self._run_worker("tensors", request)
            if done.returncode != 0 or not out.exists():
                raise ReferenceError(f"llama.cpp's tensor dump failed on {model_path}: "
                                     f"{last_line(done.stderr)}")
            with np.load(out) as z:
                order = json.loads(str(z["order"]))
                return [[(name, z[f"{s}/{i}/{name}"]) for i, name in enumerate(names)]
                        for s, names in enumerate(order)]

    def _run_worker(self, task, request):
        """core/tools/ref_llama_worker.py in its own process (llama.cpp's threads and crashes
        stay out of ours), with the bindings this reference names."""
        return subprocess.run([sys.executable, str(WORKER), task], input=json.dumps(request),
                              env=self._bindings_env(), capture_output=True, text=True,
                              errors="replace")

    def _bindings_env(self):
        env = dict(os.environ)
        if self.lib_dir:
            env["LLAMA_CPP_LIB_PATH"] = str(self.lib_dir)
        if self.python_dir:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(self.python_dir), env.get("PYTHONPATH")]))
        return env

    # -- speed ---------------------------------------------------------------------------------

    def bench_cmd(self, model_path, n_prompt, n_gen, n_threads, reps=1):
        return [str(self.tool("llama-bench")), "-m", os.fspath(model_path), "-p", str(n_prompt),
                "-n", str(n_gen), "-r", str(reps), "-t", str(n_threads), "-o", "jsonl"]

    def bench(self, model_path, n_prompt, n_gen, n_threads, reps=1):
        """One llama-bench record (its own field names) for a single pp or tg test."""
        done = subprocess.run(self.bench_cmd(model_path, n_prompt, n_gen, n_threads, reps),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace")
        records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not records:
            raise ReferenceError(f"llama-bench failed on {model_path}: {last_line(done.stderr)}")
        return records[0]

    def batched_bench_cmd(self, model_path, n_prompt, n_gen, n_seq, n_threads):
        """llama-batched-bench: n_seq sequences of their own n_prompt random tokens, then n_gen
        steps of one token each; the context holds all of them (its n_kv_max)."""
        return [str(self.tool("llama-batched-bench")), "-m", os.fspath(model_path),
                "-c", str(n_seq * (n_prompt + n_gen)), "-npp", str(n_prompt), "-ntg", str(n_gen),
                "-npl", str(n_seq), "-t", str(n_threads), "--output-format", "jsonl"]

    def batched_bench(self, model_path, n_prompt, n_gen, n_seq, n_threads):
        """llama-batched-bench's one jsonl record (t_pp, speed_pp, t_tg, speed_tg, ...)."""
        for _ in range(LOG_TRIES):
            done = subprocess.run(self.batched_bench_cmd(model_path, n_prompt, n_gen, n_seq, n_threads),
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace")
            records = [json.loads(line) for line in (done.stdout + done.stderr).splitlines() if line.startswith("{")]
            if records:
                break
        if done.returncode != 0 or not records:
            raise ReferenceError(f"llama-batched-bench failed on {model_path} (exit {done.returncode}): "
                                 f"{last_line(done.stderr)}")
        return records[0]


@dataclass
class RefRun:
    """One greedy run of the reference."""
    prompt_ids: list
    ids: list                  # generated ids; an end-of-generation id, if any, is the last
    pieces: list = None        # bytes of each generated id (latin-1 strings in JSON), or None
    top: list = None           # per step: [[id, logit], ...] best first, or None (tools only)


@dataclass
class TensorDump:
    """What llama-eval-callback printed of one tensor: its first/last n values per dim and sum."""
    name: str
    dtype: str
    op: str
    ne: tuple                  # ggml order: ne[0] varies fastest
    index: np.ndarray = None   # flat indices of the printed values (ne[0] fastest)
    values: np.ndarray = None
    total: float = None        # the printed sum over the whole tensor (None: not printed)

    @property
    def numel(self):
        return int(np.prod(self.ne))


# -- finding it ---------------------------------------------------------------------------------


def find_reference(bin_dir=None):
    """The reference llama.cpp. Its tools: --ref-bin DIR, else on PATH, else in dasllama's cache.
    Its bindings: beside the tools when they are laid out as the cache is (bin/ next to lib/
    and python/), else llama_cpp in the environment. Raises ReferenceError (saying how to get
    one) when there is neither.
    """
    if bin_dir is not None:
        tools = Path(bin_dir).expanduser().resolve()
        if not any((tools / t).exists() for t in TOOLS):
            raise ReferenceError(f"{tools} holds none of {', '.join(TOOLS)}: {HOW_TO_GET}.")
        origin = f"--ref-bin {tools}"
    elif shutil.which("llama-completion") or shutil.which("llama-bench"):
        tools = Path(shutil.which("llama-completion") or shutil.which("llama-bench")).resolve().parent
        origin = "PATH"
    elif any((cached_build() / "bin" / t).exists() for t in TOOLS):
        if not built_for_this_cpu(cached_build()):
            raise ReferenceError(f"the llama.cpp build in {cached_build()} was made for another CPU "
                                 "(its native code may not run here): `bash .ci/build-llama-cpp` "
                                 "rebuilds it for this one")
        tools, origin = cached_build() / "bin", f"dasllama cache ({cached_build()})"
    else:
        tools, origin = None, "llama_cpp in the environment"
    root = tools.parent if tools else None
    if root and (root / "lib" / "libllama.so").exists() and (root / "python" / "llama_cpp").is_dir():
        ref = Reference(tools, root / "lib", root / "python", True, origin)
    else:
        ref = Reference(tools, has_bindings=_bindings_importable(), origin=origin)
    if tools is None and not ref.has_bindings:
        raise ReferenceError(f"no llama.cpp found: {HOW_TO_GET}.")
    return _versioned(ref)


def _bindings_importable():
    import importlib.util
    return importlib.util.find_spec("llama_cpp") is not None


def _versioned(ref):
    """Add version and commit, from the build's own files or the tools' --version line."""
    root = ref.bin_dir.parent if ref.bin_dir else None
    if root and (root / "COMMIT").exists():
        ref.version["commit"] = (root / "COMMIT").read_text().strip()
        ref.version["llama_cpp_python"] = (root / "VERSION").read_text().strip()
    elif ref.bin_dir:
        tool = next(ref.bin_dir / t for t in TOOLS if (ref.bin_dir / t).exists())
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, errors="replace")
        found = re.search(r"version: (\S+) \(build (\d+), commit (\w+)\)", out.stdout + out.stderr)
        if found:
            ref.version.update(version=found.group(1), build_number=int(found.group(2)),
                               commit=found.group(3))
    return ref


# -- reading its output ---------------------------------------------------------------------------


def last_line(text):
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def session_tokens(path):
    """Token ids in the header of a llama.cpp session file (magic, version, count, ids, state)."""
    head = np.fromfile(path, "<u4", 3)
    if len(head) < 3 or head[0] != SESSION_MAGIC or head[1] != SESSION_VERSION:
        raise ReferenceError(f"{path} is not a llama.cpp session file of version {SESSION_VERSION}.")
    return np.fromfile(path, "<i4", int(head[2]), offset=12).tolist()


def parse_input_tokens(log):
    """The prompt ids llama-eval-callback logs: 'number of input tokens = N', then N ids."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        found = re.search(r"number of input tokens = (\d+)", line)
        if found:
            n = int(found.group(1))
            return [int(line.split()[-1]) for line in lines[i + 1:i + 1 + n]]
    raise ReferenceError("llama-eval-callback did not log its input tokens.")


HEADER = re.compile(r"^common_debug_cb_eval:\s*(?P<name>.*?) = \((?P<dtype>\w+)\)\s*(?P<op>[^(]*)\("
                    r".*\) = \{(?P<ne>[0-9, ]+)\}\s*$")
N_PRINTED = 3   # common/debug.cpp prints the first and last 3 entries of each dim


def parse_tensor_dumps(text):
    """TensorDumps from llama-eval-callback's stdout (format of common/debug.cpp).

    Each tensor is a header line, then (for non-quantized ones) nested brackets: per ne[3],
    per ne[2] slab, rows over ne[1], each row the first and last 3 of ne[0], '...' where it
    skips, and the sum over the whole tensor.
    """
    dumps, cur, pos = [], None, None
    for line in text.splitlines():
        head = HEADER.match(line)
        if head:
            ne = tuple(int(x) for x in head.group("ne").split(","))
            cur = TensorDump(head.group("name").strip(), head.group("dtype"), head.group("op").strip(), ne)
            cur.index, cur.values = [], []
            dumps.append(cur)
            pos = [-1, 0, 0]                      # i3, i2, i1
            continue
        if cur is None:
            continue
        s = line.strip()
        depth = (len(line) - len(line.lstrip())) // 4
        if s.startswith("sum ="):
            cur.total = float(s.split("=")[1])
        elif s == "[" and depth == 1:
            pos = [pos[0] + 1, 0, 0]
        elif s == "[" and depth == 2:
            pos[2] = 0
        elif s == "]," and depth == 2:
            pos[1] += 1
        elif s == "...," and depth == 2:
            pos[1] = cur.ne[2] - N_PRINTED
        elif s == "...," and depth == 3:
            pos[2] = cur.ne[1] - N_PRINTED
        elif s.startswith("[") and depth == 3:
            _parse_row(cur, s, pos)
            pos[2] += 1
    for d in dumps:
        d.index = np.asarray(d.index, np.int64)
        d.values = np.asarray(d.values, np.float64)
    return dumps


def _parse_row(dump, row, pos):
    ne0, ne1, ne2 = dump.ne[0], dump.ne[1], dump.ne[2]
    base = ne0 * (pos[2] + ne1 * (pos[1] + ne2 * pos[0]))
    i0 = 0
    for item in row.strip("[],").split(","):
        item = item.strip()
        if not item:
            continue
        if item == "...":
            i0 = ne0 - N_PRINTED
            continue
        dump.index.append(base + i0)
        dump.values.append(float(item))
        i0 += 1

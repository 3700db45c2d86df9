"""The seed engine, dasLLAMA: the system this project is modelled on, as a second peer for `bench`.

Its PyPI wheel (`dasllama==0.6.6`, which must never be installed beside this project: it owns
`site-packages/dasllama/`) is a binary bundle; unpacked, `dasllama/_sdk/dasllama-bench.exe` takes
llama-bench's flags (`-m -p -n -r -t`) and writes its records as JSON (`-o json --json-path F`).
We run it one test and one sample at a time, as llama-bench, so its samples interleave with ours.

On its first run on a file it repacks the weights into a prepared image written beside the file
(`<file>.cpu-<isa>.dlim`, larger than the file) and keeps its tune state in ~/.dasllama/tune. So
that no image lands beside a user's model, it is given the file through a link in dasllama's
cache dir (`seed/models/`), where the image then lands, and it warms up once before sampling.
"""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..runtime.cache import cache_dir
from .ref_llama import ReferenceError, last_line

SEED_VERSION = "0.6.6"
EXE = "dasllama-bench.exe"


def how_to_get():
    """How to put the seed where find_seed looks: one sentence's tail."""
    root = cache_dir() / "seed"
    return (f"unpack the seed engine's wheel without installing it: `pip download --no-deps "
            f"dasllama=={SEED_VERSION} -d D && python -m zipfile -e D/dasllama-{SEED_VERSION}-*.whl {root} && "
            f"chmod +x {root}/dasllama/_sdk/*.exe`, or pass --seed-bench FILE")


def cached_seed():
    """Where how_to_get() unpacks the seed's dasllama-bench (may not exist)."""
    return cache_dir() / "seed" / "dasllama" / "_sdk" / EXE


@dataclass(frozen=True)
class SeedBench:
    """The seed's dasllama-bench executable, run as a bench reference."""
    exe: Path
    origin: str
    name: str = "seed"

    def bench_cmd(self, model_path, n_prompt, n_gen, n_threads, reps=1):
        return [str(self.exe), "-m", os.fspath(linked(model_path)), "-p", str(n_prompt), "-n", str(n_gen),
                "-r", str(reps), "-t", str(n_threads), "-o", "json"]

    def bench(self, model_path, n_prompt, n_gen, n_threads, reps=1):
        """One record for a single pp or tg test, in llama-bench's field names (samples_ns from
        the seed's t/s: it reports rates, not times)."""
        with tempfile.TemporaryDirectory(prefix="dasllama-seed-") as tmp:
            out = Path(tmp) / "records.json"
            cmd = self.bench_cmd(model_path, n_prompt, n_gen, n_threads, reps) + ["--json-path", str(out)]
            done = subprocess.run(cmd, cwd=tmp, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  errors="replace")
            try:
                run = json.loads(out.read_text())[0]["runs"][0]
            except (OSError, ValueError, LookupError):
                run = None
        test = f"pp{n_prompt}" if n_prompt else f"tg{n_gen}"
        if done.returncode != 0 or run is None or test not in run.get("tests", {}):
            raise ReferenceError(f"the seed engine's {EXE} failed on {model_path} "
                                 f"(it loads no Q4_1, for one): {last_line(done.stderr)}")
        ts = run["tests"][test]["tok_s"]
        n = n_prompt + n_gen
        return {"engine": self.name, "build_commit": f"dasllama {SEED_VERSION}",
                "build_number": run.get("dasllama_version", 0), "cpu_info": run.get("hardware", {}).get("cpu"),
                "backends": run.get("backend"), "flavor": run.get("flavor"), "tune_sha": run.get("tune_sha"),
                "n_threads": run.get("threads", n_threads), "n_prompt": n_prompt, "n_gen": n_gen,
                "samples_ns": [int(1e9 * n / ts)] * reps}

    def warm_up(self, model_path, n_threads):
        """Its first run on a file prepares the weight image: do it before the timed samples."""
        self.bench(model_path, 0, 1, n_threads)

    def describe(self):
        return {"engine": "dasllama (seed)", "version": SEED_VERSION, "exe": str(self.exe), "found": self.origin}


def find_seed(path=None):
    """The seed's dasllama-bench: --seed-bench FILE, else $DASLLAMA_SEED_BENCH, else on PATH,
    else unpacked in dasllama's cache. Raises ReferenceError saying how to get it."""
    given = [(path, "--seed-bench"), (os.environ.get("DASLLAMA_SEED_BENCH"), "$DASLLAMA_SEED_BENCH")]
    for candidate, origin in given:
        if candidate:
            exe = Path(candidate).expanduser()
            if not (exe.is_file() and os.access(exe, os.X_OK)):
                raise ReferenceError(f"{exe} (from {origin}) is not an executable {EXE}: {how_to_get()}.")
            return SeedBench(exe.resolve(), origin)
    for candidate, origin in ((shutil.which("dasllama-bench") or shutil.which(EXE), "PATH"),
                              (cached_seed(), "dasllama cache")):
        if candidate and os.access(candidate, os.X_OK):
            return SeedBench(Path(candidate).resolve(), origin)
    raise ReferenceError(f"the seed engine is not here: {how_to_get()}.")


def linked(model_path):
    """A link to model_path in dasllama's cache dir, named by the file and its directory's hash,
    so the seed's prepared image lands there and not beside the user's file."""
    path = Path(model_path).resolve()
    tag = hashlib.sha256(str(path.parent).encode()).hexdigest()[:12]
    link = cache_dir() / "seed" / "models" / f"{tag}-{path.name}"
    if not link.is_symlink() or link.resolve() != path:
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to(path)
    return link

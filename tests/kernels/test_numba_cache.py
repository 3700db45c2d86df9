"""numba's disk cache shared by processes that compile at once (issue 27).

Every matmul variant is a closure of one template function, so all of them share one cache
index. numba's own save lets two processes take the same data file for different closures,
and the index then sends one closure to the other's code; dasllama's kernels package replaces
that save (kernels/numba_cache.py). Here processes compile closures of one function into one
fresh cache at once, each save slowed so that their saves overlap, and a fresh process loads
every closure back from the cache and runs it."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path


N_PROCS, N_VARIANTS = 4, 8

MODULE = """
from numba import njit

def make(k):
    @njit(cache=True)
    def f(x):
        return x * k + k
    return f
"""

# compiles closures k of `make`, with numba's save slowed between its steps
WORKER = """
import random, sys, time
sys.path.insert(0, sys.argv[1])
from dasllama.kernels import numba_cache
from numba.core import caching
if sys.argv[2] == "numba":
    caching.IndexDataCacheFile.save = numba_cache.NUMBA_SAVE
assert numba_cache.installed() == (sys.argv[2] == "dasllama")
for step in ("_save_index", "_save_data"):
    plain = getattr(caching.IndexDataCacheFile, step)
    def slowed(self, *a, plain=plain):
        time.sleep(random.uniform(0, 0.08))
        return plain(self, *a)
    setattr(caching.IndexDataCacheFile, step, slowed)
import variants
for k in map(int, sys.argv[3:]):
    variants.make(k)(1.0)
"""

CHECK = """
import sys
sys.path.insert(0, sys.argv[1])
import dasllama.kernels, variants
for k in range(int(sys.argv[2])):
    f = variants.make(k)
    got = f(1.0)
    if sum(f.stats.cache_hits.values()) and got != 2 * k:
        print(k, got)
"""


def wrong_loads(tmp_path, save):
    """Closures whose cached code is another closure's, after N_PROCS processes saved at once."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "variants.py").write_text(textwrap.dedent(MODULE))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    ks = list(range(N_PROCS * N_VARIANTS))
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(tmp_path), save,
                               *map(str, ks[p::N_PROCS])], env=env) for p in range(N_PROCS)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    out = subprocess.run([sys.executable, "-c", CHECK, str(tmp_path), str(len(ks))], env=env,
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout.split("\n")[:-1]


def test_numba_own_save_hands_a_closure_another_closures_code(tmp_path):
    """The race is real: with numba's save, some closure runs another's code (a few rounds:
    the schedule is the machine's)."""
    assert any(wrong_loads(tmp_path / str(i), "numba") for i in range(3))


def test_dasllama_save_keeps_every_closure_its_own_code(tmp_path):
    assert wrong_loads(tmp_path, "dasllama") == []


# one process's matmul over one format, the kernel's compile numbered from a fixed counter
# value (as in a process that had compiled as many functions before it), or loaded
NAMED = """
import itertools, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from numba.core import bytecode
from dasllama.kernels import matmul as M, numba_cache, quants as Q
from tests.kernels.test_matmul import _case, _ref
if sys.argv[2] == "numba":
    bytecode.FunctionIdentity.from_function = numba_cache.NUMBA_IDENTITY
for name in sys.argv[4:]:
    q = getattr(Q, name)
    w, x = _case(q, n_rows=19, n_tokens=1, seed=3)
    xq, xd, xa, xf = M.act_buffers(1, x.shape[1])
    M.quantizer_for(M.act_kind(q))(x, xq, xd, xa, xf)
    if sys.argv[3] == "numbered":
        bytecode.FunctionIdentity._unique_ids = itertools.count(10**6)
    out = np.zeros((1, 19), np.float32)
    M.matmul_for((q,))(q, w.reshape(-1).view(np.uint8), 19, x.shape[1], xq, xd, xa, xf, 1, out)
    print(name, np.array_equal(out, _ref(q, w, x)[0]))
"""


def wrong_after_loading_both(tmp_path, naming):
    """Formats whose matmul was wrong in a process that loaded the Q4_0 kernel and then the
    Q8_0 dispatch, each compiled by its own process numbered alike."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    root = str(Path(__file__).resolve().parents[2])

    def run(*args):
        out = subprocess.run([sys.executable, "-c", NAMED, root, naming, *args], env=env,
                             capture_output=True, text=True, timeout=600, check=True).stdout
        return [line.split()[0] for line in out.splitlines() if line.endswith("False")]
    assert run("numbered", "Q8_0") == [] and run("numbered", "Q4_0") == []
    return run("loaded", "Q4_0", "Q8_0")


def test_numba_naming_links_one_closure_into_anothers_caller(tmp_path):
    """The collision is real: numba names both kernels make_kernel.<locals>.kernel$1000001,
    and the Q8_0 dispatch, loaded after the Q4_0 kernel, runs the Q4_0 code."""
    assert wrong_after_loading_both(tmp_path, "numba") == ["Q8_0"]


def test_dasllama_naming_keeps_each_closure_its_own_code(tmp_path):
    assert wrong_after_loading_both(tmp_path, "dasllama") == []


def test_the_cache_folder_changes_with_what_the_decode_step_links_in(monkeypatch):
    # numba keys a cached function on its own file only: the decode step (core/llm/forward.py)
    # links in kvcache.place, so an edit there must move the whole cache, as a kernel edit does;
    # a core file that compiles nothing (the chat template code) must not
    from pathlib import Path
    import dasllama.kernels as K
    before = K._source_hash()
    read = Path.read_bytes
    for name, moves in (("kvcache.py", True), ("forward.py", True), ("q4_k.py", True), ("chat.py", False)):
        monkeypatch.setattr(Path, "read_bytes", lambda p, n=name: read(p) + (b"#" if p.name == n else b""))
        assert (K._source_hash() != before) == moves, name
    monkeypatch.setattr(Path, "read_bytes", read)
    assert K._source_hash() == before


def test_ir_types_pickle_the_same_once_ir_is_built():
    """numba keys a closure's cache on its pickled cells, a kernel template's llvmlite types
    among them: building IR with them must not change how they pickle (llvmlite keeps a type's
    name on it once asked), or the key a kernel is looked up under before compiling is not
    the one it is saved under after, and every process compiles it again."""
    from llvmlite import ir
    from numba.core import serialize
    from dasllama.kernels.ir import I64, vec
    lanes = vec(I64, 8)
    before = serialize.dumps((I64, lanes))
    module = ir.Module()
    fn = ir.Function(module, ir.FunctionType(lanes, [lanes]), "double_lanes")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.add(fn.args[0], fn.args[0]))
    str(module)
    assert serialize.dumps((I64, lanes)) == before

"""llama.cpp loads and runs every tiny model gguf_factory writes; reference ids are exact."""
import ast
import re
import subprocess

import pytest
from gguf.constants import MODEL_ARCH, MODEL_TENSORS, TENSOR_NAMES

from dasllama.core.tools import ref_llama
from tests import gguf_factory
from tests.gguf_factory import ARCHES, QTYPES

PROMPT = "Hello world"
N_PREDICT = 8
# Every arch in F32, and every qtype once on llama (untied output) or gemma3 (tied, QK-norm).
RUN_CASES = ([(arch, "F32") for arch in ARCHES]
             + [("llama", qtype) for qtype in ("F16", "Q8_0", "Q4_0", "Q5_1", "Q2_K", "Q4_K", "Q6_K")]
             + [("gemma3", qtype) for qtype in ("BF16", "Q4_1", "Q5_0", "Q3_K", "Q5_K")])


def run(cmd):
    return subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, errors="replace")


def printed_text(cmd, tries=10):
    """Text a llama-completion run printed, from a run whose log reached its end.

    Its logger thread is not flushed at exit, so a run on a busy machine can lose the tail of
    stdout; the closing blank lines tell a whole one.
    """
    for _ in range(tries):
        done = run(cmd)
        assert done.returncode == 0, done.stderr[-3000:]
        if done.stdout.endswith("\n\n"):
            text = re.sub(r"\n\w+: saving final output to session file '[^']*'\n", "", done.stdout)
            return text.removesuffix("\n\n")
    pytest.fail(f"llama-completion lost the end of its output {tries} times in a row")


@pytest.mark.parametrize("arch,qtype", RUN_CASES)
def test_llama_cpp_runs_the_model(llama_bin, tiny_model, tmp_path, arch, qtype):
    path = tiny_model(arch, qtype)
    session = tmp_path / "session.bin"
    done = run(ref_llama.find_reference(llama_bin).completion_cmd(path, PROMPT, N_PREDICT, session=session) + ["-lv", "4"])
    assert done.returncode == 0, done.stderr[-3000:]
    # llama.cpp's own count of tensor types (logged at load, long before the lossy tail):
    # 1-D tensors F32, every matrix in qtype
    types = set(re.findall(r"llama_model_loader: - type +(\w+): +\d+ tensors", done.stderr))
    assert types == {"f32", qtype.lower().replace("_k", "_K")}, types
    if arch in ("gemma2", "gemma3"):  # of the two layers, one slides and one is global
        assert re.search(r"creating +SWA KV cache", done.stderr)
        assert "creating non-SWA KV cache" in done.stderr
    n_prompt = int(re.search(r"number of tokens in prompt = (\d+)", done.stderr).group(1))
    # a random model is unlikely to hit an end-of-generation token within 8
    assert len(ref_llama.session_tokens(session)) == n_prompt + N_PREDICT


# One per vocab kind: SPM, SPM without a space prefix (gemma), qwen2 BPE, phi-3 SPM; and a K-quant.
@pytest.mark.parametrize("arch,qtype", [("llama", "F32"), ("gemma3", "F32"), ("qwen2", "F32"),
                                        ("phi3", "F32"), ("llama", "Q4_K")])
def test_reference_ids_are_llama_cpps(llama_bin, tiny_model, tmp_path, arch, qtype):
    path = tiny_model(arch, qtype)
    greedy_run = ref_llama.find_reference(llama_bin).greedy_by_completion(path, PROMPT, N_PREDICT, 2, 4096)
    prompt_ids, ids = greedy_run.prompt_ids, greedy_run.ids
    tokenized = run([llama_bin / "llama-tokenize", "-m", path, "-p", PROMPT, "--ids", "--log-disable"])
    assert prompt_ids == ast.literal_eval(tokenized.stdout.strip())
    assert len(set(ids)) > 1, "a degenerate model: greedy repeats one token"

    # The session file makes llama.cpp decode the prompt as N-1 + 1 tokens; a plain run must
    # print the same text, and that run's session must hold the same ids.
    session = tmp_path / "session.bin"
    with_session = printed_text(ref_llama.find_reference(llama_bin).completion_cmd(path, PROMPT, N_PREDICT, session=session))
    assert ref_llama.session_tokens(session) == prompt_ids + ids
    assert printed_text(ref_llama.find_reference(llama_bin).completion_cmd(path, PROMPT, N_PREDICT)) == with_session


@pytest.mark.parametrize("arch", ARCHES)
def test_tensor_names_are_the_archs(arch):
    family = gguf_factory.FAMILIES[arch]
    dims = dict(n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, head_dim=32, n_ctx_train=64)
    known = {TENSOR_NAMES[t] for t in MODEL_TENSORS[MODEL_ARCH[arch.upper()]]}
    for name, _ in gguf_factory._tensor_shapes(arch, family, dims, 1000, family.tied_output):
        assert re.sub(r"^blk\.\d+\.", "blk.{bid}.", name.rsplit(".", 1)[0]) in known, name


def test_run_cases_cover_every_qtype():
    assert {qtype for _, qtype in RUN_CASES} == set(QTYPES)


def test_models_are_cached_by_parameters(tiny_model):
    first = tiny_model("llama", n_layer=1)
    mtime = first.stat().st_mtime_ns
    assert tiny_model("llama", n_layer=1) == first and first.stat().st_mtime_ns == mtime
    assert tiny_model("llama", n_layer=1, seed=1) != first


def test_k_quants_need_rows_of_256(tmp_path):
    with pytest.raises(ValueError, match="multiple of 256"):
        gguf_factory.write_model(tmp_path, "llama", "Q4_K", n_embd=128, n_ff=256)

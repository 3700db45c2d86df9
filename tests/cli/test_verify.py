"""`dasllama verify` against the real llama.cpp: parity on real models, and on a copy with one
weight tensor scaled, a divergence that names its position and the perturbed layer."""
import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as QT

from dasllama.formats.gguf import open_gguf
from dasllama_cli.main import cli
from tests import assets

# byte offsets of the f16 scales inside one block: scaling them scales every weight of the block
F16_SCALES = {QT.Q4_0: (0,), QT.Q4_1: (0, 2), QT.Q5_0: (0,), QT.Q5_1: (0, 2), QT.Q8_0: (0,),
              QT.Q4_K: (0, 2), QT.Q5_K: (0, 2), QT.Q6_K: (208,)}


def run(*args):
    return CliRunner().invoke(cli, ["verify", *map(str, args)])


def real(fetch):
    try:
        return fetch()
    except assets.AssetUnavailable as e:
        pytest.skip(str(e))


def scaled_copy(src, dst, tensor, factor):
    """Copy a GGUF with every weight of one tensor multiplied by `factor`."""
    info = open_gguf(src).tensors[tensor]
    shutil.copyfile(src, dst)
    data = np.memmap(dst, np.uint8, "r+", offset=info.offset, shape=(info.nbytes,))
    qtype = QT(info.qtype)
    if qtype in (QT.F32, QT.F16):
        values = data.view(np.float32 if qtype == QT.F32 else np.float16)
        values *= factor
    else:
        blocks = data.reshape(-1, GGML_QUANT_SIZES[qtype][1])
        for off in F16_SCALES[qtype]:
            scale = blocks[:, off:off + 2].copy().view(np.float16) * np.float16(factor)
            blocks[:, off:off + 2] = scale.view(np.uint8)
    data.flush()
    return dst


def test_setup_errors_exit_2_with_a_sentence(tmp_path):
    r = run("--ref-bin", tmp_path, "-n", 4)
    assert r.exit_code == 2, r.output
    assert "llama-completion" in r.stderr and "Traceback" not in r.output
    assert run("-n", 0).exit_code == 2


@pytest.mark.slow
@pytest.mark.parametrize("fetch, prompts", [
    (assets.smollm2_q4_1, ("The capital of France is", "Once upon a time")),
    (assets.gemma3_q4km, ("Once upon a time", "def fibonacci(n):")),
], ids=["smollm2", "gemma3"])
def test_parity_on_real_models(llama_bin, fetch, prompts):
    model = real(fetch)
    args = ["-m", model, "-n", 16, "-t", 2, "--ref-bin", llama_bin]
    for p in prompts:
        args += ["-p", p]
    r = run(*args, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    report = json.loads(r.stdout)
    assert report["reference"]["commit"] == "0c1e570"
    for res in report["prompts"]:
        assert res["prompt_ids"] == res["ref_prompt_ids"]
        if res["verdict"] == "parity":
            assert res["ids"] == res["ref_ids"] and len(res["ids"]) == 16
        else:   # a near-tie: a flip both engines call within 0.1 logits, after agreeing
            assert res["verdict"] == "near-tie" and res["divergence"]["near_tie"], res
            assert res["ids"][:res["n_matched"]] == res["ref_ids"][:res["n_matched"]]


@pytest.mark.slow
def test_tools_alone_give_exact_ids_without_logits(llama_bin, tmp_path):
    model = real(assets.smollm2_q4_1)
    tools = tools_only(llama_bin, tmp_path)
    r = run("-m", model, "-p", "The capital of France is", "-n", 8, "-t", 2, "--ref-bin", tools, "--json")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "logit gaps are unavailable" in r.stderr
    (res,) = json.loads(r.stdout)["prompts"]
    assert res["verdict"] == "parity" and res["ids"] == res["ref_ids"] and res["min_gap"] is None


def tools_only(llama_bin, tmp_path):
    """The reference's tools without the cached build's lib/ and python/ (no bindings)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in llama_bin.iterdir():
        (tools / tool.name).symlink_to(tool)
    return tools


@pytest.mark.slow
def test_perturbed_layer_is_found(llama_bin, tmp_path):
    """With the bindings, the first tensor differing in any bit (Vcur-3 of the prompt batch,
    everything before it bit-identical); with the tools alone, the printed values' drift."""
    original = real(assets.smollm2_q4_1)
    perturbed = scaled_copy(original, tmp_path / "smollm2-v3.gguf", "blk.3.attn_v.weight", 3.0)
    common = ["-m", perturbed, "--ref-model", original, "-p", "The capital of France is", "-n", 16,
              "-t", 2, "--drift-bound", 0.1]
    r = run(*common, "--ref-bin", llama_bin, "--json")
    assert r.exit_code == 1, r.stdout + r.stderr
    (res,) = json.loads(r.stdout)["prompts"]
    div = res["divergence"]
    assert res["verdict"] == "divergence" and not div["near_tie"]
    assert div["position"] == len(res["prompt_ids"]) + div["step"]
    assert res["ids"][:div["step"]] == res["ref_ids"][:div["step"]]
    assert res["ids"][div["step"]] != res["ref_ids"][div["step"]]
    first = res["exact"]["first"]
    assert (first["step"], first["name"]) == (0, "Vcur-3")
    before = res["exact"]["rows"][:res["exact"]["rows"].index(first)]
    assert before and all(row["n_diff"] == 0 for row in before)

    text = run(*common, "--ref-bin", llama_bin)
    assert text.exit_code == 1
    assert f"position {div['position']}" in text.stdout and "in the prompt batch at Vcur-3" in text.stdout
    assert json.dumps(div["ours_text"]) in text.stdout and json.dumps(div["ref_text"]) in text.stdout

    r = run(*common, "--ref-bin", tools_only(llama_bin, tmp_path), "--json")
    (res,) = json.loads(r.stdout)["prompts"]
    layer, name = res["drift"]["first"][:2]
    assert (layer, name) == (3, "Vcur")
    assert all(err < 0.1 for il, *_, err in res["drift"]["rows"] if il < 3)

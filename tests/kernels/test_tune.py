"""The tuner's guards and the sidecar's rules: the correctness gate rejects a wrong variant,
races rank and drop, a duel does not crown a tie, a sidecar from elsewhere is refused with its
reason, precedence is pin > sidecar > profile > default, and the model's greedy tokens are the
same bits whichever variants run. Races here use tiny budgets: they test the logic, not speed.
"""
import json
import os
import subprocess
import sys
import time

import numba
import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType

from dasllama.formats.gguf import open_gguf
from dasllama.kernels import cpu, sidecar, rowgroups
from dasllama.kernels import matmul as M
from dasllama.kernels import tune as T
from dasllama.kernels.quants import F32, Q4_0, Q4_K, Q6_K, Q8_0
from dasllama.kernels.sidecar import PHASES

from .blocks import random_weights


@pytest.fixture(autouse=True)
def config_dir(tmp_path, monkeypatch):
    """A sidecar of its own per test, and no pin from the environment."""
    monkeypatch.setenv(sidecar.CONFIG_ENV, str(tmp_path / "config"))
    monkeypatch.delenv(sidecar.PIN_ENV, raising=False)
    return tmp_path / "config"


def _offered(qtype, phase):
    """M's variants of `qtype` that `phase` offers, the default first."""
    return [(n, p) for n, p in M.VARIANTS[qtype] if n in sidecar.offered(M.VARIANTS[qtype], phase)]


def _with_variant(name, kernel):
    """A build function that knows one more variant, `name`, besides M's."""
    def build(qtype, variant):
        return kernel if variant == name else M.build_kernel(qtype, variant)
    return build


def _nudged_ref(ulps_of_bound=None, every_output=False):
    """matmul_ref with its first output (or every one) moved: by one ulp, or by a multiple of
    the float gate's bound."""
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        M.matmul_ref(kernel.qtype, w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        target = out[:n_tokens, :n_rows] if every_output else out[:1, :1]
        if ulps_of_bound is None:
            target[...] = np.nextafter(target, np.float32(np.inf))
        else:
            wabs = np.abs(M.dequantize(kernel.qtype, w, n_rows, n_cols)).astype(np.float64)
            bound = (n_cols / 64 + T.FLOAT_ULPS) * 2.0 ** -24 * (np.abs(xf[:n_tokens]) @ wabs.T)
            target += (ulps_of_bound * bound[:target.shape[0], :target.shape[1]]).astype(np.float32)
    return kernel


# --- the correctness gate -----------------------------------------------------------------------

def test_gate_rejects_a_variant_one_ulp_off():
    wrong = _nudged_ref()
    wrong.qtype = Q8_0
    w = random_weights(Q8_0, 40, 256, seed=1)
    default = M.VARIANTS[Q8_0][0][0]
    verdicts = T.gate(Q8_0, [default, "one_ulp_off"], w, 256, _with_variant("one_ulp_off", wrong))
    assert verdicts[default] is None
    assert "1 of" in verdicts["one_ulp_off"] and "bit-exact" in verdicts["one_ulp_off"]


def test_float_gate_takes_a_fold_order_difference_but_not_more():
    w = random_weights(F32, 40, 320, seed=2)
    inside, outside = _nudged_ref(0.5, every_output=True), _nudged_ref(2.0)
    inside.qtype = outside.qtype = F32
    build = _with_variant("outside", outside)
    verdicts = T.gate(F32, ["inside", "outside"], w, 320,
                      lambda q, n: inside if n == "inside" else build(q, n))
    assert verdicts["inside"] is None
    assert "float bound" in verdicts["outside"]


def test_tune_never_races_a_rejected_variant(tmp_path):
    wrong = _nudged_ref()
    wrong.qtype = Q8_0
    variants = {Q8_0: _offered(Q8_0, "decode")[:1] + [("one_ulp_off", {})]}
    shape = T.Shape(Q8_0, "decode", 64, 256, 3, random_weights(Q8_0, 64, 256, seed=3))
    report = T.tune([shape], budget_s=0.05, force=True, variants=variants,
                    build=_with_variant("one_ulp_off", wrong))
    assert set(report.rejected) == {("Q8_0", "one_ulp_off")}
    # (with VNNI the copy takes these weights' -128 quants, and a decode layout row joins)
    assert [o.winner for o in report.outcomes if o.phase == "decode"] == [variants[Q8_0][0][0]]
    doc = json.loads(sidecar.sidecar_path().read_text())
    assert "one_ulp_off" not in doc["shapes"][0]["ms"]


def _nudged_copy(layout):
    """The copy's kernel with its first output one ulp off."""
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        rowgroups.KERNELS[layout](w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out)
        out[0, 0] = np.nextafter(out[0, 0], np.float32(np.inf))
    return kernel


@pytest.mark.parametrize("qtype, phase", [(Q4_0, "decode"), (Q4_0, "prefill"), (Q6_K, "prefill")])
def test_the_gate_passes_the_copy_and_rejects_a_copy_kernel_one_ulp_off(qtype, phase):
    shape = T.Shape(qtype, phase, 64, 256, 1, random_weights(qtype, 64, 256, seed=4))
    assert shape.copies and shape.copies[0] == "x8"
    for copy in shape.copies:       # x16 too where this CPU is offered it
        assert T.gate_copy(shape, copy) is None
        why = T.gate_copy(shape, copy, kernel=_nudged_copy(shape.copy_layout(copy)))
        assert "1 of" in why and "bit-exact" in why


def test_the_output_matrix_and_k_quant_decode_race_only_the_copies_that_fold_one_token():
    w = random_weights(Q4_0, 64, 256, seed=4)
    assert T.Shape(Q4_0, "decode", 64, 256, 1, w, copied=False).copies == []
    assert T.Shape(Q4_0, "decode", 64, 256, 1, w).copy_layout("x8") == rowgroups.COPIES[Q4_0, "x8"][0]
    # Q6_K's x8/x16 copies spell only the tiled fold of batches; its p16 one folds one token
    assert T.Shape(Q6_K, "decode", 64, 256, 1, random_weights(Q6_K, 64, 256)).copies == ["p16"] * rowgroups.HAS_X16


def test_tune_races_the_copy_and_keeps_a_layout_per_type_and_phase():
    shapes = [T.Shape(Q4_0, phase, 64, 256, 2, random_weights(Q4_0, 64, 256, seed=6)) for phase in PHASES]
    report = T.tune(shapes, budget_s=0.1, force=True, variants={Q4_0: _offered(Q4_0, "decode")[:1] + _offered(Q4_0, "prefill")[:1]})
    layouts = {o.phase: o for o in report.outcomes if o.phase.endswith(" layout")}
    assert set(layouts) == {"decode layout", "prefill layout"}
    assert all(o.winner in sidecar.LAYOUT_NAMES and o.chosen_s > 0 for o in layouts.values())
    doc = json.loads(sidecar.sidecar_path().read_text())
    assert {e["key"][1]: "x8" in e["ms"] for e in doc["shapes"]} == {"decode": True, "prefill": True}
    assert all(("x16" in e["ms"]) == rowgroups.HAS_X16 for e in doc["shapes"])
    in_force, _ = sidecar.resolve_layouts(rowgroups.LAYOUT_DEFAULTS, rowgroups.layout_choices, pin_text="")
    for phase in PHASES:
        assert doc["winners"]["Q4_0"][f"{phase} layout"] == layouts[f"{phase} layout"].winner
        assert in_force[Q4_0, phase] == sidecar.Choice(layouts[f"{phase} layout"].winner, "sidecar")
    # where decode took a copy, its prefetch distances raced (each gated bit-exact first) and
    # the sidecar keeps the winner, which the copies then take
    ahead = [o for o in report.outcomes if o.phase == sidecar.PREFETCH_KEY]
    decode_copy = layouts["decode layout"].winner
    assert len(ahead) == (decode_copy != "file") and not report.rejected
    for o in ahead:
        assert o.winner in map(str, rowgroups.PREFETCH_CHOICES) and o.chosen_s > 0 and o.default_s > 0
        assert doc["winners"]["Q4_0"][sidecar.PREFETCH_KEY] == o.winner
        assert rowgroups.prefetch_in_force(Q4_0, decode_copy) == int(o.winner)


# --- races and duels ----------------------------------------------------------------------------

def _sleeper(seconds):
    def kernel(*args):
        time.sleep(seconds)
    return kernel


def test_race_ranks_by_median_and_drops_the_far_behind():
    kernels = {"slow": _sleeper(0.004), "fast": _sleeper(0.001), "hopeless": _sleeper(0.03)}
    medians = T.race(kernels, (), budget_s=0.1)
    assert min(medians, key=medians.get) == "fast"
    assert medians["fast"] < medians["slow"] < medians["hopeless"]


def test_a_duel_between_equals_is_not_won():
    shape = T.Shape(Q8_0, "decode", 16, 256, 1, random_weights(Q8_0, 16, 256, seed=4))
    same = _sleeper(0.0005)
    won, p_value, _ = T.duel(Q8_0, "a", "b", [shape], 0.05, lambda q, n: same)
    assert not won and p_value > T.DUEL_P


def test_a_duel_against_a_slower_incumbent_is_won():
    shape = T.Shape(Q8_0, "decode", 16, 256, 1, random_weights(Q8_0, 16, 256, seed=4))
    kernels = {"fast": _sleeper(0.0005), "slow": _sleeper(0.002)}
    won, p_value, ratio = T.duel(Q8_0, "fast", "slow", [shape], 0.05, lambda q, n: kernels[n])
    assert won and p_value < T.DUEL_P and ratio < 0.5


# --- shapes of a model --------------------------------------------------------------------------

def test_model_shapes_count_tensors_and_race_the_output_at_decode_only(tiny_model):
    shapes = T.model_shapes(open_gguf(tiny_model("llama", "Q8_0")))
    keys = {s.key: s.count for s in shapes}
    assert keys[("Q8_0", "decode", 32000, 128)] == 1          # output.weight; token_embd is a lookup
    assert ("Q8_0", "prefill", 32000, 128) not in keys
    assert keys[("Q8_0", "prefill", 256, 128)] == 4           # ffn_gate and ffn_up in 2 layers
    assert keys[("Q8_0", "decode", 128, 256)] == 2            # ffn_down
    assert all(s.weights.size == s.n_rows * s.n_cols // 32 * 34 for s in shapes)


def test_a_second_tune_with_nothing_changed_races_nothing():
    shape = T.Shape(Q8_0, "decode", 64, 256, 1, random_weights(Q8_0, 64, 256, seed=5))
    variants = {Q8_0: _offered(Q8_0, "decode")[:2]}
    first = T.tune([shape], budget_s=0.05, force=True, variants=variants)
    t0 = time.perf_counter()
    second = T.tune([shape], budget_s=30, variants=variants)
    assert second.skipped and not first.skipped and time.perf_counter() - t0 < 5
    assert [o.winner for o in second.outcomes] == [o.winner for o in first.outcomes]


def test_a_busy_machine_is_refused_with_the_measurement(monkeypatch):
    monkeypatch.setattr(T, "NOISE_LIMIT", -1.0)
    shape = T.Shape(Q8_0, "decode", 64, 256, 1, random_weights(Q8_0, 64, 256, seed=5))
    with pytest.raises(T.Noisy, match=r"too busy to rank kernels: a fixed workload's timings spread .*load average"):
        T.tune([shape], budget_s=0.05, variants={Q8_0: _offered(Q8_0, "decode")[:1]})
    assert not sidecar.sidecar_path().exists()


# --- the sidecar --------------------------------------------------------------------------------

def _valid_doc():
    doc = sidecar.new_doc(sidecar.machine())
    doc["winners"] = {"Q8_0": {"decode": "b"}}
    return doc


@pytest.mark.parametrize("change, reason", [
    (lambda d: d["provenance"].update(cpu_model="Some Other CPU"), "other machine"),
    (lambda d: d["provenance"].update(cpu_features=["sse2"]), "other machine"),
    (lambda d: d["provenance"].update(numba="0.1.0"), "other version"),
    (lambda d: d["provenance"].update(dasllama="99.0"), "other version"),
    (lambda d: d["provenance"].update(kernels="0" * 16), "kernels changed"),
    (lambda d: d.update(format=99), "other format"),
    (lambda d: d.pop("winners"), "unreadable"),
])
def test_a_sidecar_from_elsewhere_is_refused_with_its_reason(change, reason):
    doc = _valid_doc()
    change(doc)
    sidecar.write(doc)
    got, refusal = sidecar.read()
    assert got is None and refusal.reason == reason


def test_an_unreadable_sidecar_is_refused_and_the_engine_falls_back(config_dir, monkeypatch):
    monkeypatch.setattr(sidecar, "PROFILES", config_dir / "no-profiles")
    config_dir.mkdir()
    sidecar.sidecar_path().write_text('{"format": 1, "winn')
    doc, refusal = sidecar.read()
    assert doc is None and refusal.reason == "unreadable"
    variants = {Q8_0: [("a", {}), ("b", {})]}
    with pytest.warns(sidecar.SidecarWarning, match="ignored: it is not JSON"):
        chosen = sidecar.in_force(variants)
    assert chosen == {(Q8_0, "decode"): "a", (Q8_0, "prefill"): "a"}


def test_a_valid_sidecar_is_read_back():
    sidecar.write(_valid_doc())
    doc, refusal = sidecar.read()
    assert refusal is None and doc["winners"] == {"Q8_0": {"decode": "b"}}


# --- precedence ---------------------------------------------------------------------------------

VARIANTS = {Q8_0: [(n, {}) for n in ("a", "b", "c", "d")], Q4_K: [(n, {}) for n in ("k1", "k2")]}
AVX2 = frozenset({"avx2", "fma", "f16c"})


@pytest.fixture
def profile(tmp_path, monkeypatch):
    monkeypatch.setattr(sidecar, "PROFILES", tmp_path / "profiles")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "x86-avx2.json").write_text(json.dumps(
        {"winners": {"Q8_0": {"decode": "d", "prefill": "d"}, "Q4_K": {"prefill": "k2"}}}))


def test_precedence_is_pin_then_sidecar_then_profile_then_default(profile):
    doc = {"winners": {"Q8_0": {"decode": "c", "prefill": "c"}}}
    choices, notes = sidecar.resolve(VARIANTS, pin_text="Q8_0:decode=b", doc=doc, features=AVX2)
    assert choices[Q8_0, "decode"] == sidecar.Choice("b", "pin")
    assert choices[Q8_0, "prefill"] == sidecar.Choice("c", "sidecar")
    assert choices[Q4_K, "prefill"] == sidecar.Choice("k2", "profile x86-avx2")
    assert choices[Q4_K, "decode"] == sidecar.Choice("k1", "default")
    assert notes == []


def test_a_cpu_without_a_profile_of_its_class_falls_to_the_generic_one(profile, tmp_path):
    choices, _ = sidecar.resolve(VARIANTS, pin_text="", doc={}, features=frozenset({"sse2"}))
    assert {c.source for c in choices.values()} == {"default"}
    (tmp_path / "profiles" / "generic.json").write_text(json.dumps({"winners": {"Q4_K": {"decode": "k2"}}}))
    choices, _ = sidecar.resolve(VARIANTS, pin_text="", doc={}, features=frozenset({"sse2"}))
    assert choices[Q4_K, "decode"] == sidecar.Choice("k2", "profile generic")


def test_a_variant_not_offered_here_is_skipped_with_a_note(profile):
    doc = {"winners": {"Q8_0": {"decode": "gone"}}}
    choices, notes = sidecar.resolve(VARIANTS, pin_text="", doc=doc, features=AVX2)
    assert choices[Q8_0, "decode"] == sidecar.Choice("d", "profile x86-avx2")
    assert len(notes) == 1 and "'gone' is not offered" in notes[0]


def test_shape_winners_come_with_the_layer_that_chose_the_phase(profile):
    doc = {"winners": {"Q8_0": {"prefill": "c", "prefill 64x256": "b", "decode 64x256": "b"}}}
    choices, _ = sidecar.resolve(VARIANTS, pin_text="Q8_0:decode=a", doc=doc, features=AVX2)
    assert choices[Q8_0, "prefill", 64, 256] == sidecar.Choice("b", "sidecar")
    assert (Q8_0, "decode", 64, 256) not in choices     # the pin decides decode, for every shape


def test_layouts_follow_the_same_precedence_and_name_what_they_skip(profile, tmp_path):
    (tmp_path / "profiles" / "x86-avx2.json").write_text(json.dumps(
        {"winners": {"Q4_0": {"decode layout": "file"}, "Q4_K": {"prefill layout": "sideways"}}}))
    doc = {"winners": {"Q8_0": {"prefill layout": "file", "decode layout": "file"}}}
    defaults = {**rowgroups.LAYOUT_DEFAULTS, (Q4_K, "prefill"): "x8"}
    choices, notes = sidecar.resolve_layouts(defaults, lambda q, p: ("file", "x8"),
                                             pin_text="Q8_0:decode=x8,Q4_0:prefill=x16", doc=doc, features=AVX2)
    assert choices[Q8_0, "decode"] == sidecar.Choice("x8", "pin")
    assert choices[Q8_0, "prefill"] == sidecar.Choice("file", "sidecar")
    assert choices[Q4_0, "decode"] == sidecar.Choice("file", "profile x86-avx2")
    assert choices[Q4_K, "prefill"] == sidecar.Choice("x8", "default")
    # a layout this CPU is not offered (x16 without AVX-512) is skipped, as a layout unknown
    assert choices[Q4_0, "prefill"].source != "pin"
    assert len(notes) == 2
    assert any("'x16' is not one of file, x8 (the layouts offered here)" in n for n in notes)
    assert any("'sideways' is not one of file, x8" in n for n in notes)
    # a layout pin is no kernel variant: the variants' resolution does not see it
    kernel_choices, kernel_notes = sidecar.resolve(VARIANTS, pin_text="Q8_0:decode=x8", doc={}, features=AVX2)
    assert kernel_choices[Q8_0, "decode"].source != "pin" and kernel_notes == []


def test_a_prefetch_follows_the_precedence_and_an_unoffered_one_is_named(profile, tmp_path):
    (tmp_path / "profiles" / "x86-avx2.json").write_text(json.dumps(
        {"winners": {"Q4_K": {sidecar.PREFETCH_KEY: "1152"}, "Q6_K": {sidecar.PREFETCH_KEY: "100"}}}))
    doc = {"winners": {"Q8_0": {sidecar.PREFETCH_KEY: "0"}}}
    chosen, notes = sidecar.resolve_prefetch((Q8_0, Q4_K, Q6_K, Q4_0), rowgroups.PREFETCH_CHOICES, pin_text="",
                                             doc=doc, features=AVX2)
    assert chosen == {Q8_0: sidecar.Choice("0", "sidecar"), Q4_K: sidecar.Choice("1152", "profile x86-avx2")}
    assert len(notes) == 1 and "Q6_K decode prefetch '100' is not one of" in notes[0]
    # and a format without a choice keeps its copy's own default
    assert rowgroups.prefetch_in_force(Q4_0, "x8", {}) == 0
    assert rowgroups.prefetch_in_force(Q8_0, "x16", {}) == rowgroups.PREFETCH_DEFAULTS[rowgroups.Q8_0_X16]


def test_a_layout_choice_compiles_nothing(monkeypatch, profile):
    monkeypatch.setattr(cpu, "probe", lambda: cpu.CpuInfo("test", frozenset({"sse2"}), "x86_64"))
    monkeypatch.setenv(sidecar.PIN_ENV, "Q8_0=file,Q4_K:prefill=file")
    assert sidecar.selection_tag() == ""


@pytest.mark.parametrize("text, problem", [
    ("Q9_0=a", "no weight type 'Q9_0'"),
    ("Q8_0", "is not TYPE=VARIANT"),
    ("Q8_0:sometimes=a", "is not TYPE=VARIANT"),
])
def test_a_malformed_pin_is_named(text, problem):
    pins, problems = sidecar.parse_pin(text)
    assert pins == {} and problem in problems[0]


def test_the_cache_tag_follows_the_choices(monkeypatch, profile):
    monkeypatch.setattr(cpu, "probe", lambda: cpu.CpuInfo("test", frozenset({"sse2"}), "x86_64"))
    assert sidecar.selection_tag() == ""
    monkeypatch.setenv(sidecar.PIN_ENV, "Q8_0=b")
    tag_b = sidecar.selection_tag()
    monkeypatch.setenv(sidecar.PIN_ENV, "Q8_0=c")
    assert tag_b and sidecar.selection_tag() not in ("", tag_b)


def test_the_cache_tag_follows_a_prefetch_choice(monkeypatch, profile):
    """A prefetch distance is compiled into the tiles the decode step inlines: another one
    must name another cache folder."""
    monkeypatch.setattr(cpu, "probe", lambda: cpu.CpuInfo("test", frozenset({"sse2"}), "x86_64"))
    tags = []
    for ahead in ("1152", "6912"):
        doc = sidecar.new_doc(sidecar.machine())
        doc["winners"] = {"Q8_0": {sidecar.PREFETCH_KEY: ahead}}
        sidecar.write(doc)
        tags.append(sidecar.selection_tag())
    assert "" not in tags and tags[0] != tags[1]


def test_the_shipped_profiles_for_this_cpu_name_variants_it_offers():
    assert (sidecar.PROFILES / "generic.json").exists() and (sidecar.PROFILES / "x86-avx2.json").exists()
    for cpu_class in cpu.classes_of(cpu.probe().features):
        path = sidecar.PROFILES / f"{cpu_class}.json"
        if path.exists():
            for tname, by_key in json.loads(path.read_text())["winners"].items():
                listed = M.VARIANTS[int(GGMLQuantizationType[tname])]
                layouts = {k: v for k, v in by_key.items() if k.endswith(" layout")}
                for key, variant in by_key.items():     # "decode", "prefill 640x2048", ...
                    if key not in layouts:
                        assert variant in sidecar.offered(listed, key.split()[0]), (path.name, tname, key)
                assert set(layouts.values()) <= set(sidecar.LAYOUT_NAMES), (path.name, tname)


# --- the dispatcher by phase and shape ----------------------------------------------------------

def _marker(value):
    @numba.njit
    def kernel(w, n_rows, n_cols, xq, xd, xa, xf, n_tokens, out):
        out[0, 0] = value
    return kernel


def test_shape_kernel_runs_the_variant_chosen_for_the_shape():
    kernels = {n: _marker(float(i)) for i, n in enumerate(("pre", "odd", "dec"))}
    chosen = {(Q8_0, "decode"): "dec", (Q8_0, "prefill"): "pre", (Q8_0, "prefill", 64, 256): "odd"}
    kernel = M.shape_kernel(Q8_0, "prefill", chosen, lambda q, n: kernels[n])
    bufs = M.act_buffers(4, 256)
    out = np.full((4, 64), -1.0, np.float32)
    w = np.zeros(1, np.uint8)
    for n_rows, n_cols, expect in ((32, 256, 0.0), (64, 256, 1.0), (64, 512, 0.0)):
        kernel(w, n_rows, n_cols, *bufs, 4, out)
        assert out[0, 0] == expect, (n_rows, n_cols)
    assert M.shape_kernel(Q8_0, "decode", chosen, lambda q, n: kernels[n]) is kernels["dec"]


# --- greedy tokens, whichever variants run ------------------------------------------------------

_GREEDY = """
import hashlib, sys
import numpy as np
from dasllama.core import load
from dasllama.kernels.matmul import ACTIVE
from dasllama.kernels.quants import Q8_0
model = load(sys.argv[1], n_ctx=64)
ids, h = [1, 15, 29, 7, 3, 11], hashlib.sha256()
logits = model.eval(ids)
for _ in range(6):
    h.update(logits.tobytes())
    ids.append(int(np.argmax(logits)))
    logits = model.eval(ids[-1:])
print(",".join(map(str, ids)), h.hexdigest(), ACTIVE[Q8_0, "decode"], ACTIVE[Q8_0, "prefill"],
      int((model.ctab[..., 1] >= 0).sum()))
"""


def _greedy(path, env):
    env = {k: v for k, v in env.items() if k != "NUMBA_CACHE_DIR"}   # each choice has its own cache
    run = subprocess.run([sys.executable, "-c", _GREEDY, str(path)], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.split()


def test_greedy_tokens_and_logits_are_the_same_bits_with_other_winners(tiny_model):
    path = tiny_model("llama", "Q8_0")
    in_force = _greedy(path, os.environ)
    chosen = {c.variant for c in sidecar.resolve({Q8_0: M.VARIANTS[Q8_0]})[0].values()}
    others = [n for n in sidecar.offered(M.VARIANTS[Q8_0], "prefill") if n not in chosen]
    simd_other = next(n for n in others if n.startswith("simd"))
    # the plain loops and another tile, on the file's blocks where the defaults take the copy
    pin = f"Q8_0:decode=ref,Q8_0:prefill={simd_other},Q8_0=file"
    pinned = _greedy(path, {**os.environ, sidecar.PIN_ENV: pin})
    assert pinned[2:] == ["ref", simd_other, "0"] and in_force[2:4] != pinned[2:4] and in_force[4] != "0"
    assert pinned[:2] == in_force[:2]


def test_the_kernels_hash_covers_every_format_module(monkeypatch):
    # a tuned sidecar is refused once a format's module changes, as for any kernel file
    from pathlib import Path
    here = Path(sidecar.__file__).parent
    files = {f.relative_to(here).as_posix() for f in sidecar.kernel_sources()}
    assert {"formats/q4_k.py", "formats/common.py", "formats/__init__.py", "matmul.py"} <= files
    assert "tune.py" not in files
    before = sidecar.kernel_sources_hash()
    read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: read(p) + (b"#" if p.name == "q4_k.py" else b""))
    assert sidecar.kernel_sources_hash() != before


def test_llvm_has_follows_the_features_numba_compiles_for(monkeypatch):
    # NUMBA_CPU_FEATURES makes numba compile for another CPU: the IR kernels must then choose
    # their instructions by it, not by the host (an AVX2 build on an AVX-512 machine)
    monkeypatch.setenv("NUMBA_CPU_FEATURES", "+avx2,+fma,-avx512f,-avx512vnni,+sse4.2")
    assert cpu.llvm_has("avx2", "fma") and not cpu.llvm_has("avx2", "avx512f")
    assert not cpu.llvm_has("avx512vnni") and not cpu.llvm_has("amx-int8")
    monkeypatch.delenv("NUMBA_CPU_FEATURES")
    import llvmlite.binding as llvm
    host = llvm.get_host_cpu_features()
    assert cpu.llvm_has("avx512f") == bool(host.get("avx512f", False))

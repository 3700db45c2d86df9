"""Which matmul variant runs, and why: the tuning sidecar and the precedence over it.

For each weight format and phase (decode: one token; prefill: many) the variant in force is
the first of
    a pin       DASLLAMA_KERNELS="Q8_0:decode=simd_r2t1_vnni,Q4_K:prefill=simd_r4t4"
    the sidecar tune.json in DASLLAMA_CONFIG or platformdirs.user_config_dir("dasllama"),
                written by `dasllama tune` on this machine
    a profile   kernels/profiles/<cpu class>.json, shipped, for the most specific class of
                this CPU that has one (x86-avx512-amx > x86-avx512-vnni > x86-avx512 > x86-avx2 > generic)
    the default the first variant the format offers for the phase (matmul.VARIANTS: a
                prefill variant is named after its rows x tokens tile, a decode one after its
                rows x 1 tile; "ref", the plain loops, serves both)
A sidecar from another machine, another version, or one that cannot be read is refused as a
whole with a named reason; an entry naming a variant that this build does not offer is skipped.
The same precedence chooses each format's layout for a phase (resolve_layouts): "x8",
"x16" or "p16", a copy model.weight_copies makes at load (kernels/rowgroups.py), or "file", the
blocks as they lie in the file; a pin names it as a variant ("Q8_0:decode=file"), a sidecar or
profile under the key "<phase> layout". A layout this CPU is not offered (x16 without AVX-512)
is skipped with a note, as an unknown variant is. Layouts are data the compiled forward reads:
changing one compiles at most the step's fused decode dispatch anew (model.fused_formats).
Likewise how far ahead a format's copies prefetch their weights in decode (resolve_prefetch:
key "decode prefetch", bytes as text, one of rowgroups.PREFETCH_CHOICES); that one is code,
so it names the cache folder as a variant does (selection_tag).
Plain Python (no numba): the kernel package resolves this before it compiles anything; the
per-shape dispatch these choices ask for is built in matmul.py.
"""
import functools
import hashlib
import importlib.metadata
import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import platformdirs
from gguf.constants import GGMLQuantizationType

from . import cpu

FORMAT = 1
PHASES = ("decode", "prefill")
PIN_ENV = "DASLLAMA_KERNELS"
CONFIG_ENV = "DASLLAMA_CONFIG"
PROFILES = Path(__file__).parent / "profiles"
# a format's weights for a phase: one of its copies (kernels/rowgroups.py), or the file's blocks
LAYOUT_NAMES = ("x8", "x16", "p16", "file")
# files of the tuner itself: editing them does not change how fast a kernel runs
_NOT_KERNELS = {"tune.py", "sidecar.py", "cpu.py", "bench_matmul.py"}


class SidecarWarning(UserWarning):
    """A sidecar or pin that was not used, and why."""


@dataclass(frozen=True)
class Refusal:
    reason: str    # "unreadable", "other format", "other machine", "other version", "kernels changed"
    detail: str

    def __str__(self):
        return f"{self.reason}: {self.detail}"


@dataclass(frozen=True)
class Choice:
    variant: str
    source: str    # "pin", "sidecar", "profile <class>", "default"


def config_dir():
    return Path(os.environ.get(CONFIG_ENV) or platformdirs.user_config_dir("dasllama"))


def sidecar_path():
    return config_dir() / "tune.json"


def type_name(qtype):
    return GGMLQuantizationType(qtype).name


# --- provenance -------------------------------------------------------------------------------

def kernel_sources():
    """The files that define matmul kernels: kernels/*.py but the tuner's own, and the weight
    formats' modules (kernels/formats/)."""
    here = Path(__file__).parent
    return [f for f in sorted(here.glob("*.py")) + sorted((here / "formats").glob("*.py"))
            if f.name not in _NOT_KERNELS or f.parent.name == "formats"]


def kernel_sources_hash():
    """Hash of the files that define kernels: a change there can change every timing."""
    h = hashlib.sha256()
    for f in kernel_sources():
        h.update(f.relative_to(Path(__file__).parent).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine():
    """What a timing depends on and a sidecar must match: the CPU and the software."""
    return dict(_machine())


@functools.lru_cache(maxsize=1)
def _machine():
    info = cpu.probe()
    return {"cpu_model": info.model, "cpu_features": sorted(info.features), "cpu_class": info.cpu_class,
            "dasllama": _version("dasllama-toolkit"), "numba": _version("numba"),
            "llvmlite": _version("llvmlite"), "kernels": kernel_sources_hash()}


# --- read, validate, write --------------------------------------------------------------------

def read(path=None, here=None):
    """(doc, None) for a sidecar valid on this machine; (None, Refusal) for one that is not;
    (None, None) when there is none. `here` is machine() (probed when not given)."""
    path = Path(path or sidecar_path())
    if not path.exists():
        return None, None
    if path.is_dir():
        return None, Refusal("unreadable", "it is a directory, not a file")
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        return None, Refusal("unreadable", f"it cannot be read ({e.strerror or e})")
    except (UnicodeDecodeError, ValueError) as e:
        return None, Refusal("unreadable", f"it is not JSON ({e})")
    refusal = validate(doc, here or machine())
    return (None, refusal) if refusal else (doc, None)


def validate(doc, here):
    """The Refusal that keeps `doc` from being used on the machine `here`, or None."""
    if not isinstance(doc, dict) or not isinstance(doc.get("provenance"), dict) \
            or not isinstance(doc.get("winners"), dict):
        return Refusal("unreadable", "it lacks the provenance or winners of a tune sidecar")
    if doc.get("format") != FORMAT:
        return Refusal("other format", f"format {doc.get('format')!r}, this dasllama reads {FORMAT}")
    prov = doc["provenance"]
    for key, what in (("cpu_model", "CPU"), ("cpu_features", "CPU features")):
        if prov.get(key) != here[key]:
            return Refusal("other machine", f"tuned on {what} {_show(prov.get(key))}, this is {_show(here[key])}")
    for key in ("dasllama", "numba", "llvmlite"):
        if prov.get(key) != here[key]:
            return Refusal("other version", f"tuned with {key} {prov.get(key)}, this is {here[key]}")
    if prov.get("kernels") != here["kernels"]:
        return Refusal("kernels changed", f"the kernel sources changed since tuning "
                                          f"({prov.get('kernels')} -> {here['kernels']})")
    return None


def _show(value):
    return " ".join(value) if isinstance(value, list) else repr(value)


def write(doc, path=None):
    """Write atomically: a reader never sees half a sidecar."""
    path = Path(path or sidecar_path())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def new_doc(here, **provenance):
    return {"format": FORMAT, "provenance": {**here, **provenance,
                                             "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
            "models": [], "shapes": [], "winners": {}}


# --- precedence -------------------------------------------------------------------------------

def parse_pin(text):
    """"Q8_0=ref,Q4_K:prefill=simd_r4t4" -> ({(type name, phase): variant}, [problems])."""
    pins, problems = {}, []
    for item in filter(None, (s.strip() for s in (text or "").split(","))):
        key, sep, variant = item.partition("=")
        name, _, phase = key.strip().partition(":")
        name = name.strip().upper()
        if name not in GGMLQuantizationType.__members__:
            problems.append(f"{item!r}: no weight type {name!r}")
            continue
        phases = [phase.strip()] if phase else list(PHASES)
        if not sep or not variant.strip() or any(p not in PHASES for p in phases):
            problems.append(f"{item!r} is not TYPE=VARIANT or TYPE:{'|'.join(PHASES)}=VARIANT")
            continue
        variant = variant.strip()
        for p in phases:
            pins[name, layout_key(p) if variant in LAYOUT_NAMES else p] = variant
    return pins, problems


def shipped_profile(features):
    """(class, winners) of the most specific shipped profile for these CPU features."""
    for name in cpu.classes_of(features):
        path = PROFILES / f"{name}.json"
        if path.exists():
            return name, json.loads(path.read_text()).get("winners", {})
    return None, {}


def shape_key(phase, n_rows, n_cols):
    """The winners-table key of one shape: "prefill 2048x640" (rows x cols)."""
    return f"{phase} {n_rows}x{n_cols}"


def layout_key(phase):
    """The winners-table key of a phase's layout: "decode layout"."""
    return f"{phase} layout"


PREFETCH_KEY = "decode prefetch"    # the winners-table key of a format's copies' prefetch


def _layers(pin_text, doc, features):
    """[(source, {(type name, key): variant})] in precedence order, and the notes so far."""
    notes = []
    if pin_text is None:
        pin_text = os.environ.get(PIN_ENV, "")
    pins, problems = parse_pin(pin_text)
    notes += [f"{PIN_ENV}: {p}" for p in problems]
    if doc is None:
        doc, refusal = read()
        if refusal:
            notes.append(f"tune sidecar {sidecar_path()} ignored: {refusal.detail}")
    if features is None:
        features = cpu.probe().features
    profile_class, profile = shipped_profile(features)
    return [("pin", pins), ("sidecar", _flat((doc or {}).get("winners"))),
            (f"profile {profile_class}", _flat(profile))], notes


def resolve(variants, pin_text=None, doc=None, features=None):
    """{(qtype, phase): Choice} for every format in `variants` (qtype -> [(name, params)], each
    offered for the phases its params name),
    plus {(qtype, phase, n_rows, n_cols): Choice} for the shapes whose own winner differs
    (taken from the layer that chose the phase), and notes on what was skipped.
    pin_text, doc and features default to DASLLAMA_KERNELS, this machine's valid sidecar and
    this CPU."""
    layers, notes = _layers(pin_text, doc, features)
    choices = {}
    for qtype, listed in variants.items():
        tname = type_name(qtype)
        for phase in PHASES:
            names = offered(listed, phase)
            if not names:
                continue
            choices[qtype, phase] = Choice(names[0], "default")
            picked = _pick(layers, (tname, phase), names, notes, f"{tname} {phase} variant",
                           f"is not offered here (have {', '.join(sorted(names))})")
            if picked:
                source, table = picked
                choices[qtype, phase] = Choice(table[tname, phase], source)
                for (t, key), variant in table.items():
                    shape = _parse_shape(key)
                    if t == tname and shape and shape[0] == phase and variant in names:
                        choices[(qtype, *shape)] = Choice(variant, source)
    return choices, notes


def offered(listed, phase):
    """The names of the variants in `listed` ([(name, params)]) offered for `phase`, the
    default first (a variant whose params name no `phases` serves both)."""
    return [n for n, params in listed if phase in params.get("phases", PHASES)]


def _pick(layers, key, accepted, notes, what, why_not):
    """(source, table) of the first layer whose table names an accepted value at `key`; each
    layer before it that names another is noted ("<source>: <what> 'v' <why_not>")."""
    for source, table in layers:
        wanted = table.get(key)
        if wanted is None:
            continue
        if wanted in accepted:
            return source, table
        notes.append(f"{source}: {what} {wanted!r} {why_not}")
    return None


def resolve_layouts(offered, choices_of=None, pin_text=None, doc=None, features=None):
    """({(qtype, phase): Choice} of the layout, notes) for each (qtype, phase) of `offered`
    ({(qtype, phase): default layout}: the pairs whose copy folds as the file's kernels do),
    by the same precedence as the variants; choices_of(qtype, phase): the layouts this CPU
    is offered for the pair (default: all of LAYOUT_NAMES)."""
    layers, notes = _layers(pin_text, doc, features)
    choices = {}
    for (qtype, phase), default in offered.items():
        key = (type_name(qtype), layout_key(phase))
        names = choices_of(qtype, phase) if choices_of else LAYOUT_NAMES
        picked = _pick(layers, key, names, notes, f"{key[0]} {phase} layout",
                       f"is not one of {', '.join(names)} (the layouts offered here)")
        choices[qtype, phase] = Choice(picked[1][key], picked[0]) if picked else Choice(default, "default")
    return choices, notes


def layouts_in_force(offered, choices_of=None):
    """{(qtype, phase): layout} for model.weight_copies; what was skipped is warned about, and
    a broken config falls back to the defaults (as in_force)."""
    try:
        choices, notes = resolve_layouts(offered, choices_of)
    except Exception as e:  # as in_force: a broken config never stops the engine from starting
        warnings.warn(f"layout choice fell back to the defaults: {type(e).__name__}: {e}", SidecarWarning,
                      stacklevel=2)
        return dict(offered)
    for note in notes:
        warnings.warn(note, SidecarWarning, stacklevel=2)
    return {key: c.variant for key, c in choices.items()}


def resolve_prefetch(qtypes, choices, pin_text=None, doc=None, features=None):
    """({qtype: Choice} of the bytes ahead (as text) each of `qtypes`' copies prefetch in
    decode, for the formats a pin, sidecar or profile chooses it for (the others keep their
    layouts' defaults: rowgroups.PREFETCH_DEFAULTS), notes); choices: the distances offered."""
    layers, notes = _layers(pin_text, doc, features)
    accepted = [str(c) for c in choices]
    chosen = {}
    for qtype in qtypes:
        key = (type_name(qtype), PREFETCH_KEY)
        picked = _pick(layers, key, accepted, notes, f"{key[0]} decode prefetch",
                       f"is not one of {', '.join(accepted)} (bytes)")
        if picked:
            chosen[qtype] = Choice(picked[1][key], picked[0])
    return chosen, notes


def prefetch_in_force(qtypes, choices):
    """{qtype: bytes} for rowgroups' copies, as resolve_prefetch chooses; what was skipped is
    warned about, and a broken config leaves every default (as in_force)."""
    try:
        chosen, notes = resolve_prefetch(qtypes, choices)
    except Exception as e:  # as in_force: a broken config never stops the engine from starting
        warnings.warn(f"prefetch choice fell back to the defaults: {type(e).__name__}: {e}", SidecarWarning,
                      stacklevel=2)
        return {}
    for note in notes:
        warnings.warn(note, SidecarWarning, stacklevel=2)
    return {qtype: int(c.variant) for qtype, c in chosen.items()}


def _parse_shape(key):
    """"prefill 2048x640" -> ("prefill", 2048, 640); a phase alone -> None."""
    phase, _, dims = key.partition(" ")
    rows, _, cols = dims.partition("x")
    if phase in PHASES and rows.isdigit() and cols.isdigit():
        return phase, int(rows), int(cols)
    return None


def _flat(winners):
    """{"Q8_0": {"decode": v, ...}} -> {("Q8_0", "decode"): v}; malformed entries are dropped."""
    if not isinstance(winners, dict):
        return {}
    return {(t, k): v for t, by_key in winners.items() if isinstance(by_key, dict)
            for k, v in by_key.items() if isinstance(v, str)}


def in_force(variants):
    """{(qtype, phase) or (qtype, phase, n_rows, n_cols): variant} to build the dispatcher
    with. What was skipped is warned about (SidecarWarning, once per process), and the engine
    goes on with the next layer of precedence."""
    try:
        choices, notes = resolve(variants)
    except Exception as e:  # a broken config must never stop the engine from starting
        choices = {(q, p): Choice(offered(v, p)[0], "default") for q, v in variants.items() for p in PHASES
                   if offered(v, p)}
        notes = [f"kernel choice fell back to the defaults: {type(e).__name__}: {e}"]
    for note in notes:
        warnings.warn(note, SidecarWarning, stacklevel=2)
    return {key: c.variant for key, c in choices.items()}


def selection_tag():
    """"" when no pin, sidecar or profile chooses anything, else a short hash of what they
    choose: part of numba's cache dir name, because the compiled decode step links in the
    variants it was built with and numba would otherwise load it stale. Computed without the
    variant lists (before numba is imported): a choice of the default variant counts too."""
    try:
        layers, _ = _layers(None, None, None)
    except Exception:   # in_force falls back to the defaults then, and warns
        return ""
    chosen = {}
    for _, table in layers:
        for key, v in table.items():    # a prefetch distance: the first layer's, as resolve_prefetch
            if key[1] == PREFETCH_KEY:
                chosen.setdefault(key, v)
        table = {(t, k): v for (t, k), v in table.items() if k in PHASES or _parse_shape(k)}  # not layouts: data
        phases = {(t, k) for t, k in table if k in PHASES} - {(t, k.split()[0]) for t, k in chosen if k != PREFETCH_KEY}
        chosen.update({(t, k): v for (t, k), v in table.items() if (t, k.split()[0]) in phases})
    if not chosen:
        return ""
    text = ",".join(f"{t}:{k}={v}" for (t, k), v in sorted(chosen.items()))
    return "-" + hashlib.sha256(text.encode()).hexdigest()[:10]

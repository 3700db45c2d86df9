"""The sdist and the wheel carry what packagers and users need: the licence, the man page and
the shell completions (installed where man and the shells look), the docs and the tests; and
twine finds their metadata valid. The in-tree Homebrew formula and Scoop manifest
(packaging/) match the pinned dependencies, install a working dasllama, and validate."""
import hashlib
import importlib.util
import json
import tomllib
import shutil
import subprocess
import sys
import tarfile
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests import assets, gguf_factory, whisper_assets

pytest.importorskip("build", reason="python -m build is in the test extra")

ROOT = Path(__file__).resolve().parents[1]
CACHE = assets.CACHE


def _load_resources_script():
    """packaging/resources.py is a script, not an installed module: load it from its file."""
    spec = importlib.util.spec_from_file_location("packaging_resources", ROOT / "packaging" / "resources.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


resources = _load_resources_script()


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    r = subprocess.run([sys.executable, "-m", "build", "-o", str(out), str(ROOT)], capture_output=True, text=True,
                       timeout=900)
    if r.returncode and "Could not find a version" in r.stdout + r.stderr:
        pytest.skip("the package registry is out of reach: build cannot fetch setuptools")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return out


def test_sdist_has_licence_man_completions_docs_and_tests(dist):
    sdist, = dist.glob("*.tar.gz")
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    for want in ("LICENSE", "man/dasllama.1", "man/dasllama-generate.1", "completions/dasllama",
                 "completions/_dasllama", "completions/dasllama.fish", "docs/ARCHITECTURE.md", "tests/test_packaging.py"):
        assert want in names, want


def test_wheel_installs_man_page_and_completions(dist):
    wheel, = dist.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    data = {n.split(".data/data/", 1)[1] for n in names if ".data/data/" in n}
    pages = {f"share/man/man1/{p.name}" for p in (ROOT / "man").glob("*.1")}
    assert "share/man/man1/dasllama-transcribe.1" in pages
    assert data == pages | {"share/bash-completion/completions/dasllama", "share/zsh/site-functions/_dasllama",
                            "share/fish/vendor_completions.d/dasllama.fish"}
    assert any(n.endswith("licenses/LICENSE") for n in names)
    assert not any(n.startswith(("core/", "kernels/", "formats/")) for n in names), "a generic top-level name"


def test_twine_check_passes(dist):
    pytest.importorskip("twine")
    r = subprocess.run([sys.executable, "-m", "twine", "check", *map(str, dist.iterdir())], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_regular_dasllama_package_elsewhere_on_the_path_is_one_sentence(dist, tmp_path):
    """PyPI's `dasllama` (another product) is a regular package; on another sys.path entry than
    our namespace portion it hides dasllama.core: the command says so instead of a traceback."""
    wheel, = dist.glob("*.whl")
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    zipfile.ZipFile(wheel).extractall(ours)
    (theirs / "dasllama").mkdir(parents=True)
    (theirs / "dasllama" / "__init__.py").write_text('"""a regular package named dasllama"""\n')
    launch = (f"import sys, runpy; sys.path[:0] = [{str(ours)!r}, {str(theirs)!r}]; "
              "runpy.run_module('dasllama_cli', run_name='__main__')")
    # -S: no site-packages, so this checkout's editable install does not map dasllama.* by name
    r = subprocess.run([sys.executable, "-S", "-c", launch], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "hidden by another package named dasllama" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    both = tmp_path / "one-site-packages"          # the same two in one directory: they merge
    zipfile.ZipFile(wheel).extractall(both)
    shutil.copy(theirs / "dasllama" / "__init__.py", both / "dasllama" / "__init__.py")
    r = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path[:0] = [{str(both)!r}]; import importlib.util; "
                        "assert importlib.util.find_spec('dasllama.core'); import dasllama_cli"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _direct_requirements():
    """dasllama-toolkit's own runtime requirements, as pyproject.toml states them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(line) for line in project["dependencies"]]


def test_formula_resources_meet_the_projects_requirements():
    # The formula pins exact versions; a release on PyPI after it was generated does not make
    # it wrong. What must hold: each requirement has a resource (or a formula it comes from)
    # at a version the requirement allows. The venv test below checks the whole closure.
    have = {name: resources.sdist_version(url) for name, url, _ in resources.formula_resources()}
    assert {"numba", "llvmlite", "click", "gguf"} <= have.keys() and not have.keys() & resources.FROM_FORMULAE
    for req in _direct_requirements():
        name = canonicalize_name(req.name)
        if name in resources.FROM_FORMULAE or (req.marker and not req.marker.evaluate({"extra": ""})):
            continue
        assert name in have, f"{req} has no resource"
        assert req.specifier.contains(have[name], prereleases=True), f"resource {name} {have[name]} does not meet {req}"


def test_drift_names_a_missing_an_extra_and_a_moved_resource():
    formula = resources.FORMULA.read_text().replace("llvmlite-0.50.0.tar.gz", "llvmlite-0.49.0.tar.gz")
    pins = {name: resources.sdist_version(url) for name, url, _ in resources.formula_resources()}
    found = [r for r in resources.formula_resources(formula) if r[0] != "click"]
    found.append(("left-pad", "https://files.pythonhosted.org/packages/aa/left_pad-1.0.tar.gz", "0" * 64))
    problems = resources.drift(pins, found)
    assert len(problems) == 3, problems
    assert any(p.startswith("click==") for p in problems) and "resource left-pad is not a dependency" in problems
    assert any("llvmlite is 0.49.0" in p for p in problems)


def test_closure_follows_requirements_and_markers():
    dists = {"dasllama-toolkit": ("0.1.0", ["numba>=0.60", "tbb; platform_machine=='x86_64'",
                                            "pywin32; sys_platform=='win32'", "pytest; extra=='test'"]),
             "numba": ("0.61.0", ["llvmlite<0.45,>=0.44", "numpy>=1.24"]),
             "llvmlite": ("0.44.0", []), "numpy": ("2.2.0", []), "tbb": ("2022.1", ["tcmlib"])}
    assert resources.closure(dists=dists) == {"numba": "0.61.0", "llvmlite": "0.44.0"}


def _fetch_cached(url):
    """The file `url` names, from the cache dir or downloaded into it (None when out of reach)."""
    path = CACHE / "packaging-sdists" / url.rsplit("/", 1)[1]
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                partial = path.with_suffix(".part")
                partial.write_bytes(response.read())
                partial.replace(path)
        except OSError:
            return None
    return path


def test_each_resource_sha256_is_that_of_the_file_its_url_names():
    checked = 0
    for name, url, sha256 in resources.formula_resources():
        path = _fetch_cached(url)
        if path is None:
            continue
        assert hashlib.sha256(path.read_bytes()).hexdigest() == sha256, name
        checked += 1
    if not checked:
        pytest.skip("files.pythonhosted.org is out of reach and no sdist is cached")


def _resource_venv():
    """A venv built the formula's way: `pip install --no-deps` of exactly the resources (as
    wheels of the same versions, so it takes a minute, not an hour of compiling) plus the
    versions of what the formula takes from other formulae; cached by the list's hash."""
    pins = [f"{name}=={resources.sdist_version(url)}" for name, url, _ in resources.formula_resources()]
    pins += [f"{name}=={metadata.version(name)}" for name in ("numpy", "certifi")]
    key = hashlib.sha256("\n".join(sorted(pins)).encode()).hexdigest()[:16]
    venv = CACHE / f"packaging-venv-{key}"
    python = venv / "bin" / "python"
    if not (venv / "complete").exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--only-binary", ":all:", *pins],
                           capture_output=True, text=True, timeout=600)
        if r.returncode and "No matching distribution" in r.stderr:
            pytest.skip("the package registry is out of reach: " + r.stderr.strip().splitlines()[-1])
        assert r.returncode == 0, r.stderr[-2000:]
        (venv / "complete").touch()
    return python


@pytest.mark.slow
def test_a_venv_of_only_the_formula_resources_runs_generate(dist, tmp_path):
    python = _resource_venv()
    wheel, = dist.glob("*.whl")
    r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    # pip check: every requirement of every installed distribution is met, so no resource is
    # missing; but tbb, which the formula leaves out on purpose (it gives numba OpenMP instead)
    r = subprocess.run([str(python), "-m", "pip", "check"], capture_output=True, text=True, timeout=120)
    unmet = [line for line in r.stdout.splitlines() if line.strip()]
    assert unmet in ([], ["dasllama-toolkit 0.1.0 requires tbb, which is not installed."]), r.stdout + r.stderr
    # the closure as the venv's own metadata gives it: exactly the resources, none missing or extra
    r = subprocess.run([str(python), "-c", "import json, importlib.metadata as m; print(json.dumps("
                        "{d.metadata['Name']: [d.version, d.requires or []] for d in m.distributions()}))"],
                       capture_output=True, text=True, timeout=120, check=True)
    dists = {canonicalize_name(n): tuple(v) for n, v in json.loads(r.stdout).items()}
    assert resources.drift(resources.closure(dists=dists), resources.formula_resources()) == []
    dasllama = python.parent / "dasllama"
    version = subprocess.run([str(dasllama), "--version"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert version.returncode == 0 and "threading layer omp" in version.stdout, version.stdout + version.stderr
    model = gguf_factory.write_model(tmp_path, "llama", "Q8_0")
    # A new install path starts from a cold numba cache: its first run compiles the kernels
    # (minutes on 2 shared cores); later runs of the cached venv are warm.
    r = subprocess.run([str(dasllama), "generate", "-m", str(model), "-p", "hello", "-n", "4", "-t", "2",
                        "--temp", "0"], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip(), "generate printed no text"


@pytest.mark.slow
def test_the_venvs_wheel_runs_real_models_as_the_tree_does(dist, tmp_path, tiny_en_dir):
    """The formula's venv (outside the tree, only the pinned resources) with the wheel in it
    speaks the same words as this checkout on real models: the default Gemma 3 270M, greedy,
    and Whisper tiny.en on a real clip. A wheel that left out a module, a kernel's source or a
    data file the engine reads at run time fails here, not in a user's first run."""
    from dasllama.core.llm.defaults import ModelNotFound, default_model_path
    try:
        gemma = default_model_path()
    except ModelNotFound as e:
        pytest.skip(str(e))
    clip = assets.or_skip(whisper_assets.clip, "beckett.wav")
    python = _resource_venv()
    wheel, = dist.glob("*.whl")
    r = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    jobs = {"generate": ["generate", "-m", str(gemma), "-n", "24", "-t", "2", "--temp", "0",
                         "The capital of France is"],
            "transcribe": ["transcribe", "-m", str(tiny_en_dir), "-t", "2", str(clip)]}
    for job, args in jobs.items():
        # the venv's first run of each compiles its kernels (the omp layer: a cache of its own)
        ours = subprocess.run([str(python.parent / "dasllama"), *args], capture_output=True, text=True,
                              timeout=1200, cwd=tmp_path)
        assert ours.returncode == 0, f"{job} from the wheel: {ours.stderr[-2000:]}"
        tree = subprocess.run([sys.executable, "-m", "dasllama_cli.main", *args], capture_output=True, text=True,
                              timeout=1200, cwd=tmp_path)
        assert tree.returncode == 0, f"{job} from the tree: {tree.stderr[-2000:]}"
        assert ours.stdout.strip() and ours.stdout == tree.stdout, (job, ours.stdout, tree.stdout)


def test_scoop_manifest_validates_against_scoops_schema():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((ROOT / "packaging" / "scoop" / "schema.json").read_text())
    manifest = json.loads((ROOT / "packaging" / "scoop" / "dasllama.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(manifest, schema, cls=jsonschema.Draft7Validator)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**manifest, "checkver": {"jsonpath": 7}}, schema, cls=jsonschema.Draft7Validator)


def test_scoop_manifest_and_formula_name_this_version():
    version = metadata.version("dasllama-toolkit")
    manifest = json.loads((ROOT / "packaging" / "scoop" / "dasllama.json").read_text())
    assert manifest["version"] == version and f"-{version}-py3-none-any.whl" in manifest["url"]
    assert f"dasllama_toolkit-{version}.tar.gz" in resources.FORMULA.read_text()

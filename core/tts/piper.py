"""A Piper voice: `voice.onnx` (a VITS network) with its `voice.onnx.json` config beside it.
The config's phoneme id map turns phonemes into the ids the network reads, framed as piper's
phoneme_ids.py frames them: BOS, then each phoneme's ids followed by the pad id, then EOS."""
import json
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from threadpoolctl import ThreadpoolController

from dasllama.formats import onnx as onnx_file

from .side_by_side import side_by_side
from .vits import Vits, VitsError

BOS, EOS, PAD = "^", "$", "_"
_BLAS = ThreadpoolController()


class VoiceError(ValueError):
    """The voice files are missing, of the wrong kind, or asked for what they do not have."""


@dataclass(frozen=True)
class VoiceConfig:
    sample_rate: int
    espeak_voice: str                  # espeak-ng voice name, "en-us"
    phoneme_type: str                  # "espeak" (or "text": code points are the phonemes)
    phoneme_id_map: dict               # phoneme -> [id, ...]
    num_speakers: int = 1
    speaker_id_map: dict = field(default_factory=dict)   # speaker name -> id
    noise_scale: float = 0.667         # the voice's defaults (piper's when the config is silent)
    length_scale: float = 1.0
    noise_w: float = 0.8
    hop_length: int = 256

    @classmethod
    def from_json(cls, path):
        try:
            c = json.loads(Path(path).read_text(encoding="utf-8"))
            inference = c.get("inference", {})
            return cls(sample_rate=int(c["audio"]["sample_rate"]),
                       espeak_voice=c.get("espeak", {}).get("voice", "en-us"),
                       phoneme_type=c.get("phoneme_type", "espeak"),
                       phoneme_id_map=c["phoneme_id_map"],
                       num_speakers=int(c.get("num_speakers", 1)),
                       speaker_id_map=c.get("speaker_id_map") or {},
                       noise_scale=float(inference.get("noise_scale", 0.667)),
                       length_scale=float(inference.get("length_scale", 1.0)),
                       noise_w=float(inference.get("noise_w", 0.8)),
                       hop_length=int(c.get("hop_length", 256)))
        except (ValueError, KeyError, TypeError) as e:
            raise VoiceError(f"{path} is not a Piper voice config (bad or missing {e}).") from None


class PiperVoice:
    """A loaded voice: its config and its network."""

    def __init__(self, path, config, net, n_threads=None):
        self.path, self.config, self.net = Path(path), config, net
        # the decoder's time chunks run on this pool, one BLAS thread each: OpenBLAS's own
        # threads split small products badly and spin between them
        self.n_threads = max(1, int(n_threads or os.cpu_count() or 1))
        self.pool = ThreadPoolExecutor(self.n_threads) if self.n_threads > 1 else None

    @property
    def sample_rate(self):
        return self.config.sample_rate

    def phoneme_ids(self, phonemes):
        """Phonemes -> ids; phonemes the voice does not know are dropped (as piper does)."""
        id_map = self.config.phoneme_id_map
        ids = list(id_map[BOS]) + list(id_map[PAD])
        for p in phonemes:
            if p in id_map:
                ids += list(id_map[p]) + list(id_map[PAD])
        return ids + list(id_map[EOS])

    def speaker_id(self, speaker):
        """A speaker name or id -> id (None: the first speaker)."""
        if speaker is None:
            return 0
        if self.config.num_speakers <= 1:
            raise VoiceError(f"{self.path.name} has a single speaker; drop --speaker.")
        if isinstance(speaker, str) and not speaker.isdigit():
            if speaker not in self.config.speaker_id_map:
                names = ", ".join(sorted(self.config.speaker_id_map)[:20])
                raise VoiceError(f"{self.path.name} has no speaker {speaker!r}; it has: {names}.")
            return self.config.speaker_id_map[speaker]
        sid = int(speaker)
        if not 0 <= sid < self.config.num_speakers:
            raise VoiceError(f"speaker {sid} is out of range: {self.path.name} has "
                             f"{self.config.num_speakers} speakers (0-{self.config.num_speakers - 1}).")
        return sid

    def _scales(self, noise_scale, length_scale, noise_w, speaker, seed):
        c = self.config
        return (c.noise_scale if noise_scale is None else noise_scale,
                c.length_scale if length_scale is None else length_scale,
                c.noise_w if noise_w is None else noise_w, self.speaker_id(speaker), seed)

    def audio(self, ids, noise_scale=None, length_scale=None, noise_w=None, speaker=None, seed=None):
        """Phoneme ids -> float32 waveform (unnormalised, as the network gives it)."""
        with _BLAS.limit(limits=1, user_api="blas"):
            return self.net.infer(ids, *self._scales(noise_scale, length_scale, noise_w, speaker, seed),
                                  self.pool, self.n_threads)

    def audios(self, id_lists, noise_scale=None, length_scale=None, noise_w=None, speaker=None,
               seed=None):
        """audio() of each list of ids, in order, side by side (core/tts/side_by_side.py): on
        2 threads here (Sapphire Rapids, quiet) 20 sentences took 1.69 s each split over both
        and 1.19-1.23 s one a thread after the first (2026-12-06)."""
        scales = self._scales(noise_scale, length_scale, noise_w, speaker, seed)
        with _BLAS.limit(limits=1, user_api="blas"):
            yield from side_by_side(id_lists, lambda ids: self.net.infer(ids, *scales, self.pool, self.n_threads),
                                    lambda ids: self.net.infer(ids, *scales), self.pool, self.n_threads)


def _voice_in(folder):
    """The one .onnx voice a folder holds (as a voice's download unpacks: the .onnx and its
    .onnx.json), or one sentence on why there is not one."""
    voices = sorted(folder.glob("*.onnx"))
    if len(voices) == 1:
        return voices[0]
    if not voices:
        raise VoiceError(f"{folder} is a folder with no .onnx voice in it: pass the voice's .onnx "
                         "file (its .onnx.json beside it).")
    raise VoiceError(f"{folder} holds {len(voices)} voices ({', '.join(v.name for v in voices)}): "
                     "pass the one to speak with.")


def load_voice(path, n_threads=None, voices_path=None):
    """Load `voice.onnx` and the `voice.onnx.json` beside it (or the one voice of a folder);
    n_threads: threads (default: all cores). A StyleTTS2 graph (Kokoro, Kitten TTS) loads as a KokoroVoice, its voice pack
    beside it or at voices_path."""
    path = Path(path)
    if path.suffix == ".json" and path.with_suffix("").suffix == ".onnx":
        path = path.with_suffix("")
    if path.is_dir():
        path = _voice_in(path)
    if not path.is_file():
        raise VoiceError(f"{path}: no such voice file.")
    config_path = path.with_name(path.name + ".json")
    try:
        model = onnx_file.read(path)
    except onnx_file.OnnxError as e:
        raise VoiceError(f"{e} A Piper voice is an .onnx file with its .onnx.json beside it.") from None
    from .kokoro import KokoroError, is_kokoro, load_kokoro
    if is_kokoro(model):
        try:
            return load_kokoro(path, model, voices_path, n_threads)
        except KokoroError as e:
            raise VoiceError(str(e)) from None
    try:
        net = Vits(model)
    except VitsError as e:
        raise VoiceError(str(e)) from None
    if not config_path.is_file():
        raise VoiceError(f"{path.name} has no config beside it: Piper voices need {config_path} "
                         "(download the .onnx.json with the .onnx).")
    return PiperVoice(path, VoiceConfig.from_json(config_path), net, n_threads)

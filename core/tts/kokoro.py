"""A Kokoro-82M (StyleTTS2) voice: the ONNX graph run by core/tts/graph.py, its voice pack
(an .npz of (510, 1, 256) style vectors, one row per phoneme count) and its phoneme vocab
beside it. Kitten TTS exports share the graph family and load by the same path.

It offers what synth.synthesize reads from a Piper voice (config, phoneme_ids, audio), so
the text front end, sentence streaming and the CLI are shared; the "speaker" is a voice name.
"""
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from threadpoolctl import ThreadpoolController

from dasllama.formats import onnx as onnx_file

from ..runtime.threads import set_threads
from .espeak import phonemize_kokoro
from .graph import Graph, GraphError
from .side_by_side import side_by_side

SAMPLE_RATE = 24000
INPUTS = ("tokens", "style", "speed")
_BLAS = ThreadpoolController()


class KokoroError(ValueError):
    """The Kokoro files are missing or of the wrong kind, or a voice name is unknown."""


@dataclass(frozen=True)
class KokoroConfig:
    phoneme_id_map: dict                 # phoneme -> id (one code point each)
    voices: dict = field(default_factory=dict)   # voice name -> (510, 1, 256) float32
    sample_rate: int = SAMPLE_RATE
    espeak_voice: str = "en-us"
    phoneme_type: str = "espeak"
    length_scale: float = 1.0


def is_kokoro(model):
    """Whether an OnnxModel is a StyleTTS2 export (Kokoro's or Kitten's inputs)."""
    return set(INPUTS) <= set(model.inputs) or {"input_ids", "style", "speed"} <= set(model.inputs)


def _beside(path, patterns):
    for pattern in patterns:
        found = sorted(path.parent.glob(pattern))
        if found:
            return found[0]
    return None


def _vocab(path):
    found = _beside(path, [f"{path.stem}.vocab.json", "vocab.json", "config.json"])
    if found is None:
        raise KokoroError(f"{path.name} has no phoneme vocab beside it: put Kokoro's config.json "
                          f"(or {path.stem}.vocab.json) next to it.")
    data = json.loads(found.read_text(encoding="utf-8"))
    return {k: int(v) for k, v in data.get("vocab", data).items()}


def _voices(path, voices_path):
    found = Path(voices_path) if voices_path else _beside(
        path, [f"{path.stem}.voices.npz", "voices*.npz", "voices*.bin"])
    if found is None or not found.is_file():
        raise KokoroError(f"{path.name} has no voice pack beside it: pass --voices voices.npz "
                          f"(or put {path.stem}.voices.npz next to it).")
    try:
        with np.load(found) as pack:
            return found, {name: np.asarray(pack[name], np.float32) for name in pack.files}
    except (ValueError, OSError):
        raise KokoroError(f"{found} is not a Kokoro voice pack (an .npz of style vectors).") from None


def _duration_value(graph):
    """The graph's integer frames per phoneme id: Round's output through Clip and the Cast to
    an integer (None when the export has no such chain)."""
    makers = {o: s for s in graph.steps for o in s.outputs}
    readers = {}
    for s in graph.steps:
        for i in s.inputs:
            readers.setdefault(i, []).append(s)
    value = next((s.outputs[0] for s in graph.steps if s.op == "Round"), None)
    while value is not None and makers[value].op != "Cast":
        nxt = [s for s in readers.get(value, []) if s.op in ("Clip", "Cast")]
        value = nxt[0].outputs[0] if len(nxt) == 1 else None
    return value


class KokoroVoice:
    phonemizers = {"espeak": phonemize_kokoro}    # kokoro-onnx's route to espeak-ng, not piper's
    trims_silence, sentence_silence, normalizes = True, 0.25, False   # as kokoro-onnx speaks

    def __init__(self, path, graph, config, n_threads=None, voices_path=None):
        self.path, self.graph, self.config = Path(path), graph, config
        self.n_threads, self.voices_path = n_threads, voices_path
        self.pool = None                 # audios' workers, made on first use
        self.tokens_input = "tokens" if "tokens" in graph.inputs else "input_ids"
        self.duration_value = _duration_value(graph)

    @property
    def sample_rate(self):
        return self.config.sample_rate

    def voice_names(self):
        return sorted(self.config.voices)

    def style(self, name, n_tokens):
        """The voice's style row for n_tokens phonemes (kokoro-onnx 0.6.1: row n - 1)."""
        if name is None:
            name = self.voice_names()[0]
        if name not in self.config.voices:
            raise KokoroError(f"{self.path.name} has no voice {name!r}; it has: "
                              f"{', '.join(self.voice_names()[:20])}.")
        pack = self.config.voices[name]
        return pack[min(n_tokens, len(pack)) - 1].reshape(1, -1)

    def phoneme_ids(self, phonemes):
        """Phonemes -> ids framed by the pad id 0; unknown phonemes dropped (as kokoro-onnx)."""
        vocab = self.config.phoneme_id_map
        return [0] + [vocab[p] for p in phonemes if p in vocab] + [0]

    def _feeds(self, ids, length_scale, speaker):
        speed = 1.0 / (length_scale or 1.0)
        return {self.tokens_input: np.array([ids], np.int64),
                "style": self.style(speaker, len(ids) - 2),
                "speed": np.array([speed], np.float32)}

    def audio(self, ids, noise_scale=None, length_scale=None, noise_w=None, speaker=None, seed=None):
        """Phoneme ids (framed) -> float32 waveform at 24 kHz; speaker: a voice name."""
        set_threads(self.n_threads)      # numba's count is per calling thread: set where we run
        return self.graph.run(self._feeds(ids, length_scale, speaker))[self.graph.outputs[0]].reshape(-1)

    def audios(self, id_lists, noise_scale=None, length_scale=None, noise_w=None, speaker=None,
               seed=None):
        """audio() of each list of ids, in order, side by side (core/tts/side_by_side.py): the
        first on every thread, the rest one a thread with numba and BLAS held to one each."""
        n = set_threads(self.n_threads)
        if n > 1 and self.pool is None:
            self.pool = ThreadPoolExecutor(n, thread_name_prefix="dasllama-kokoro")

        def run(ids, n_threads):
            set_threads(n_threads)        # numba's count is per calling thread
            return self.graph.run(self._feeds(ids, length_scale, speaker))[self.graph.outputs[0]].reshape(-1)

        def first(ids):
            with _BLAS.limit(limits=n, user_api="blas"):
                return run(ids, n)
        with _BLAS.limit(limits=1, user_api="blas"):
            yield from side_by_side(id_lists, first, lambda ids: run(ids, 1), self.pool if n > 1 else None, n)

    def durations_and_audio(self, ids, length_scale=None, speaker=None):
        """(frames per phoneme id (int64), waveform) of one run, the durations traced from the
        graph (verify compares them with onnxruntime's)."""
        if self.duration_value is None:
            raise KokoroError(f"{self.path.name} has no Round > Clip > Cast duration chain to read.")
        set_threads(self.n_threads)
        seen = {}

        def keep(step, values):
            if self.duration_value in step.outputs:
                seen["frames"] = np.array(values[self.duration_value]).reshape(-1)

        out = self.graph.run(self._feeds(ids, length_scale, speaker), trace=keep)
        return seen["frames"], out[self.graph.outputs[0]].reshape(-1)


def load_kokoro(path, model=None, voices_path=None, n_threads=None):
    """Load a Kokoro (or Kitten TTS) .onnx with its voice pack and vocab beside it."""
    path = Path(path)
    model = model or onnx_file.read(path)
    if not is_kokoro(model):
        raise KokoroError(f"{path.name} is not a StyleTTS2 (Kokoro / Kitten TTS) graph.")
    try:
        graph = Graph(model)
    except GraphError as e:
        raise KokoroError(str(e)) from None
    voices_path, voices = _voices(path, voices_path)
    return KokoroVoice(path, graph, KokoroConfig(_vocab(path), voices), n_threads, voices_path)

"""`verify` for a multimodal turn: our towers' embeddings against libmtmd's on the same pixels or
samples (llama.cpp's own numbers through its library), then the whole turn's greedy text after
the splice against llama-mtmd-cli's on the same files, prompt and threads."""
from dataclasses import dataclass, field

import numpy as np

from ..llm.sampling import SamplerParams
from ..mtmd.turn import Audio, Grid, image_turn
from .ref_mtmd import mtmd_cli_text, mtmd_embeddings

# The towers' relative error against libmtmd on the test pairs (docs/BENCHMARKS.md): F16 or F32
# matrices 2e-4 to 5e-4 (summation orders, an activation now and then on the other f16
# neighbour); quantised ones (a Q8_0 mmproj) 2e-3 to 5e-3, the same differences moving an
# activation by a Q8_0 step, against ~1e-2 between libmtmd's own Q8_0 and F16 embeddings.
DEFAULT_EMBD_BOUND = 2e-3
QUANTISED_EMBD_BOUND = 1e-2
DEFAULT_PROMPT = "Describe this in detail."      # the turn's text when -p gives none (bench's too)


def default_embd_bound(mm):
    """The bound for an open Mmproj's towers: QUANTISED_EMBD_BOUND where a matrix is quantised."""
    return QUANTISED_EMBD_BOUND if mm.quantised else DEFAULT_EMBD_BOUND


@dataclass
class MediaCheck:
    """One item's embeddings, ours against libmtmd's."""
    kind: str                    # "image" or "audio"
    path: str
    shape: tuple
    ref_shape: tuple
    rel_err: float = None        # ||ours - ref|| / ||ref||, when the shapes agree
    max_abs: float = None

    def ok(self, bound):
        return self.shape == self.ref_shape and self.rel_err is not None and self.rel_err <= bound

    def to_dict(self):
        return {"kind": self.kind, "path": self.path, "shape": list(self.shape),
                "ref_shape": list(self.ref_shape), "rel_err": self.rel_err, "max_abs": self.max_abs}


@dataclass
class TurnCheck:
    """The turn's greedy text, ours against llama-mtmd-cli's."""
    ours: str
    ref: str
    media: list = field(default_factory=list)

    @property
    def same_text(self):
        return self.ours.strip() == self.ref.strip()

    @property
    def first_difference(self):
        """Index of the first character where the texts part (None when they agree)."""
        a, b = self.ours.strip(), self.ref.strip()
        if a == b:
            return None
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(kind, path, ours, ref):
    check = MediaCheck(kind, str(path), tuple(ours.shape), tuple(ref.shape))
    if ours.shape == ref.shape:
        check.rel_err = float(np.linalg.norm(ours - ref) / max(np.linalg.norm(ref), 1e-30))
        check.max_abs = float(np.max(np.abs(ours - ref))) if ours.size else 0.0
    return check


def embeddings_of(parts):
    """An item's embeddings in the prompt's order, as libmtmd's chunks give them: Vision.encode's
    arrays (a Grid's rows) without the token ids between them (idefics3's tile markers)."""
    arrays = [part.embd if isinstance(part, Grid) else part for part in parts if not isinstance(part, list)]
    return np.concatenate(arrays)


def verify_turn(model, vision, mmproj_path, media, prompt, n_predict, n_threads, workdir):
    """media: [(path, Pillow RGB image or Audio)] as media.load_media decoded them, in the
    prompt's order. Each tower is fed the same pixels or samples on both sides (so the JPEG
    and mp3 decoders do not count); the turn gives llama-mtmd-cli the files themselves."""
    checks = []
    for path, item in media:
        audio = isinstance(item, Audio)
        given = np.asarray(item.samples, np.float32) if audio else np.asarray(item)
        ref, _ = mtmd_embeddings(model.path, mmproj_path, given, n_threads, workdir)
        checks.append(compare("audio" if audio else "image", path, embeddings_of(vision.encode(item)), ref))
    ours = "".join(t.text for t in image_turn(model, vision, [item for _, item in media], prompt, n_predict,
                                              SamplerParams(temp=0.0)))
    # llama-mtmd-cli's --image takes audio files too (it reads the kind from the file), in order
    ref, _ = mtmd_cli_text(model.path, mmproj_path, [path for path, _ in media], prompt, n_predict, n_threads)
    return TurnCheck(ours, ref, checks)

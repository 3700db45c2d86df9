"""One chat turn with images or audio, as llama-mtmd-cli runs it: the user's text (a media marker
per item put in front when it has none) through the chat template, each marker replaced by the
projector's begin marker, the item's embeddings, its end marker (gemma3 images:
<start_of_image> ... <end_of_image>, non-causal among themselves; qwen2a audio: <|audio_bos|> ...
<|audio_eos|>; ultravox audio: none; idefics3 images: a tile's embeddings after
<fake_token_around_image><row_R_col_C>, rows apart by a newline token, then a double-newline
token, <fake_token_around_image><global-img>, the overview's, <fake_token_around_image>; qwen2vl
images: <|vision_start|> ... <|vision_end|>, the rows at M-RoPE positions by row and column);
then sampled tokens."""
import codecs
import time
from dataclasses import dataclass, field

import numpy as np

from dasllama.core.llm.chat import render_chat
from dasllama.core.llm.generate import Token
from dasllama.core.llm.sampling import Sampler, SamplerParams

from .audio_mel import mel_windows
from .mmproj import MROPE_PROJECTORS, TEXT_FAMILIES, Mmproj, MmprojError
from .preprocess import gemma3_input, idefics3_tiles, qwen2vl_input
from .qwen2vl import Qwen25VLTower, Qwen2VLTower
from .siglip import Gemma3Tower, Idefics3Tower
from .whisper_enc import AudioTower

MARKER = "<__media__>"                       # mtmd_default_marker()
# mtmd.cpp's begin / end markers around a projector's embeddings
MARKERS = {"gemma3": ("<start_of_image>", "<end_of_image>"), "qwen2a": ("<|audio_bos|>", "<|audio_eos|>"),
           "ultravox": ("", ""), "idefics3": ("", ""), "qwen2vl_merger": ("<|vision_start|>", "<|vision_end|>"),
           "qwen2.5vl_merger": ("<|vision_start|>", "<|vision_end|>")}
IDEFICS3_TILE = "<fake_token_around_image><row_{}_col_{}>"   # before each tile, tokenized
# looked up as whole tokens by their text, as mtmd's lookup_token does
IDEFICS3_ROW_END = ("\n",)
IDEFICS3_OVERVIEW = (("\n\n", "<fake_token_around_image>", "<global-img>"), ("<fake_token_around_image>",))
NON_CAUSAL = {"gemma3"}                      # mtmd_decode_use_non_causal


@dataclass(frozen=True)
class Grid:
    """An image's embeddings (nx * ny, n_embd), row-major over its nx x ny grid: an M-RoPE
    text model places each row by its row and column (qwen2vl)."""
    embd: object
    nx: int
    ny: int


@dataclass(frozen=True)
class Audio:
    """A clip as the audio tower takes it: float32 mono samples at 16 kHz."""
    samples: object                          # (n,) float32


@dataclass
class TurnTimings:
    encode_s: list = field(default_factory=list)   # wall time of each item's tower
    prompt_s: float = 0.0
    gen_s: float = 0.0
    gen_tokens: int = 0


class Vision:
    """An mmproj's towers (image, audio or both) bound to a text model whose width they must give."""

    def __init__(self, mmproj_path, model, n_threads=None):
        mm = Mmproj(mmproj_path)
        arch = model.gguf.architecture
        for hp, medium in ((mm.vision, "images"), (mm.audio, "audio")):
            if hp is None:
                continue
            if arch not in TEXT_FAMILIES[hp.projector]:
                raise MmprojError(f"{model.path} is a '{arch}' model, which takes no {medium} from a "
                                  f"'{hp.projector}' mmproj: pass the model that mmproj was made for "
                                  f"({', '.join(TEXT_FAMILIES[hp.projector])}).")
            if hp.n_embd_text != model.hparams.n_embd:
                raise MmprojError(f"{mmproj_path} projects to {hp.n_embd_text} wide embeddings but the "
                                  f"model is {model.hparams.n_embd} wide: pass the mmproj made for this model.")
        if not hasattr(model, "eval_embd"):
            raise MmprojError("this dasllama's language model cannot take embeddings as input yet.")
        self.mm, self.hparams = mm, mm.vision
        self.tokenizer = model.tokenizer
        towers = {"gemma3": Gemma3Tower, "idefics3": Idefics3Tower, "qwen2vl_merger": Qwen2VLTower,
                  "qwen2.5vl_merger": Qwen25VLTower}
        self.tower = towers[mm.vision.projector](mm, n_threads) if mm.vision else None
        if mm.vision and mm.vision.projector == "idefics3":   # looked up now: a vocab without them fails here
            self.idefics3_ids = [_lookup(model.tokenizer, texts)
                                 for texts in (IDEFICS3_ROW_END, *IDEFICS3_OVERVIEW)]
        self.audio_tower = AudioTower(mm, n_threads) if mm.audio else None

    def check(self, n_images, n_audio):
        """Refuse media the mmproj has no tower for, in one sentence."""
        if n_images and self.tower is None:
            raise MmprojError(f"{self.mm.path} has an audio tower only ('{self.mm.audio.projector}'): "
                              "pass --audio, or the mmproj with a vision tower for --image.")
        if n_audio and self.audio_tower is None:
            raise MmprojError(f"{self.mm.path} has a vision tower only ('{self.mm.vision.projector}'): "
                              "pass --image, or the mmproj with an audio tower for --audio.")

    def projector(self, item):
        return (self.mm.audio if isinstance(item, Audio) else self.mm.vision).projector

    def encode(self, item):
        """A Pillow RGB image or an Audio clip -> what goes in the prompt at its marker: a list of
        (n_tokens, n_embd) embeddings (a Grid for qwen2vl) and token id lists, in order. A
        clip's 30 s windows are one after another, as mtmd concatenates them; an idefics3 image
        is its tiles and their tokens."""
        if isinstance(item, Audio):
            windows = mel_windows(item.samples, self.mm.audio.n_mel)
            return [np.concatenate([self.audio_tower.encode(w) for w in windows])]
        if self.hparams.projector == "idefics3":
            return self._idefics3_parts(item)
        if self.hparams.projector in MROPE_PROJECTORS:
            image = qwen2vl_input(item, self.hparams)
            side = self.hparams.patch_size * self.hparams.n_merge
            return [Grid(self.tower.encode(image), image.shape[2] // side, image.shape[1] // side)]
        return [self.tower.encode(gemma3_input(item, self.hparams))]

    def _idefics3_parts(self, img):
        """mtmd's layout for an idefics3 image: tiles row by row, each after its row/col tokens,
        a newline token between rows, then the overview between its tokens."""
        cut = idefics3_tiles(img, self.hparams)
        row_end, before, after = self.idefics3_ids
        parts = []
        for y in range(cut.grid_y):
            for x in range(cut.grid_x):
                parts.append(self.tokenizer.encode(IDEFICS3_TILE.format(y + 1, x + 1), add_special=False,
                                                   parse_special=True))
                parts.append(self.tower.encode(cut.tiles[y * cut.grid_x + x]))
            if y != cut.grid_y - 1:
                parts.append(row_end)
        return parts + [before, self.tower.encode(cut.overview), after]


def _lookup(tok, texts):
    """The first token whose text (specials rendered) is each of `texts`, as mtmd's lookup_token."""
    found = {t.encode(): None for t in texts}
    for i in range(tok.n_vocab):
        piece = tok.token_to_piece(i, special=True)
        if piece in found and found[piece] is None:
            found[piece] = i
    missing = [t for t in texts if found[t.encode()] is None]
    if missing:
        raise MmprojError(f"the model's vocab has no token {missing[0]!r}, which mtmd puts around idefics3 "
                          "images: pass the SmolVLM text model that mmproj was made for.")
    return [found[t.encode()] for t in texts]


def turn_pieces(model, prompt, n_images, template=None, system=None, projectors=None):
    """The text pieces around the media: n_images + 1 strings, the chat template applied;
    projectors names each item's projector in order (gemma3 for every one by default)."""
    projectors = list(projectors or ["gemma3"] * n_images)
    if MARKER not in prompt:
        prompt = MARKER * n_images + prompt
    if prompt.count(MARKER) != n_images:
        raise ValueError(f"the prompt has {prompt.count(MARKER)} media markers for {n_images} media.")
    tok = model.tokenizer
    bos = tok.token_to_piece(tok.bos_id, special=True).decode("utf-8", "replace") if tok.bos_id is not None else ""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    text = render_chat(template or model.gguf.get("tokenizer.chat_template"), messages, bos, "")
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]                  # the tokenizer adds it, as llama.cpp strips it
    pieces = text.split(MARKER)
    for i, proj in enumerate(projectors):        # the begin marker ends piece i, the end opens i + 1
        begin, end = MARKERS[proj]
        pieces[i] += begin
        pieces[i + 1] = end + pieces[i + 1]
    return pieces


def image_turn(model, vision, images, prompt, n_predict=-1, params=SamplerParams(), template=None,
               system=None, timings=None):
    """Yield Tokens of the reply to `prompt` about `images` (Pillow RGB images and Audio clips,
    in the order of the prompt's markers)."""
    timings = timings if timings is not None else TurnTimings()
    tok = model.tokenizer
    projectors = [vision.projector(item) for item in images]
    pieces = turn_pieces(model, prompt, len(images), template, system, projectors)
    embds = []
    for img in images:
        t0 = time.perf_counter()
        embds.append(vision.encode(img))
        timings.encode_s.append(time.perf_counter() - t0)
    model.reset()
    t0 = time.perf_counter()
    history = []
    logits = None
    for i, piece in enumerate(pieces):
        ids = tok.encode(piece, add_special=i == 0, parse_special=True)
        if ids:
            logits = model.eval(ids)
            history += ids
        for part in embds[i] if i < len(embds) else ():
            if isinstance(part, Grid):
                logits = model.eval_embd(part.embd, grid=(part.nx, part.ny))
            elif isinstance(part, np.ndarray):
                logits = model.eval_embd(part, causal=projectors[i] not in NON_CAUSAL)
            else:
                logits = model.eval(part)
                history += part
    timings.prompt_s = time.perf_counter() - t0
    sampler = Sampler(params)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    reason, n, t1 = "length", 0, time.perf_counter()
    while n_predict < 0 or n < n_predict:
        token = sampler.sample(logits, history)
        n += 1
        if token in tok.eog_ids:
            reason = "eos"
            break
        history.append(token)
        yield Token(token, decoder.decode(tok.token_to_piece(token)))
        if n == n_predict or model.n_past >= model.n_ctx:
            break
        logits = model.eval([token])
    timings.gen_tokens, timings.gen_s = n, time.perf_counter() - t1
    yield Token(-1, decoder.decode(b"", final=True), reason)

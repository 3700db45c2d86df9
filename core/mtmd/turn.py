"""One chat turn with images, as llama-mtmd-cli runs it: the user's text (a media marker per
image put in front when it has none) through the chat template, each marker replaced by
<start_of_image>, the image's embeddings (non-causal among themselves), <end_of_image>;
then sampled tokens."""
import codecs
import time
from dataclasses import dataclass, field

from dasllama.core.llm.chat import render_chat
from dasllama.core.llm.generate import Token
from dasllama.core.llm.sampling import Sampler, SamplerParams

from .mmproj import TEXT_FAMILIES, Mmproj, MmprojError
from .preprocess import gemma3_input
from .siglip import Gemma3Tower

MARKER = "<__media__>"                       # mtmd_default_marker()
IMAGE_BEGIN, IMAGE_END = "<start_of_image>", "<end_of_image>"   # mtmd.cpp, gemma3


@dataclass
class TurnTimings:
    encode_s: list = field(default_factory=list)   # wall time of each image's tower
    prompt_s: float = 0.0
    gen_s: float = 0.0
    gen_tokens: int = 0


class Vision:
    """An mmproj's tower bound to a text model whose width it must give."""

    def __init__(self, mmproj_path, model, n_threads=None):
        mm = Mmproj(mmproj_path)
        arch = model.gguf.architecture
        if arch not in TEXT_FAMILIES[mm.hparams.projector]:
            raise MmprojError(f"{model.path} is a '{arch}' model, which takes no images from a "
                              f"'{mm.hparams.projector}' mmproj: pass the model that mmproj was made for "
                              f"({', '.join(TEXT_FAMILIES[mm.hparams.projector])}).")
        if mm.hparams.n_embd_text != model.hparams.n_embd:
            raise MmprojError(f"{mmproj_path} projects to {mm.hparams.n_embd_text} wide embeddings but the "
                              f"model is {model.hparams.n_embd} wide: pass the mmproj made for this model.")
        if not hasattr(model, "eval_embd"):
            raise MmprojError("this dasllama's language model cannot take embeddings as input yet.")
        self.mm, self.hparams = mm, mm.hparams
        self.tower = Gemma3Tower(mm, n_threads)

    def encode(self, img):
        """A Pillow RGB image -> (n_tokens, n_embd) embeddings."""
        return self.tower.encode(gemma3_input(img, self.hparams))


def turn_pieces(model, prompt, n_images, template=None, system=None):
    """The text pieces around the images: n_images + 1 strings, the chat template applied."""
    if MARKER not in prompt:
        prompt = MARKER * n_images + prompt
    if prompt.count(MARKER) != n_images:
        raise ValueError(f"the prompt has {prompt.count(MARKER)} media markers for {n_images} images.")
    tok = model.tokenizer
    bos = tok.token_to_piece(tok.bos_id, special=True).decode("utf-8", "replace") if tok.bos_id is not None else ""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    text = render_chat(template or model.gguf.get("tokenizer.chat_template"), messages, bos, "")
    if tok.add_bos and bos and text.startswith(bos):
        text = text[len(bos):]                  # the tokenizer adds it, as llama.cpp strips it
    return text.replace(MARKER, IMAGE_BEGIN + MARKER + IMAGE_END).split(MARKER)


def image_turn(model, vision, images, prompt, n_predict=-1, params=SamplerParams(), template=None,
               system=None, timings=None):
    """Yield Tokens of the reply to `prompt` about `images` (Pillow RGB images)."""
    timings = timings if timings is not None else TurnTimings()
    tok = model.tokenizer
    pieces = turn_pieces(model, prompt, len(images), template, system)
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
        if i < len(embds):
            logits = model.eval_embd(embds[i], causal=False)
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

"""`dasllama mtmd`: a chat turn about images or audio clips, as llama-mtmd-cli runs it; stdout
carries only the reply, streamed; the media encoder's wall time goes to stderr (and --json)."""
import json
import sys

import click

from dasllama.core import SamplerParams, load
from dasllama.core.mtmd.mmproj import MmprojError
from dasllama.core.mtmd.turn import Audio, TurnTimings, Vision, image_turn
from dasllama.core.mtmd.media import load_media, split_paths
from dasllama.formats.audio import AudioError
from dasllama.formats.image import ImageError

from .errors import user_errors
from .options import THREADS, FiniteFloat, media_option


@click.command("mtmd")
@click.option("-m", "--model", "model_path", required=True, help="The text model GGUF.")
@click.option("--mmproj", "mmproj_path", help="The mmproj GGUF of the model (its vision or audio tower).")
@media_option()
@click.option("-p", "--prompt", required=True, help="The user's text; <__media__> marks where images and audio go.")
@click.option("-n", "--n-predict", default=-1, type=click.IntRange(-1), help="Tokens to generate (-1: until the end).")
@click.option("--temp", default=0.8, type=FiniteFloat(0.0), help="Temperature; 0 is greedy.")
@click.option("-t", "--threads", type=THREADS, help="Threads (default: all cores).")
@click.option("-c", "--ctx-size", default=4096, type=click.IntRange(16), help="Context size.")
@click.option("-s", "--seed", default=-1, type=int, help="Sampling seed (-1: random).")
@click.option("--json", "as_json", is_flag=True, help="One JSON record: text, ids, timings.")
@click.option("-q", "--quiet", is_flag=True, help="No timing line on stderr.")
def mtmd_cmd(model_path, mmproj_path, media, prompt, n_predict, temp, threads, ctx_size, seed, as_json, quiet):
    """Answer a prompt about images or audio with a multimodal model (a GGUF and its mmproj)."""
    if media and not mmproj_path:
        raise click.UsageError("--image and --audio need --mmproj, the vision or audio tower made for this model.")
    with user_errors():
        try:
            items = [item for _, item in load_media(split_paths(media))]
            n_audio = sum(isinstance(item, Audio) for item in items)
            n_images = len(items) - n_audio
            model = load(model_path, n_ctx=ctx_size, n_threads=threads, n_batch=max(512, ctx_size // 4),
                         quiet=quiet)
            vision = Vision(mmproj_path, model, threads) if mmproj_path else None
            if vision is not None:
                vision.check(n_images, n_audio)
        except (ImageError, AudioError, MmprojError) as e:
            raise click.ClickException(str(e)) from None
        if vision is None:
            raise click.UsageError("dasllama mtmd needs --mmproj (a text-only turn is `dasllama generate --chat`).")
        params = SamplerParams(temp=temp, seed=None if seed < 0 else seed)
        timings = TurnTimings()
        ids, text = [], []
        out = sys.stdout
        for token in image_turn(model, vision, items, prompt, n_predict, params, timings=timings):
            if token.id >= 0:
                ids.append(token.id)
            text.append(token.text)
            if not as_json and token.text:
                out.write(token.text)
                out.flush()
    encode = sum(timings.encode_s)
    if as_json:
        click.echo(json.dumps({"text": "".join(text), "ids": ids, "stop_reason": token.stop_reason,
                               "timings": {"encode_s": timings.encode_s, "prompt_s": timings.prompt_s,
                                           "gen_s": timings.gen_s, "gen_tokens": timings.gen_tokens}}))
    else:
        out.write("\n")
    if not quiet:
        media = ", ".join(f"{n} {what}" for n, what in ((n_images, "image(s)"), (n_audio, "audio clip(s)")) if n)
        click.echo(f"media encoder: {encode * 1000:.0f} ms for {media or 'no media'}; prompt "
                   f"{timings.prompt_s * 1000:.0f} ms; {timings.gen_tokens} tokens in {timings.gen_s * 1000:.0f} ms",
                   err=True)


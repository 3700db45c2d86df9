"""`dasllama verify -m MODEL --mmproj MMPROJ --image FILE`: our towers' embeddings against
libmtmd's on the same pixels or samples, then the turn's greedy text against llama-mtmd-cli's.
Exit 0 parity, 1 divergence, 2 setup."""
import json
import tempfile

import click

from dasllama.core import load
from dasllama.core.mtmd.media import load_media, split_paths
from dasllama.core.mtmd.mmproj import MmprojError
from dasllama.core.mtmd.turn import Audio, Vision
from dasllama.core.tools.ref_mtmd import ReferenceError, llama_cpp_dir
from dasllama.core.tools.verify_mtmd import DEFAULT_PROMPT, default_embd_bound, verify_turn
from dasllama.formats.audio import AudioError
from dasllama.formats.image import ImageError

from .errors import USER_ERRORS


def verify_mtmd(setup_error, model_path, mmproj_path, media, prompts, n_predict, threads, ctx_size, embd_bound,
                as_json):
    if len(prompts) > 1:
        raise click.UsageError("a media turn is verified on one -p prompt.")
    prompt = prompts[0] if prompts else DEFAULT_PROMPT
    try:
        media = load_media(split_paths(media))
        n_audio = sum(isinstance(item, Audio) for _, item in media)
        ref_root = llama_cpp_dir()
        model = load(model_path, n_ctx=ctx_size, n_threads=threads, n_batch=max(512, ctx_size // 4), quiet=True)
        vision = Vision(mmproj_path, model, threads)
        vision.check(len(media) - n_audio, n_audio)
        embd_bound = embd_bound or default_embd_bound(vision.mm)
        click.echo(f"verify: {model.path} with {mmproj_path} against libmtmd and llama-mtmd-cli "
                   f"({ref_root}), {model.n_threads} threads", err=True)
        with tempfile.TemporaryDirectory(prefix="dasllama-verify-") as workdir:
            check = verify_turn(model, vision, mmproj_path, media, prompt, n_predict, model.n_threads, workdir)
    except (ImageError, AudioError, MmprojError, ReferenceError, *USER_ERRORS) as e:
        raise setup_error(str(e)) from None
    towers_ok = all(m.ok(embd_bound) for m in check.media)
    code = 0 if towers_ok and check.same_text else 1
    if as_json:
        click.echo(json.dumps({"verdict": "parity" if code == 0 else "divergence", "exit_code": code,
                               "model": model.path, "mmproj": mmproj_path, "prompt": prompt,
                               "n_predict": n_predict, "embd_bound": embd_bound,
                               "media": [m.to_dict() for m in check.media],
                               "text": {"ours": check.ours, "llama-mtmd-cli": check.ref,
                                        "same": check.same_text}}, ensure_ascii=False))
    else:
        for m in check.media:
            click.echo(render_media(m, embd_bound))
        click.echo(render_text(check, n_predict))
        click.echo("verify: parity" if code == 0 else "verify: divergence")
    click.get_current_context().exit(code)


def render_media(m, bound):
    head = f"{m.kind} {m.path}"
    if m.shape != m.ref_shape:
        return f"{head}: {m.shape[0]} embeddings against libmtmd's {m.ref_shape[0]}: shapes differ"
    verdict = "within" if m.ok(bound) else "past"
    return (f"{head}: {m.shape[0]} x {m.shape[1]} embeddings, relative error {m.rel_err:.2e} "
            f"({verdict} the bound {bound:.0e}), max |diff| {m.max_abs:.2e}")


def render_text(check, n_predict):
    if check.same_text:
        return f"text: the same {n_predict}-token greedy reply as llama-mtmd-cli"
    k = check.first_difference
    ours, ref = check.ours.strip(), check.ref.strip()
    return (f"text: parts from llama-mtmd-cli's at character {k}:\n"
            f"  ours           {json.dumps(ours[max(0, k - 20):k + 40], ensure_ascii=False)}\n"
            f"  llama-mtmd-cli {json.dumps(ref[max(0, k - 20):k + 40], ensure_ascii=False)}")

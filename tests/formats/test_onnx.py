"""formats/onnx.py reads a model as the onnx package does (weights and attributes), without
importing it, and onnx still imports after it in the same process."""
import subprocess
import sys

import numpy as np
import pytest

from dasllama.formats import onnx as onnx_file

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.fixture
def model_path(tmp_path):
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((3, 4)).astype(np.float32), "w"),  # raw_data
               numpy_helper.from_array(rng.integers(-128, 127, (5,)).astype(np.int8), "q"),
               helper.make_tensor("ids", TensorProto.INT64, (2, 2), [1, -2, 3, 4]),        # int64_data
               helper.make_tensor("h", TensorProto.FLOAT16, (3,),
                                  np.array([0.5, -1.25, 3.0], np.float16).view(np.uint16).tolist()),
               helper.make_tensor("f", TensorProto.FLOAT, (2,), [0.25, -7.0])]               # float_data
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 2], alpha=0.5, group=1,
                            auto_pad="NOTSET", scales=[1.0, 2.5],
                            value=helper.make_tensor("v", TensorProto.INT64, (1,), [7]))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], weights)
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph), str(path))
    return path


def test_weights_and_attributes_are_onnx_s(model_path):
    ours = onnx_file.read(model_path)
    proto = onnx.load(str(model_path))
    theirs = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    assert ours.weights.keys() == theirs.keys()
    for name, value in theirs.items():
        assert ours.weights[name].dtype == value.dtype and np.array_equal(ours.weights[name], value), name
    (node,) = ours.nodes
    assert (node.op, node.inputs, node.outputs, ours.inputs, ours.outputs) == ("Conv", ["x", "w"], ["y"], ["x"], ["y"])
    assert {k: v for k, v in node.attrs.items() if k != "value"} == \
        {"pads": [1, 2], "alpha": 0.5, "group": 1, "auto_pad": b"NOTSET", "scales": [1.0, 2.5]}
    assert node.attrs["value"].dtype == np.int64 and node.attrs["value"].tolist() == [7]


def test_onnx_imports_after_our_read(model_path):
    code = ("import sys; from dasllama.formats import onnx as f; f.read(sys.argv[1]); "
            "assert 'onnx.helper' not in sys.modules; import onnx; from onnx import numpy_helper; "
            "m = onnx.load(sys.argv[1]); print(numpy_helper.to_array(m.graph.initializer[0]).shape)")
    out = subprocess.run([sys.executable, "-c", code, str(model_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "(3, 4)"


def test_not_onnx_is_diagnosed(tmp_path):
    path = tmp_path / "voice.onnx"
    path.write_text('{"audio": {}}')
    with pytest.raises(onnx_file.OnnxError, match="JSON file"):
        onnx_file.read(path)

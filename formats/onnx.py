"""ONNX models (Piper voices): the weights by initializer name and the graph's nodes, read with
the `onnx` package's protobuf classes. The engine never runs the graph; it walks it to learn
what the export did (conv paddings and dilations, anonymised weight names, which input feeds
which lookup).
"""
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import not_a_download

# TensorProto.DataType -> numpy, and the repeated field that holds the values when raw_data
# does not (onnx.helper's tables for the types a voice carries)
_DTYPES = {1: (np.float32, "float_data"), 2: (np.uint8, "int32_data"), 3: (np.int8, "int32_data"),
           4: (np.uint16, "int32_data"), 5: (np.int16, "int32_data"), 6: (np.int32, "int32_data"),
           7: (np.int64, "int64_data"), 9: (np.bool_, "int32_data"), 10: (np.float16, "int32_data"),
           11: (np.float64, "double_data"), 12: (np.uint32, "uint64_data"), 13: (np.uint64, "uint64_data")}
# AttributeProto.AttributeType -> the field its value is in
_ATTRIBUTES = {1: "f", 2: "i", 3: "s", 4: "t", 6: "floats", 7: "ints", 8: "strings"}


class OnnxError(ValueError):
    """The file is not an ONNX model this reader can load."""


@dataclass
class Node:
    op: str          # ONNX op type: "Conv", "ConvTranspose", "Gather", ...
    name: str
    inputs: list
    outputs: list
    attrs: dict      # attribute name -> python value (ints, floats, lists)


@dataclass
class OnnxModel:
    path: Path
    weights: dict = field(default_factory=dict)   # initializer name -> np.ndarray
    nodes: list = field(default_factory=list)     # Node, in graph order
    inputs: list = field(default_factory=list)    # graph input names (initializers excluded)
    outputs: list = field(default_factory=list)

    def __getitem__(self, name):
        return self.weights[name]

    def __contains__(self, name):
        return name in self.weights

    def consumers(self, op, input_name):
        """Nodes of type `op` taking `input_name` among their inputs."""
        return [n for n in self.nodes if n.op == op and input_name in n.inputs]


def _diagnose(path, head):
    if (said := not_a_download(path, head)) is not None:
        return said
    if head[:4] == b"GGUF":
        return f"{path} is a GGUF file, not an ONNX model."
    if head[:4] == b"RIFF" or head[:4] in (b"fLaC", b"OggS"):
        return f"{path} is an audio file, not an ONNX model."
    if head.lstrip().startswith((b"{", b"[")):
        return f"{path} is a JSON file, not an ONNX model (pass the .onnx beside it)."
    return f"{path} is not an ONNX model (it does not parse as one)."


def _proto():
    """onnx's generated onnx_ml_pb2 (ModelProto), loaded from its file without `import onnx`:
    the package's helpers import ml_dtypes, ~0.8 s of a voice's cold start here. It is filed
    under its own name, so a later `import onnx` in the process takes it as its own."""
    name = "onnx.onnx_ml_pb2"
    if name not in sys.modules:
        package = importlib.util.find_spec("onnx")
        if package is None or not package.submodule_search_locations:
            raise OnnxError("reading .onnx voices needs the onnx package: pip install onnx.")
        spec = importlib.util.spec_from_file_location(
            name, Path(package.submodule_search_locations[0]) / "onnx_ml_pb2.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    return sys.modules[name]


def to_array(tensor):
    """A TensorProto's values as a numpy array (numpy_helper.to_array's for these types)."""
    if tensor.data_type not in _DTYPES or tensor.data_location == 1:      # 1: EXTERNAL
        raise OnnxError(f"tensor {tensor.name!r} is stored in a way this reader does not take "
                        f"(data type {tensor.data_type}, external data or strings).")
    dtype, values = _DTYPES[tensor.data_type]
    dims = tuple(tensor.dims)
    if tensor.HasField("raw_data"):
        return np.frombuffer(tensor.raw_data, np.dtype(dtype).newbyteorder("<")).astype(dtype, copy=False).reshape(dims)
    data = getattr(tensor, values)
    if dtype is np.float16:
        return np.asarray(data, np.uint16).view(np.float16).reshape(dims)
    return np.asarray(data, dtype).reshape(dims)


def _attribute(a):
    """An attribute's python value (onnx.helper.get_attribute_value's); a tensor (ConstantOfShape's
    value) as a numpy array."""
    field_name = _ATTRIBUTES.get(a.type)
    if field_name is None:
        raise OnnxError(f"attribute {a.name!r} is of a kind (type {a.type}) this reader does not take.")
    value = getattr(a, field_name)
    if field_name == "t":
        return to_array(value)
    return list(value) if field_name in ("floats", "ints", "strings") else value


def read(path):
    """Load an ONNX model file: initializers as numpy arrays, nodes with their attributes."""
    proto_module = _proto()
    path = Path(path)
    if not path.is_file():
        raise OnnxError(f"{path}: no such file.")
    with open(path, "rb") as f:
        head = f.read(64)
        f.seek(0)
        proto = proto_module.ModelProto()
        try:
            proto.ParseFromString(f.read())
        except Exception:   # protobuf's DecodeError
            raise OnnxError(_diagnose(path, head)) from None
    graph = proto.graph
    if not graph.node:
        raise OnnxError(_diagnose(path, head))
    weights = {t.name: to_array(t) for t in graph.initializer}
    nodes = [Node(n.op_type, n.name, list(n.input), list(n.output), {a.name: _attribute(a) for a in n.attribute})
             for n in graph.node]
    inputs = [i.name for i in graph.input if i.name not in weights]
    return OnnxModel(path, weights, nodes, inputs, [o.name for o in graph.output])

"""ONNX models (Piper voices): the weights by initializer name and the graph's nodes, read with
the `onnx` package. The engine never runs the graph; it walks it to learn what the export did
(conv paddings and dilations, anonymised weight names, which input feeds which lookup).
"""
from dataclasses import dataclass, field
from pathlib import Path

from . import not_a_download


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


def _attribute(a, helper, numpy_helper):
    """An attribute's python value; a tensor (ConstantOfShape's value) as a numpy array."""
    value = helper.get_attribute_value(a)
    return numpy_helper.to_array(value) if a.type == a.TENSOR else value


def read(path):
    """Load an ONNX model file: initializers as numpy arrays, nodes with their attributes."""
    import onnx
    from onnx import helper, numpy_helper
    path = Path(path)
    if not path.is_file():
        raise OnnxError(f"{path}: no such file.")
    with open(path, "rb") as f:
        head = f.read(64)
    try:
        proto = onnx.load(str(path))
    except Exception:   # protobuf's DecodeError, or a truncated file's own error
        raise OnnxError(_diagnose(path, head)) from None
    graph = proto.graph
    if not graph.node:
        raise OnnxError(_diagnose(path, head))
    weights = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    nodes = [Node(n.op_type, n.name, list(n.input), list(n.output),
                  {a.name: _attribute(a, helper, numpy_helper) for a in n.attribute})
             for n in graph.node]
    inputs = [i.name for i in graph.input if i.name not in weights]
    return OnnxModel(path, weights, nodes, inputs, [o.name for o in graph.output])

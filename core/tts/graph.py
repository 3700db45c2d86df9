"""A small interpreter of an ONNX graph over numpy: the engine's way to run StyleTTS2 exports
(Kokoro, Kitten TTS), whose int8 initializers carry anonymised names. The graph is the
structure: weights are found by walking it, constant sub-graphs (weight norms, dequantised
embeddings, shape arithmetic on constants) are folded once at load, and each remaining node
runs an op from graph_ops.OPS, the hot ones (MatMulInteger, ConvInteger, the quantised LSTM)
on compiled integer kernels. Intermediate values are freed after their last reader.
"""
from dataclasses import dataclass

import numpy as np

from dasllama.formats.onnx import Node

from .graph_ops import OPS


class GraphError(ValueError):
    """The graph uses an op this interpreter does not have."""


@dataclass
class Step:
    op: str
    name: str
    inputs: list
    outputs: list
    attrs: dict
    frees: list          # values read for the last time here


def fuse_scaled_convs(nodes, keep):
    """ConvInteger > Add (its int32 bias) > Cast (to float) > Mul (by its scale), each value
    read once, as one ConvIntegerScaled node at the Mul's place: ORT's quantised conv as the
    exporter writes it, whose three element-wise passes over the int32 output become one
    (graph_ops.conv_integer_scaled: the same operations in the same order). keep: values
    that must stay (the graph's outputs)."""
    readers = {}
    for n in nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)

    def sole(value, op):
        found = readers.get(value, [])
        if len(found) == 1 and found[0].op == op and found[0].inputs[0] == value and value not in keep:
            return found[0]
        return None

    fused, dropped = {}, set()
    for n in nodes:
        if n.op != "ConvInteger":
            continue
        add = sole(n.outputs[0], "Add")
        cast = add and sole(add.outputs[0], "Cast")
        mul = cast and cast.attrs.get("to") == 1 and sole(cast.outputs[0], "Mul")
        if not mul:
            continue
        fused[id(mul)] = Node("ConvIntegerScaled", n.name, list(n.inputs) + [add.inputs[1], mul.inputs[1]],
                              list(mul.outputs), dict(n.attrs))
        dropped.update((id(n), id(add), id(cast)))
    return [fused.get(id(n), n) for n in nodes if id(n) not in dropped]


class Graph:
    """An ONNX model (formats.onnx.OnnxModel) ready to run: `run({input: array}) -> {output: array}`.
    fuse: run the quantised convs with their scaling as one op (fuse_scaled_convs)."""

    def __init__(self, model, fuse=True):
        missing = sorted({n.op for n in model.nodes} - set(OPS))
        if missing:
            raise GraphError(f"{model.path.name} uses ONNX ops this engine does not run: "
                             f"{', '.join(missing)}.")
        self.path, self.inputs, self.outputs = model.path, list(model.inputs), list(model.outputs)
        consts = dict(model.weights)
        live = []
        for n in model.nodes:
            if n.inputs and all(i == "" or i in consts for i in n.inputs) and n.op != "Shape":
                results = OPS[n.op]([consts[i] if i else None for i in n.inputs], n.attrs)
                consts.update((o, r) for o, r in zip(n.outputs, results) if o)
            else:
                live.append(n)
        if fuse:
            live = fuse_scaled_convs(live, set(self.outputs))
        self.consts = consts
        last = {}
        for k, n in enumerate(live):
            for i in n.inputs:
                if i and i not in consts:
                    last[i] = k
        keep = set(self.outputs)
        self.steps = [Step(n.op, n.name, n.inputs, n.outputs, n.attrs,
                           [i for i in dict.fromkeys(n.inputs) if last.get(i) == k and i not in keep])
                      for k, n in enumerate(live)]

    def run(self, feeds, trace=None):
        """Run the graph on feeds {input name: array}; trace(step, values) after each step."""
        with np.errstate(all="ignore"):     # the export's atan2 divides 0 / 0 and masks it with Where
            return self._run(dict(feeds), trace)

    def _run(self, values, trace):
        consts = self.consts
        for step in self.steps:
            args = [None if not i else values[i] if i in values else consts[i] for i in step.inputs]
            results = OPS[step.op](args, step.attrs)
            for o, r in zip(step.outputs, results):
                if o:
                    values[o] = r
            if trace is not None:
                trace(step, values)
            for i in step.frees:
                values.pop(i, None)
        return {o: np.asarray(values[o] if o in values else consts[o]) for o in self.outputs}

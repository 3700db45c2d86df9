"""A small interpreter of an ONNX graph over numpy: the engine's way to run StyleTTS2 exports
(Kokoro, Kitten TTS), whose int8 initializers carry anonymised names. The graph is the
structure: weights are found by walking it, constant sub-graphs (weight norms, dequantised
embeddings, shape arithmetic on constants) are folded once at load, and each remaining node
runs an op from graph_ops.OPS, the hot ones (MatMulInteger, ConvInteger, the quantised LSTM)
on compiled integer kernels. Intermediate values are freed after their last reader.
"""
from dataclasses import dataclass

import numpy as np

from .fuse import fuse_chains
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


class Graph:
    """An ONNX model (formats.onnx.OnnxModel) ready to run: `run({input: array}) -> {output: array}`.
    fuse: run the chains fuse.fuse_chains recognises (quantised convs with their scaling,
    AdaIN, Snake) as one op each."""

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
            live = fuse_chains(live, consts, set(self.outputs))
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

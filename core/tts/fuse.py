"""Chains of a StyleTTS2 graph's nodes run as one op each, recognised by their node pattern
once the constants are folded: each chain makes one pass over its (channels, frames) tensor
instead of a pass (and a temporary) per node. Every value inside a chain must be read by the
chain alone and not be a graph output; the fused node takes the last node's place and
outputs, so a trace still sees (and tests compare) the chain's result under its own name.
"""
from dasllama.formats.onnx import Node


class _Nodes:
    """Who reads and who makes each value of a node list; constants by name."""

    def __init__(self, nodes, consts, keep):
        self.consts, self.keep = consts, keep
        self.readers, self.maker = {}, {}
        for n in nodes:
            for i in dict.fromkeys(n.inputs):
                self.readers.setdefault(i, []).append(n)
            for o in n.outputs:
                self.maker[o] = n

    def sole(self, value, op):
        """The one node reading `value`, if it is an `op` and value is not a graph output."""
        found = self.readers.get(value, [])
        if len(found) == 1 and found[0].op == op and value not in self.keep:
            return found[0]
        return None

    def other(self, node, value):
        """The input of a binary node that is not `value` (None unless it has exactly one)."""
        rest = [i for i in node.inputs if i != value]
        return rest[0] if len(node.inputs) == 2 and len(rest) == 1 else None

    def scalar(self, name):
        c = self.consts.get(name)
        return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None

    def per_channel(self, name):
        """Whether `name` is a float32 constant of shape (1, C, 1)."""
        c = self.consts.get(name)
        return c is not None and c.dtype.name == "float32" and c.ndim == 3 and c.shape[0] == c.shape[2] == 1


def fuse_scaled_convs(nodes, graph):
    """ConvInteger > Add (its int32 bias) > Cast (to float) > Mul (by its scale) as one
    ConvIntegerScaled: ORT's quantised conv as the exporter writes it, whose three element-wise
    passes over the int32 output become one (graph_ops.conv_integer_scaled: the same operations
    in the same order)."""
    fused = {}
    for n in nodes:
        if n.op != "ConvInteger":
            continue
        add = graph.sole(n.outputs[0], "Add")
        add = add if add and add.inputs[0] == n.outputs[0] else None
        cast = add and graph.sole(add.outputs[0], "Cast")
        mul = cast and cast.attrs.get("to") == 1 and graph.sole(cast.outputs[0], "Mul")
        if mul and mul.inputs[0] == cast.outputs[0]:
            fused[id(mul)] = (Node("ConvIntegerScaled", n.name, list(n.inputs) + [add.inputs[1], mul.inputs[1]],
                                   list(mul.outputs), dict(n.attrs)), [n, add, cast])
    return fused


def fuse_residuals(nodes, graph):
    """A ConvIntegerScaled whose output only an Add with a computed value reads (a resblock's
    skip connection, x + conv(...)), with that value as its 7th input: the sum made as the
    conv's output is written."""
    fused = {}
    for n in nodes:
        add = n.op == "ConvIntegerScaled" and len(n.inputs) == 6 and graph.sole(n.outputs[0], "Add")
        residual = add and graph.other(add, n.outputs[0])
        if residual and residual not in graph.consts:
            fused[id(add)] = (Node(n.op, n.name, list(n.inputs) + [residual], list(add.outputs), dict(n.attrs)), [n])
    return fused


def fuse_snakes(nodes, graph):
    """Snake, x + inv_alpha * sin(alpha * x) ** 2: Mul(alpha, x) > Sin > Pow 2 >
    Mul(inv_alpha) > Add(x), alpha and inv_alpha constants (1, C, 1)."""
    fused = {}
    for sin in nodes:
        if sin.op != "Sin" or sin.inputs[0] in graph.keep:
            continue
        scaled = graph.maker.get(sin.inputs[0])
        if scaled is None or scaled.op != "Mul" or graph.sole(sin.inputs[0], "Sin") is not sin:
            continue
        alpha = next((i for i in scaled.inputs if graph.per_channel(i)), None)
        x = alpha and graph.other(scaled, alpha)
        square = x and graph.sole(sin.outputs[0], "Pow")
        if not square or square.inputs[0] != sin.outputs[0] or graph.scalar(square.inputs[1]) != 2.0:
            continue
        mul = graph.sole(square.outputs[0], "Mul")
        inv_alpha = mul and graph.other(mul, square.outputs[0])
        add = inv_alpha and graph.per_channel(inv_alpha) and graph.sole(mul.outputs[0], "Add")
        if add and graph.other(add, mul.outputs[0]) == x:
            fused[id(add)] = (Node("Snake", add.name, [x, alpha, inv_alpha], list(add.outputs), {}),
                              [scaled, sin, square, mul])
    return fused


def _mean_over_frames(graph, node, x):
    """Whether `node` is ReduceMean(x) over the last of three axes, dims kept."""
    if node is None or node.op != "ReduceMean" or node.inputs[0] != x or not node.attrs.get("keepdims", 1):
        return False
    axes = graph.consts.get(node.inputs[1]) if len(node.inputs) > 1 else None
    axes = list(axes.reshape(-1)) if axes is not None else node.attrs.get("axes")
    return axes is not None and len(axes) == 1 and int(axes[0]) in (2, -1)


def fuse_adains(nodes, graph):
    """AdaIN, gamma1 * ((x - mean) / sqrt(var + eps)) + beta over frames: ReduceMean(x) >
    Sub(x, mean) > Mul(d, d) > ReduceMean > Add eps > Sqrt > Div(d, std) > Mul(gamma1) >
    Add(beta), gamma1 and beta per channel (the style's, computed in the graph)."""
    fused = {}
    for mean in nodes:
        x = mean.inputs[0]
        if not _mean_over_frames(graph, mean, x):
            continue
        sub = graph.sole(mean.outputs[0], "Sub")
        if not sub or sub.inputs != [x, mean.outputs[0]] or sub.outputs[0] in graph.keep:
            continue
        d = sub.outputs[0]
        readers = graph.readers.get(d, [])
        square = next((n for n in readers if n.op == "Mul" and n.inputs == [d, d]), None)
        div = next((n for n in readers if n.op == "Div" and n.inputs[0] == d), None)
        if len(readers) != 2 or not square or not div:
            continue
        var = graph.sole(square.outputs[0], "ReduceMean")
        if not _mean_over_frames(graph, var, square.outputs[0]):
            continue
        plus = graph.sole(var.outputs[0], "Add")
        eps = plus and graph.other(plus, var.outputs[0])
        sqrt = eps and graph.scalar(eps) is not None and graph.sole(plus.outputs[0], "Sqrt")
        if not sqrt or graph.sole(sqrt.outputs[0], "Div") is not div or div.inputs[1] != sqrt.outputs[0]:
            continue
        scale = graph.sole(div.outputs[0], "Mul")
        gamma1 = scale and graph.other(scale, div.outputs[0])
        shift = gamma1 and graph.sole(scale.outputs[0], "Add")
        beta = shift and graph.other(shift, scale.outputs[0])
        if beta:
            fused[id(shift)] = (Node("AdaIN", shift.name, [x, gamma1, beta, eps], list(shift.outputs), {}),
                                [mean, sub, square, var, plus, sqrt, div, scale])
    return fused


def _apply(nodes, fused):
    dropped = {id(n) for _, parts in fused.values() for n in parts}
    return [fused[id(n)][0] if id(n) in fused else n for n in nodes if id(n) not in dropped]


def fuse_adain_snakes(nodes, graph):
    """An AdaIN whose output only a Snake reads, as one AdaINSnake (the generator's
    resblocks and noise blocks: normalise, scale, shift and Snake in one pass)."""
    fused = {}
    for n in nodes:
        snake = n.op == "AdaIN" and graph.sole(n.outputs[0], "Snake")
        if snake and snake.inputs[0] == n.outputs[0]:
            fused[id(snake)] = (Node("AdaINSnake", snake.name, list(n.inputs) + snake.inputs[1:],
                                     list(snake.outputs), {}), [n])
    return fused


def fuse_chains(nodes, consts, keep):
    """The node list with each chain above as one node. keep: the graph's outputs."""
    for fuser in (fuse_scaled_convs, fuse_residuals, fuse_snakes, fuse_adains, fuse_adain_snakes):
        nodes = _apply(nodes, fuser(nodes, _Nodes(nodes, consts, keep)))
    return nodes

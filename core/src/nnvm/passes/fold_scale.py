"""fold_scale_axis: per-channel scales and shifts after a conv2d or dense folded into its weights.

After ``simplify_inference`` a convolution followed by batch norm reads ``conv2d(x, W) * s + b`` with
per-channel constants ``s`` and ``b``. Scaling the output channel ``o`` of a convolution is scaling
the weight slice ``W[o]`` (the O axis is axis 0 for grouped and depthwise weights too), and the
shift is a bias, so the pair becomes ``bias_add(conv2d(x, W * s), b)``::

    conv2d(x, W) -> multiply(., s[C,1,1]) -> add(., b[C,1,1])
        => conv2d(x, W*s) -> bias_add(., b)
    conv2d(x, W) -> bias_add(., beta) -> multiply(., s)
        => conv2d(x, W*s) -> bias_add(., beta*s)
    bias_add(y, b1) -> add(., b2[C,1,1])
        => bias_add(y, b1 + b2)

The same holds for dense, whose channel axis is the last. A rewrite happens only when the value it
removes has a single reader (and is not a graph output) and the constants are weights shaped to vary
along the channel axis alone, so no other reader sees a changed value.
"""

from __future__ import annotations

import numpy as np

from nnvm.graph.ir import Graph, Node, TensorType
from nnvm.ops.registry import get_op

ANCHORS = {"conv2d": 1, "dense": 1}  # op -> channel axis of its output


def _channel_vector(arr: np.ndarray, shape: tuple, axis: int) -> np.ndarray | None:
    """``arr`` as a vector along ``axis`` of ``shape`` if it broadcasts to vary along that axis alone."""
    if arr.ndim > len(shape):
        return None
    padded = (1,) * (len(shape) - arr.ndim) + tuple(arr.shape)
    if any(d != 1 for k, d in enumerate(padded) if k != axis) or padded[axis] not in (1, shape[axis]):
        return None
    return np.broadcast_to(arr.reshape(-1), (shape[axis],))


class _Folder:
    """One forward walk over the nodes; rewritten nodes replace their producers in place."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.params = dict(graph.params)
        self.types = dict(graph.types)
        self.readers: dict = {}
        for node in graph.nodes:
            for v in node.inputs:
                if v:
                    self.readers[v] = self.readers.get(v, 0) + 1
        for v in graph.outputs:
            self.readers[v] = self.readers.get(v, 0) + 1
        self.out: list = []  # the new node list, in order
        self.at: dict = {}  # value -> index in ``out`` of its producer
        self.taken: set = set()

    def new_param(self, hint: str, value: np.ndarray) -> str:
        name, k = hint, 0
        while name in self.params or name in self.types or name in self.taken:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        self.params[name] = np.ascontiguousarray(value)
        self.types[name] = TensorType(value.shape, str(value.dtype))
        return name

    def put(self, index: int | None, node: Node) -> None:
        if index is None:
            index = len(self.out)
            self.out.append(node)
        else:
            self.out[index] = node
        for o in node.outputs:
            self.at[o] = index

    def producer(self, v: str):
        """(index, node) producing ``v`` if ``v`` is computed and read only once, else (None, None)."""
        k = self.at.get(v)
        if k is None or self.readers.get(v, 0) != 1:
            return None, None
        return k, self.out[k]

    def anchor(self, v: str):
        """(index, node, channel axis) when ``v`` is a single-reader conv2d/dense output on weights."""
        k, node = self.producer(v)
        if node is None or node.op not in ANCHORS or node.inputs[1] not in self.params:
            return None
        if node.op == "conv2d" and len(self.types[v].shape) != 4:
            return None
        return k, node, ANCHORS[node.op]

    def scaled_anchor(self, node: Node, scale: np.ndarray, out_name: str) -> Node:
        w = self.params[node.inputs[1]]
        s = scale.astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
        w2 = self.new_param(f"{node.inputs[1]}_folded", (w.astype(np.float64) * s).astype(w.dtype))
        return node.replace(inputs=(node.inputs[0], w2), outputs=(out_name,))

    def bias_axis(self, node: Node) -> int:
        attrs = get_op("bias_add").normalize_attrs(dict(node.attrs), node.name)
        return attrs["axis"] % len(self.types[node.outputs[0]].shape)

    def visit(self, node: Node) -> None:
        if node.op in ("multiply", "add") and len(node.inputs) == 2 and self.fold(node):
            return
        self.put(None, node)

    def fold(self, node: Node) -> bool:
        a, b = node.inputs
        x, c = (a, b) if b in self.params and a not in self.params else (b, a)
        if c not in self.params or x in self.params or not x:
            return False
        out = node.outputs[0]
        ty = self.types.get(x)
        if ty is None or self.types.get(out) != ty or not np.issubdtype(np.dtype(ty.dtype), np.floating):
            return False
        const = self.params[c]
        k, prod = self.producer(x)
        if prod is None:
            return False
        anchor = self.anchor(x)
        if anchor is not None:
            _, anode, axis = anchor
            vec = _channel_vector(const, ty.shape, axis)
            if vec is None:
                return False
            if node.op == "multiply":
                self.put(k, self.scaled_anchor(anode, vec, out))
                del self.types[x]
            else:  # a bias_add, so that later per-channel adds merge into it
                bias = self.new_param(f"{c}_bias", np.array(vec, dtype=ty.dtype))
                self.put(None, Node("bias_add", node.name, (x, bias), (out,), {"axis": axis}))
            return True
        if prod.op == "bias_add" and prod.inputs[1] in self.params:
            axis = self.bias_axis(prod)
            vec = _channel_vector(const, ty.shape, axis)
            if vec is None:
                return False
            beta = self.params[prod.inputs[1]].astype(np.float64)
            if node.op == "add":
                merged = self.new_param(f"{prod.inputs[1]}_merged", (beta + vec).astype(ty.dtype))
                self.put(k, prod.replace(inputs=(prod.inputs[0], merged), outputs=(out,)))
                del self.types[x]
                return True
            inner = self.anchor(prod.inputs[0])
            if inner is None or inner[2] != axis:
                return False
            ak, anode, _ = inner
            self.put(ak, self.scaled_anchor(anode, vec, anode.outputs[0]))
            scaled = self.new_param(f"{prod.inputs[1]}_scaled", (beta * vec).astype(ty.dtype))
            self.put(k, prod.replace(inputs=(prod.inputs[0], scaled), outputs=(out,)))
            del self.types[x]
            return True
        return False

    def result(self) -> Graph:
        nodes = tuple(self.out)
        used = {v for n in nodes for v in n.inputs} | set(self.graph.outputs)
        read_before = {v for n in self.graph.nodes for v in n.inputs}
        # Weights that only the rewritten nodes read are dropped here, not left to dead-code removal.
        unread = set(self.graph.params) - read_before
        params = {k: v for k, v in self.params.items() if k in used or k in unread}
        types = {k: v for k, v in self.types.items() if k not in self.params or k in params}
        return self.graph.replace(nodes=nodes, params=params, types=types)


def fold_scale_axis(graph: Graph, ctx=None) -> Graph:
    """Per-channel multiply/add after conv2d or dense folded into its weights and one bias_add."""
    folder = _Folder(graph)
    for node in graph.nodes:
        folder.visit(node)
    return folder.result()

"""Building graphs node by node with types known at every step: what every frontend uses.

Each ``node()`` call checks attributes and infers output types at once, so a frontend can read any
value's shape while converting (``b.type(v)``), and an error names the node being converted. Nodes
whose inputs are all constants are evaluated on the spot (when the operator has a numpy evaluation)
and become constants, which turns shape computations such as ONNX's Shape -> Gather -> Concat ->
Reshape into plain numbers.

Errors about a node are ``NodeError``s carrying the node, the operator and the reason apart, so a
frontend names its own node in front of the reason (see ``nnvm.frontend.convert``).
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error, NodeError
from nnvm.graph.evaluate import evaluate_node
from nnvm.graph.ir import Graph, Node, TensorType
from nnvm.limits import check_allocation, check_type
from nnvm.plugins import OpRegistry, op_registry


class GraphBuilder:
    """A graph under construction. ``ops``: the operators nodes may use (default: those the loaded
    plugins register, looked up when the first node is added)."""

    def __init__(self, name: str = "model", fold_constants: bool = True, ops: OpRegistry | None = None):
        self.name = name
        self._ops = ops
        self.fold_constants = fold_constants
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.params: dict[str, np.ndarray] = {}
        self.types: dict[str, TensorType] = {}
        self._names: set[str] = set()
        self._counter = 0

    # -- names --------------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A value or node name not used yet, derived from ``hint``."""
        base = hint or "v"
        name = base
        while name in self._names:
            self._counter += 1
            name = f"{base}_{self._counter}"
        self._names.add(name)
        return name

    # -- values -------------------------------------------------------------------------------------
    def input(self, name: str, shape, dtype: str = "float32") -> str:
        if name in self._names:
            raise Error(f"input {name!r} is defined twice")
        self._names.add(name)
        self.inputs.append(name)
        self.types[name] = TensorType(tuple(shape), dtype)
        check_type(self.types[name], f"input {name!r}")
        return name

    def param(self, name: str | None, value) -> str:
        """A constant (weight) value; ``name=None`` picks a fresh name."""
        arr = np.asarray(value, order="C")
        if name is None or name in self._names:
            name = self.fresh(name or "const")
        else:
            self._names.add(name)
        self.params[name] = arr
        self.types[name] = TensorType(arr.shape, str(arr.dtype))
        return name

    def const(self, value, dtype: str | None = None, hint: str = "const") -> str:
        arr = np.asarray(value, dtype=dtype)
        return self.param(self.fresh(hint), arr)

    def type(self, value: str) -> TensorType:
        try:
            return self.types[value]
        except KeyError:
            raise Error(f"value {value!r} is not defined") from None

    def shape(self, value: str) -> tuple:
        return self.type(value).shape

    def dtype(self, value: str) -> str:
        return self.type(value).dtype

    def const_value(self, value: str):
        """The numpy value of a constant, or None if ``value`` is computed at run time."""
        return self.params.get(value)

    # -- nodes --------------------------------------------------------------------------------------
    def node(self, op: str, inputs, attrs: dict | None = None, name: str | None = None,
             outputs=None) -> list[str]:
        """Add one operator node; returns its output value names (types already inferred)."""
        try:
            if self._ops is None:
                self._ops = op_registry()
            opdef = self._ops.get(op)
        except Error:
            raise NodeError(name or op, op, "unknown operator; no operator set provides it") from None
        node_name = self.fresh(name or op)
        attrs = dict(attrs or {})
        inputs = [v if v else "" for v in inputs]
        for v in inputs:
            if v and v not in self.types:
                raise NodeError(node_name, op, f"input {v!r} is not defined")
        n_out = opdef.num_outputs if opdef.num_outputs > 0 else len(outputs or [])
        if outputs is None:
            outputs = [node_name if n_out == 1 else f"{node_name}:{k}" for k in range(n_out)]
        outputs = [o if o not in self._names or o == node_name else self.fresh(o) for o in outputs]
        for o in outputs:
            self._names.add(o)
        node = Node(op, node_name, tuple(inputs), tuple(outputs), attrs)
        opdef.check_attrs(node)
        full = opdef.normalize_attrs(attrs, node_name)
        in_types = [self.types[v] if v else None for v in inputs]
        try:
            out_types = opdef.infer_type(in_types, full)
        except NodeError:
            raise
        except Error as exc:
            raise _node_error(exc, node_name, op) from None
        for ty in out_types:
            check_type(ty, f"node {node_name} ({op})")
        if self.fold_constants and opdef.evaluate is not None and inputs and \
                all((not v) or v in self.params for v in inputs) and not any(ty.symbolic for ty in out_types):
            check_allocation(sum(ty.nbytes for ty in out_types),
                             f"node {node_name} ({op}), folded to a constant,")
            values = evaluate_node(node, [self.params[v] if v else None for v in inputs], self._ops)
            for o, val, ty in zip(outputs, values, out_types):
                self.params[o] = np.asarray(val.astype(ty.dtype, copy=False).reshape(ty.shape), order="C")
                self.types[o] = ty
            return list(outputs)
        for o, ty in zip(outputs, out_types):
            self.types[o] = ty
        self.nodes.append(node)
        return list(outputs)

    def node1(self, op: str, inputs, attrs: dict | None = None, name: str | None = None) -> str:
        """``node`` for single-output operators."""
        return self.node(op, inputs, attrs, name)[0]

    def output(self, value: str) -> None:
        if value not in self.types:
            raise Error(f"output {value!r} is not defined")
        self.outputs.append(value)

    def build(self) -> Graph:
        """The finished graph, with only the weights it still uses."""
        used = {v for n in self.nodes for v in n.inputs} | set(self.outputs)
        params = {k: v for k, v in self.params.items() if k in used}
        types = {k: v for k, v in self.types.items()
                 if k in used or k in self.inputs or any(k in n.outputs for n in self.nodes)}
        return Graph(self.nodes, self.inputs, self.outputs, params, types, self.name)


def _node_error(exc: Error, node: str, op: str) -> Error:
    """``exc`` as an error about ``node``: a ``NodeError``, or, for a more specific class that callers
    tell apart, the same exception with the node in front and ``node``/``op``/``reason`` attached."""
    if type(exc) is Error:
        return NodeError(node, op, str(exc))
    reason = str(exc)
    exc.node, exc.op, exc.reason = node, op, reason
    exc.args = (f"node {node} ({op}): {reason}",)
    return exc

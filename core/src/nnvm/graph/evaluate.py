"""Run a graph with each operator's numpy ``evaluate``: used by constant folding and shape probing."""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error
from nnvm.graph.ir import Graph
from nnvm.plugins import OpRegistry, op_registry


def evaluate_node(node, values: list, ops: OpRegistry | None = None) -> list:
    """Outputs of one node on numpy inputs (``None`` for an omitted optional input). ``ops``: the
    operators (default: those the loaded plugins register)."""
    opdef = (op_registry() if ops is None else ops).get(node.op, node.name)
    if opdef.evaluate is None:
        raise Error(f"node {node.name} ({node.op}): the operator has no numpy evaluation")
    attrs = opdef.normalize_attrs(dict(node.attrs), node.name)
    outs = opdef.evaluate(values, attrs)
    return [np.asarray(o) for o in outs]


def evaluate_graph(graph: Graph, inputs: dict) -> list:
    """All graph outputs for the given inputs (by name), computed node by node in numpy."""
    env = dict(graph.params)
    for name in graph.inputs:
        if name not in inputs:
            raise Error(f"evaluate: missing input {name!r}")
        env[name] = np.asarray(inputs[name])
    for node in graph.nodes:
        outs = evaluate_node(node, [env[v] if v else None for v in node.inputs])
        env.update(zip(node.outputs, outs))
    return [env[o] for o in graph.outputs]

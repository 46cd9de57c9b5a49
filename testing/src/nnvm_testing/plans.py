"""Running a memory plan the way the runtime does, in numpy: for the planner's tests."""

from __future__ import annotations

import numpy as np

from nnvm.graph.evaluate import evaluate_node


def run_plan(graph, calls, plan, inputs: dict) -> list:
    """Execute the plan the way the runtime does: every activation read from and written to the arena."""
    arena = np.zeros(max(plan["arena_bytes"], 1), np.uint8)
    where = plan["placements"]

    def view(v):
        ty = graph.type_of(v)
        return np.frombuffer(arena, ty.dtype, ty.size, where[v][0]).reshape(ty.shape)

    for v, x in inputs.items():
        view(v)[...] = x
    by_name = {n.name: n for n in graph.nodes}
    for call in calls:
        local = {}  # values made and used inside the kernel
        for name in call["group"]:
            node = by_name[name]
            ins = [None if not v else graph.params[v] if v in graph.params else local[v] if v in local
                   else view(v).copy() for v in node.inputs]
            local.update(zip(node.outputs, evaluate_node(node, ins)))
        for v in call["args"]:
            if v in local:
                view(v)[...] = local[v]
    return [view(v).copy() for v in graph.outputs]

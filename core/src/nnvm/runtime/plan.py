"""Memory planning and the execution plan: what the runtime needs to run a compiled graph.

Every activation (graph inputs and kernel outputs) lives in one arena. A value is live from the call
that writes it to the last call that reads it (graph outputs to the end). Values are placed largest
first at the lowest offset that does not overlap any already placed value whose lifetime overlaps, a
greedy that lands close to the lower bound (the most bytes ever live at once). A kernel's inputs and
outputs are live at the same call, so they never share memory, which keeps ``noalias`` code correct.
"""

from __future__ import annotations

from nnvm.graph.ir import Graph

ALIGN = 64
PLAN_VERSION = 1


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(sizes: dict, lifetimes: dict) -> tuple[dict, int]:
    """Offsets for values with byte ``sizes`` and inclusive ``lifetimes`` (first, last step)."""
    placed: list = []  # (offset, size, first, last)
    offsets: dict = {}
    for v in sorted(sizes, key=lambda v: (-sizes[v], lifetimes[v][0])):
        size = _aligned(max(sizes[v], 1))
        first, last = lifetimes[v]
        conflicts = sorted((o, s) for o, s, f, l in placed if not (l < first or last < f))
        offset = 0
        for o, s in conflicts:
            if offset + size <= o:
                break
            offset = max(offset, o + s)
        offsets[v] = offset
        placed.append((offset, size, first, last))
    arena = max((o + s for o, s, _, _ in placed), default=0)
    return offsets, arena


def make_plan(graph: Graph, calls: list) -> dict:
    """The JSON-able plan: inputs, outputs, kernel calls with argument locations, arena size."""
    steps = len(calls)
    lifetimes: dict = {}
    for v in graph.inputs:
        lifetimes[v] = [0, 0]
    for k, call in enumerate(calls):
        for v in call["args"]:
            if v in graph.params:
                continue
            if v not in lifetimes:
                lifetimes[v] = [k, k]
            lifetimes[v][1] = max(lifetimes[v][1], k)
    for v in graph.outputs:
        if v in lifetimes:
            lifetimes[v][1] = steps
    sizes = {v: graph.type_of(v).nbytes for v in lifetimes}
    offsets, arena = plan_memory(sizes, {v: tuple(t) for v, t in lifetimes.items()})
    lower_bound = 0
    for step in range(steps + 1):
        live = sum(_aligned(sizes[v]) for v, (f, l) in lifetimes.items() if f <= step <= l)
        lower_bound = max(lower_bound, live)

    def ref(v):
        if v in graph.params:
            return {"param": v}
        return {"arena": offsets[v], "nbytes": sizes[v]}

    def desc(v):
        ty = graph.type_of(v)
        return {"name": v, "shape": list(ty.shape), "dtype": ty.dtype, "ref": ref(v)}

    return {
        "version": PLAN_VERSION,
        "inputs": [desc(v) for v in graph.inputs],
        "outputs": [desc(v) for v in graph.outputs],
        "calls": [{"kernel": c["kernel"], "group": c["group"], "args": [ref(v) for v in c["args"]]}
                  for c in calls],
        "arena_bytes": arena,
        # Without fusion or planning every node output and input would have its own memory.
        "naive_bytes": sum(_aligned(graph.type_of(v).nbytes)
                           for v in list(graph.inputs) + [o for n in graph.nodes for o in n.outputs]),
        "lower_bound_bytes": lower_bound,
        "placements": {v: [offsets[v], sizes[v], lifetimes[v][0], lifetimes[v][1]] for v in offsets},
    }

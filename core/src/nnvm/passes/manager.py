"""The pass manager: named graph passes with an opt level and requirements, timed, optionally dumped.

A pass is a function ``Graph -> Graph`` that never mutates its input. It runs when the compile's opt
level reaches the pass's level (or when enabled by name) and is not disabled by name. ``requires``
names passes that must have run before it (shape inference, typically); they are run first if needed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from nnvm.errors import Error
from nnvm.graph.ir import Graph
from nnvm.plugins import passes as registered


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable  # (graph, ctx) -> graph
    opt_level: int = 0
    requires: tuple = ()
    doc: str = ""


@dataclass
class PassContext:
    """Settings of one compilation that passes may read, and what the manager measured."""

    opt_level: int = 3
    target: object = None
    disabled: frozenset = frozenset()
    enabled: frozenset = frozenset()
    dump_dir: str | None = None
    options: object = None  # the compile's ``nnvm.Options`` (None outside nnvm.compile)
    timings: dict = field(default_factory=dict)
    done: list = field(default_factory=list)

    def wants(self, p: Pass) -> bool:
        if p.name in self.disabled:
            return False
        return p.name in self.enabled or p.opt_level <= self.opt_level


# The order passes run in when they are selected. Plugins' passes run before fusion (the last step,
# which partitions the final graph into kernels), in the order they were registered.
DEFAULT_PIPELINE = (
    "infer_types",
    "simplify_inference",
    "fold_scale_axis",
    "combine_parallel_matmuls",
    "alter_op_layout",
    "fold_constants",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "fuse_ops",
)


def run_pipeline(graph: Graph, ctx: PassContext, pipeline=None) -> Graph:
    """Run the selected passes in pipeline order, timing each and dumping the graph after each."""
    table = {name: p for name, (_, p) in registered().items()}
    order = list(pipeline or DEFAULT_PIPELINE)
    extra = [n for n in table if n not in order]
    at = order.index("fuse_ops") if "fuse_ops" in order else len(order)
    order[at:at] = extra
    for name in ctx.enabled | ctx.disabled:
        if name not in table:
            raise Error(f"unknown pass {name!r}; known passes: {', '.join(sorted(table))}")
    if ctx.dump_dir:
        os.makedirs(ctx.dump_dir, exist_ok=True)
        _dump(ctx, "00_input", graph)
    for name in order:
        p = table.get(name)
        if p is None or not ctx.wants(p):
            continue
        graph = _run_one(graph, ctx, p, table)
    return graph


def _run_one(graph: Graph, ctx: PassContext, p: Pass, table: dict) -> Graph:
    for req in p.requires:
        if req not in ctx.done:
            if req not in table:
                raise Error(f"pass {p.name} requires pass {req!r}, which is not installed")
            graph = _run_one(graph, ctx, table[req], table)
    start = time.perf_counter()
    graph = p.run(graph, ctx)
    ctx.timings[p.name] = ctx.timings.get(p.name, 0.0) + time.perf_counter() - start
    ctx.done.append(p.name)
    if ctx.dump_dir:
        _dump(ctx, f"{len(ctx.done):02d}_{p.name}", graph)
    return graph


def _dump(ctx: PassContext, stem: str, graph: Graph) -> None:
    path = os.path.join(ctx.dump_dir, f"{stem}.txt")
    with open(path, "w") as f:
        f.write(graph.text())
        if graph.groups:
            f.write("\n\nfused groups:\n")
            for k, members in enumerate(graph.groups):
                f.write(f"  group {k}: {', '.join(members)}\n")

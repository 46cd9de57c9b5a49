"""Tuning tasks: one per distinct workload of a model that a backend offers a template for.

A task must be rebuilt inside the measuring child process (templates hold closures over tensor
expressions, which do not pickle), so it carries a recipe, not the template itself:

- a fused group of a model: the group's nodes as a small stand-alone graph (JSON, no weights) that the
  child turns back into the same ``GroupCompute`` and asks the backends for the template again;
- a factory: ``"module:function"`` and keyword arguments, the function returning ``(template, args)``
  (for templates written by hand, as in ``nnvm_testing.autotune_templates``).

Groups with the same workload key compute the same function, so they share one task, whose ``weight``
counts how often the model runs it (the tuner reports, and may spend, by weight).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import json
import types
from dataclasses import dataclass, field

from nnvm.autotune.template import space_size
from nnvm.errors import Error
from nnvm.graph.ir import Graph
from nnvm.lowering import group_compute, group_flops, optimized_graph, schedule_template, workload_key
from nnvm.plugins import BUILTIN_PLUGINS, manager
from nnvm.target import parse_target


@dataclass
class Task:
    """What the tuner searches: a template's space for one workload on one target."""

    template: str  # the template's name, as written in logs
    workload: str  # the workload key (``nnvm.lowering.workload_key``), as the compiler computes it
    target: str
    space: dict
    fallback: dict
    flops: float = 0.0
    weight: int = 1
    label: str = ""
    recipe: tuple = ()  # ("group", graph json) or ("factory", "module:function", kwargs)
    extra_plugins: tuple = field(default=())  # plugin modules registered by hand in the parent
    revision: int = 1  # the template's (``ScheduleTemplate.revision``), written into the log

    def size(self) -> int:
        """Number of configs in the space."""
        return space_size(self.space)

    def instantiate(self):
        """``(template, args)``: the template and the tensors its kernels take, in parameter order."""
        if self.recipe and self.recipe[0] == "factory":
            _, where, kwargs = self.recipe
            module, _, name = where.partition(":")
            template, args = getattr(importlib.import_module(module), name)(**kwargs)
            return template, list(args)
        if self.recipe and self.recipe[0] == "group":
            graph = Graph.from_json(self.recipe[1])
            group = group_compute(graph, 0, list(graph.nodes))
            template = schedule_template(parse_target(self.target), group)
            if template is None:
                raise Error(f"task {self.label}: no installed backend offers template {self.template} "
                            f"for target {self.target} any more")
            return template, [t for _, t in group.inputs] + list(group.outputs)
        raise Error(f"task {self.label}: unknown recipe {self.recipe[:1]!r}")


def task_from_factory(where: str, target: str = "llvm", **kwargs) -> Task:
    """A task for a hand-written template: ``where`` is ``"module:function"``; the function, called with
    ``kwargs``, returns ``(template, args)``. The workload key is the factory and its arguments."""
    module, _, name = where.partition(":")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        raise Error(f"template factory {where!r} cannot be imported") from None
    template, _ = factory(**kwargs)
    key = json.dumps([where, kwargs], sort_keys=True, default=str)
    label = f"{name}({', '.join(f'{k}={v}' for k, v in sorted(kwargs.items()))})"
    return Task(template.name, key, target, dict(template.space), dict(template.fallback),
                float(template.flops), 1, label, ("factory", where, kwargs), hand_registered_plugins(),
                template.revision)


def hand_registered_plugins() -> tuple:
    """Module names of plugins registered on the manager by hand (not through entry points), so the
    measuring child, which loads the installed plugins itself, can register them too."""

    pm = manager()
    from_entry_points = {ep.name for ep in md.entry_points(group="nnvm")} | set(BUILTIN_PLUGINS)
    out = []
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin)
        if name not in from_entry_points and isinstance(plugin, types.ModuleType):
            out.append(plugin.__name__)
    return tuple(sorted(out))


def register_plugins(modules) -> None:
    """Register plugin modules by name on this process's manager (the child side of the above)."""
    pm = manager()
    for name in modules:
        module = importlib.import_module(name)
        if not pm.is_registered(module):
            pm.register(module, name=name)


def group_label(graph, members: list) -> str:
    """A short readable name: the ops, and the shapes of the heavy op's data and weight
    (``conv2d+add+relu 1x64x56x56 * 64x64x3x3``)."""
    heavy = [n for n in members if n.op in ("conv2d", "dense", "matmul", "batch_matmul")] or members
    node = heavy[0]
    shapes = ["x".join(str(d) for d in graph.type_of(v).shape) for v in node.inputs[:2] if v]
    ops = "+".join(n.op for n in members)
    return f"{ops} {' * '.join(shapes)}".strip()


def group_subgraph(graph, group):
    """The group (a ``GroupCompute``) as a graph of its own: outside values become inputs (types kept,
    weights dropped)."""
    members = group.nodes
    inputs = [v for v, _ in group.inputs]
    output_values = group.output_values
    used = set(inputs) | {o for n in members for o in n.outputs}
    types = {v: t for v, t in graph.types.items() if v in used}
    return Graph(tuple(members), tuple(inputs), tuple(output_values), {}, types, "task")


def extract_tasks(model, target="llvm", shapes: dict | None = None, opt_level: int = 3, **kwargs) -> list:
    """The model's tuning tasks: its graph through the compile pipeline up to fused groups, then one
    task per distinct workload that a backend offers a template for, heaviest (flops x weight) first."""
    graph, tgt, _, _ = optimized_graph(model, target, shapes, opt_level, **kwargs)
    by_name = {n.name: n for n in graph.nodes}
    consumers = graph.consumers()
    tasks: dict = {}
    extra = hand_registered_plugins()
    for k, names in enumerate(graph.groups):
        members = [by_name[n] for n in names]
        key = workload_key(graph, members)
        if key in tasks:
            if tasks[key] is not None:
                tasks[key].weight += 1
            continue
        group = group_compute(graph, k, members, consumers)
        template = schedule_template(tgt, group)
        if template is None:
            tasks[key] = None
            continue
        sub = group_subgraph(graph, group)
        flops = float(template.flops) or float(group_flops(graph, list(names)))
        tasks[key] = Task(template.name, key, str(tgt), dict(template.space), dict(template.fallback), flops,
                          1, group_label(graph, members), ("group", sub.to_json(include_params=False)), extra,
                          template.revision)
    found = [t for t in tasks.values() if t is not None]
    found.sort(key=lambda t: -t.flops * t.weight)
    return found

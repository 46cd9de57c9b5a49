"""A model up to each fused group's schedule: what the compiler and the tuner both do, written once.

``nnvm.compile`` (``compiler.py``) and ``nnvm tune`` (``autotune/task.py``) must see the same groups with
the same keys, or tuned configs would never apply; so both call these:

- ``import_model`` and ``optimized_graph``: the model imported, checked and through the graph passes, up
  to fused groups;
- ``group_values`` / ``group_calls``: a group's kernel parameters, and one kernel call per group;
- ``group_compute``: a group as tensor expressions (``GroupCompute``, what schedule hooks receive);
- ``workload_key``: two groups with the same key compute the same function (one kernel, one tuning task);
- ``schedule_template`` / ``schedule_group``: the backends' template for a group, else their schedule,
  else the generic one;
- ``group_flops``: the arithmetic a group does (GFLOP/s in ``nnvm bench`` and tuning logs).
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field

import numpy as np

from nnvm import te
from nnvm.errors import Error, with_context
from nnvm.frontend import find_frontend
from nnvm.generic_schedule import generic_schedule
from nnvm.graph.dims import Dim, from_extent
from nnvm.graph.ir import Graph, TensorType
from nnvm.ops.registry import OpPattern, get_op
from nnvm.ops.transform import is_view
from nnvm.passes.manager import PassContext, run_pipeline
from nnvm.plugins import hook
from nnvm.target import parse_target


def import_model(model, shapes: dict | None = None, **kwargs) -> Graph:
    """A validated graph from any supported model (path, framework object, or Graph)."""
    if isinstance(model, Graph):
        graph = model
        if shapes:
            types = dict(graph.types)
            for k, shp in shapes.items():
                if k not in graph.inputs:
                    raise Error(f"shapes= names {k!r}, which is not an input of the graph "
                                f"(inputs: {', '.join(graph.inputs)})")
                types[k] = TensorType(tuple(shp), types[k].dtype if k in types else "float32")
            graph = graph.replace(types=types)
        graph.validate()
        return graph
    frontend = find_frontend(model)
    try:
        graph = frontend.load(model, shapes=shapes, **kwargs)
        graph.validate()
    except Error as exc:  # a converter's error names the node; a user with many files needs the file too
        path = os.fspath(model) if isinstance(model, str | os.PathLike) else None
        if path is None or path in str(exc):
            raise
        raise with_context(exc, path) from None
    return graph


@dataclass
class GroupCompute:
    """One fused group as tensor expressions: what ``nnvm_schedule_group`` implementations receive."""

    index: int
    nodes: list
    anchor: object  # the node deciding the schedule (conv2d, dense, a reduction, or the last node)
    inputs: list  # (value name, te placeholder) in parameter order
    outputs: list  # te tensors, in the order of ``output_values``
    output_values: list
    tensors: dict = field(default_factory=dict)  # value name -> te tensor

    @property
    def anchor_op(self) -> str:
        return self.anchor.op

    @property
    def anchor_attrs(self) -> dict:
        return get_op(self.anchor.op).normalize_attrs(dict(self.anchor.attrs), self.anchor.name)


def group_values(graph: Graph, members: list, consumers: dict | None = None) -> tuple[list, list]:
    """The kernel parameters of a fused group: ``(inputs, outputs)``, the values it reads from outside
    (in order of first use), then the values it makes that are graph outputs or read by another group
    (the last node's outputs when none is). ``consumers``: ``graph.consumers()``, when the caller has it."""
    member_names = {n.name for n in members}
    produced = {o for n in members for o in n.outputs}
    consumers = graph.consumers() if consumers is None else consumers
    inputs = list(dict.fromkeys(v for n in members for v in n.inputs if v and v not in produced))
    outside = set(graph.outputs)
    outputs = [o for n in members for o in n.outputs
               if o in outside or any(c.name not in member_names for c in consumers.get(o, []))]
    return inputs, outputs or list(members[-1].outputs)


def group_calls(graph: Graph) -> list[dict]:
    """One kernel call per fused group, in execution order, for ``make_plan``: ``{"kernel": None (the
    compiler names it), "group": node names, "args": group_values' inputs then outputs}``, and where the
    arguments' shapes have symbolic dims, ``"dims"``: their names in the order the kernel takes them
    (``PrimFunc.dims``: first appearance in the parameters' shapes). A view's group (``is_view``) gets
    ``"view": True``: no kernel, only a placement for ``make_plan``."""
    by_name = {n.name: n for n in graph.nodes}
    consumers = graph.consumers()
    calls = []
    for names in graph.groups:
        inputs, outputs = group_values(graph, [by_name[n] for n in names], consumers)
        call = {"kernel": None, "group": list(names), "args": inputs + outputs}
        if len(names) == 1 and is_view(by_name[names[0]]):
            call["view"] = True
        dims: dict = {}
        for v in call["args"]:
            for d in graph.type_of(v).shape:
                if isinstance(d, Dim):
                    dims.update(dict.fromkeys(d.names))
        in_attrs = {n for m in names for d in _attr_dims(by_name[m].attrs) for n in d.names}
        dims.update(dict.fromkeys(sorted(in_attrs - set(dims))))  # then those only attributes hold, by name
        if dims:
            call["dims"] = list(dims)
        calls.append(call)
    return calls


def _attr_dims(value) -> list:
    """The symbolic dims in an attribute value (nested tuples, lists, dicts)."""
    if isinstance(value, Dim):
        return [value]
    if isinstance(value, tuple | list):
        return [d for v in value for d in _attr_dims(v)]
    if isinstance(value, dict):
        return [d for v in value.values() for d in _attr_dims(v)]
    return []


def group_compute(graph: Graph, index: int, members: list, consumers: dict | None = None) -> GroupCompute:
    """Tensor expressions of one group: placeholders for what comes from outside, computes inside.
    ``consumers``: ``graph.consumers()``, when the caller has it."""
    in_values, out_values = group_values(graph, members, consumers)
    env: dict = {}
    inputs: list = []
    for v in in_values:
        ty = graph.type_of(v)
        env[v] = te.placeholder(ty.shape, ty.dtype, name=c_name(v))
        inputs.append((v, env[v]))
    anchor = members[-1]
    best = -1
    for node in members:
        opdef = get_op(node.op, node.name)
        attrs = opdef.normalize_attrs(dict(node.attrs), node.name)
        ins = [env[v] if v else None for v in node.inputs]
        out_types = [graph.type_of(o) for o in node.outputs]
        if opdef.compute is None:
            raise Error(f"node {node.name} ({node.op}): the operator has no compute definition")
        try:
            outs = opdef.compute(ins, attrs, out_types)
        except Error as exc:
            raise with_context(exc, f"node {node.name} ({node.op})") from None
        outs = list(outs) if isinstance(outs, list | tuple) else [outs]
        for o, t, ty in zip(node.outputs, outs, out_types):
            if tuple(from_extent(s) for s in t.shape) != ty.shape or t.dtype != ty.dtype:
                raise Error(f"node {node.name} ({node.op}): compute gives {t.dtype}{list(t.shape)} but type "
                            f"inference said {ty}")
            env[o] = t
        rank = opdef.pattern if opdef.pattern != OpPattern.OPAQUE else OpPattern.OUT_ELEMWISE_FUSABLE
        if rank >= best:
            best, anchor = rank, node
    return GroupCompute(index, list(members), anchor, inputs, [env[o] for o in out_values], out_values, env)


def c_name(v: str) -> str:
    """``v`` as a C identifier (kernel and placeholder names)."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in v)
    return out if out and not out[0].isdigit() else f"v_{out}"


def workload_key(graph: Graph, members: list) -> str:
    """Two groups with the same key compute the same function: one kernel serves both."""
    local: dict = {}
    outside: dict = {}  # value from outside the group -> its number, in order of first use
    items = []
    for pos, node in enumerate(members):
        ins = []
        for v in node.inputs:
            if v in local:
                ins.append(local[v])
            elif v:
                ty = graph.type_of(v)
                entry = ["in", list(ty.shape), ty.dtype]
                if v in outside:  # the same value read twice (x * x) is another function than a * b
                    entry.append(f"#{outside[v]}")
                else:
                    outside[v] = len(outside)
                ins.append(entry)
            else:
                ins.append(None)
        for k, o in enumerate(node.outputs):
            local[o] = f"{pos}:{k}"
        attrs = {k: _jsonable(v) for k, v in sorted(node.attrs.items())}
        items.append([node.op, ins, attrs])
    return json.dumps(items, sort_keys=True, default=str)


def _jsonable(v):
    if isinstance(v, np.ndarray):
        return ["array", v.dtype.str, list(v.shape), v.tobytes().hex()]
    if isinstance(v, tuple | list):
        return [_jsonable(x) for x in v]
    return v


def schedule_template(target, group: GroupCompute):
    """The backend's tunable schedule template for a group, or None."""
    return hook().nnvm_schedule_template(target=target, group=group)


def schedule_group(target, group: GroupCompute, config: dict | None = None):
    """The backend's schedule for a group: its template (with ``config``, else the template's fallback),
    else a plain schedule hook, else the generic schedule when every plugin declines."""
    template = schedule_template(target, group)
    if template is not None:
        return template.apply(config)
    return untemplated_schedule(target, group)


def untemplated_schedule(target, group: GroupCompute):
    """A plain ``nnvm_schedule_group`` answer, else the generic schedule (for a group without template)."""
    sch = hook().nnvm_schedule_group(target=target, group=group)
    return sch if sch is not None else generic_schedule(group.outputs, target)


def optimized_graph(model, target="llvm", shapes=None, opt_level: int = 3, dump_ir: str | None = None,
                    disabled_passes=(), enabled_passes=(), seconds: dict | None = None, options=None,
                    **kwargs):
    """``(graph, target, pass context, nodes before)``: the model imported and through the graph passes,
    up to fused groups, exactly as the compiler lowers it (the tuner extracts its tasks from this, so
    tuned workload keys match the compiler's)."""
    if not isinstance(opt_level, int) or not 0 <= opt_level <= 3:
        raise Error(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    seconds = {} if seconds is None else seconds
    t0 = time.perf_counter()
    tgt = parse_target(target)
    tgt.backend.check_target(tgt)
    graph = import_model(model, shapes, **kwargs)
    nodes_before = len(graph.nodes)
    seconds["import"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    ctx = PassContext(opt_level=opt_level, target=tgt, disabled=frozenset(disabled_passes),
                      enabled=frozenset(enabled_passes) | {"infer_types", "fuse_ops"}, dump_dir=dump_ir,
                      options=options)
    graph = run_pipeline(graph, ctx)
    seconds["passes"] = time.perf_counter() - t0
    return graph, tgt, ctx, nodes_before


def group_flops(graph, names: list) -> int:
    """Multiply-adds x 2 of the convolution, dense and matmul nodes among ``names``, float or 8-bit (other ops
    count as 0; the blocked int8 kernels count their input channels as padded to the block)."""
    if graph is None:
        return 0
    by_name = {n.name: n for n in graph.nodes}
    total = 0
    for name in names:
        node = by_name.get(name)
        if node is None:
            continue
        if node.op == "conv2d":
            out = graph.type_of(node.outputs[0]).shape
            weight = graph.type_of(node.inputs[1]).shape  # [O, C / groups, KH, KW]
            total += 2 * math.prod(out) * math.prod(weight[1:])
        elif node.op in ("conv2d_nchwc", "conv2d_winograd_nchwc"):
            # Direct-convolution work, also for Winograd (the usual convention: GFLOP/s comparable
            # between algorithms). Data NCHW[x]c: input channels are C.outer x c.
            out = graph.type_of(node.outputs[0]).shape
            data = graph.type_of(node.inputs[0]).shape
            channels = data[1] * (data[4] if len(data) == 5 else 1)
            groups = int(node.attrs.get("groups", 1) or 1)
            if node.op == "conv2d_winograd_nchwc":
                taps = 9  # Winograd is used for 3x3 kernels only
            else:
                weight = graph.type_of(node.inputs[1]).shape  # OIHW[i]i[o]o
                taps = weight[2] * weight[3]
            total += 2 * math.prod(out) * (channels // groups) * taps
        elif node.op == "dense":
            m, k = graph.type_of(node.inputs[0]).shape
            n = graph.type_of(node.inputs[1]).shape[0]
            total += 2 * m * n * k
        elif node.op in ("matmul", "dense_packed", "qdense", "qdense_packed"):  # [..., K] data (nnvm.cpu's
            out = graph.type_of(node.outputs[0]).shape  # packed forms too); 8-bit products count as any
            total += 2 * math.prod(out) * graph.type_of(node.inputs[0]).shape[-1]
        elif node.op == "qconv2d":
            out = graph.type_of(node.outputs[0]).shape
            total += 2 * math.prod(out) * math.prod(graph.type_of(node.inputs[1]).shape[1:])
        elif node.op in ("qconv2d_nchwc", "qdepthwise_nchwc"):  # nnvm.cpu's blocked int8 kernels
            n, _, oh, ow, block = graph.type_of(node.outputs[0]).shape
            data = graph.type_of(node.inputs[0]).shape  # NCHW[x]c, or NCHW read planar (a stem)
            kh, kw = node.attrs["kernel"]
            if node.op == "qdepthwise_nchwc":
                total += 2 * n * oh * ow * block * kh * kw
            else:
                cin = data[1] if len(data) == 4 else data[4]
                total += 2 * n * oh * ow * node.attrs["channels"] * cin * kh * kw
    return total

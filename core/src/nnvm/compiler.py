"""The compile driver: model -> graph -> passes -> one kernel per fused group -> runnable module.

The stages, each timed into ``compile_seconds``: ``import`` (frontend), ``passes`` (graph passes),
``schedule`` (per distinct group: tensor-expression compute, the backend's template and its config,
the kernel's cache key), ``kernels`` (the kernels not in the kernel cache lowered to loop programs and
compiled, in worker processes, ``kernel_jobs.py``; the others read from the cache), ``link`` (the
kernels made one library: machine code loaded, or for a backend that compiles a model's kernels
together, its whole ``build``) and ``plan`` (memory plan and execution plan for the runtime).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from dataclasses import dataclass, field

import numpy as np

import nnvm
from nnvm.cpu.switches import switch_state
from nnvm.errors import Error, with_context
from nnvm.graph.ir import Graph, TensorType
from nnvm.kernel_cache import KernelCache, kernel_key, source_fingerprint
from nnvm.kernel_jobs import KernelJob, compile_kernels
from nnvm.ops.registry import OpPattern, get_op
from nnvm.te.lower import lower_schedule


def import_model(model, shapes: dict | None = None, **kwargs) -> Graph:
    """A validated graph from any supported model (path, framework object, or Graph)."""
    from nnvm.frontend import find_frontend

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
    compiler names it), "group": node names, "args": group_values' inputs then outputs}``."""
    by_name = {n.name: n for n in graph.nodes}
    consumers = graph.consumers()
    calls = []
    for names in graph.groups:
        inputs, outputs = group_values(graph, [by_name[n] for n in names], consumers)
        calls.append({"kernel": None, "group": list(names), "args": inputs + outputs})
    return calls


def group_compute(graph: Graph, index: int, members: list, consumers: dict | None = None) -> GroupCompute:
    """Tensor expressions of one group: placeholders for what comes from outside, computes inside.
    ``consumers``: ``graph.consumers()``, when the caller has it."""
    from nnvm import te

    in_values, out_values = group_values(graph, members, consumers)
    env: dict = {}
    inputs: list = []
    for v in in_values:
        ty = graph.type_of(v)
        env[v] = te.placeholder(ty.shape, ty.dtype, name=_c_name(v))
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
            if tuple(int(getattr(s, "value", s)) for s in t.shape) != ty.shape or t.dtype != ty.dtype:
                raise Error(f"node {node.name} ({node.op}): compute gives {t.dtype}{list(t.shape)} but type "
                            f"inference said {ty}")
            env[o] = t
        rank = opdef.pattern if opdef.pattern != OpPattern.OPAQUE else OpPattern.OUT_ELEMWISE_FUSABLE
        if rank >= best:
            best, anchor = rank, node
    return GroupCompute(index, list(members), anchor, inputs, [env[o] for o in out_values], out_values, env)


def _c_name(v: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in v)
    return out if out and not out[0].isdigit() else f"v_{out}"


def _workload_key(graph: Graph, members: list) -> str:
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
    from nnvm.plugins import hook

    return hook().nnvm_schedule_template(target=target, group=group)


def schedule_group(target, group: GroupCompute, config: dict | None = None):
    """The backend's schedule for a group: its template (with ``config``, else the template's fallback),
    else a plain schedule hook, else the generic schedule when every plugin declines."""
    template = schedule_template(target, group)
    if template is not None:
        return template.apply(config)
    return _untemplated_schedule(target, group)


def _untemplated_schedule(target, group: GroupCompute):
    """A plain ``nnvm_schedule_group`` answer, else the generic schedule (for a group without template)."""
    from nnvm.plugins import hook
    from nnvm.schedules import generic_schedule

    sch = hook().nnvm_schedule_group(target=target, group=group)
    return sch if sch is not None else generic_schedule(group.outputs, target)


def optimized_graph(model, target="llvm", shapes=None, opt_level: int = 3, dump_ir: str | None = None,
                    disabled_passes=(), enabled_passes=(), seconds: dict | None = None, **kwargs):
    """``(graph, target, pass context, nodes before)``: the model imported and through the graph passes,
    up to fused groups, exactly as the compiler lowers it (the tuner extracts its tasks from this, so
    tuned workload keys match the compiler's)."""
    from nnvm.passes.manager import PassContext, run_pipeline
    from nnvm.target import parse_target

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
                      enabled=frozenset(enabled_passes) | {"infer_types", "fuse_ops"}, dump_dir=dump_ir)
    graph = run_pipeline(graph, ctx)
    seconds["passes"] = time.perf_counter() - t0
    return graph, tgt, ctx, nodes_before


def tuning_logs_for(target, tuning_log=None):
    """The logs the compiler consults: ``tuning_log`` (a path or a list of paths) first, then the logs
    the backend ships (``Backend.default_tuning_logs``), matched against the target's CPU signature
    (``Backend.cpu_signature``); ``tuning_log=False``: none at all (every template gets its fallback)."""
    from nnvm.autotune.log import TuningLogs

    if tuning_log is False:
        return TuningLogs([])
    given = [] if tuning_log is None else [tuning_log] if isinstance(tuning_log, str | os.PathLike) \
        else list(tuning_log)
    shipped = getattr(target.backend, "default_tuning_logs", lambda _target: [])(target)
    signature = getattr(target.backend, "cpu_signature", lambda _target: None)(target)
    return TuningLogs(given, signature=signature, shipped=shipped)


def compile_model(model, target="llvm", shapes=None, opt_level: int = 3, tuning_log=None,
                  dump_ir: str | None = None, disabled_passes=(), enabled_passes=(),
                  kernel_cache: KernelCache | None = None, jobs: int | None = None, **kwargs):
    """``kernel_cache``: where compiled kernels are looked up and stored (None: nowhere); ``jobs``: worker
    processes for the kernels not in it (None: ``kernel_jobs.default_jobs()``)."""
    from nnvm.runtime.module import Module
    from nnvm.runtime.plan import make_plan

    seconds: dict = {}
    graph, tgt, ctx, nodes_before = optimized_graph(model, target, shapes, opt_level, dump_ir,
                                                    disabled_passes, enabled_passes, seconds, **kwargs)
    backend = tgt.backend

    t0 = time.perf_counter()
    logs = tuning_logs_for(tgt, tuning_log)
    identity = backend.kernel_identity(tgt)
    fingerprint = compiler_fingerprint()
    switches = switch_state()
    tuned = 0
    served: dict = {}  # kernel name -> which log served its config, and why
    by_name = {n.name: n for n in graph.nodes}
    consumers = graph.consumers()
    kernels: dict = {}  # (workload key, outputs) -> kernel name
    jobs_list: list[KernelJob] = []
    calls = group_calls(graph)
    for k, (names, call) in enumerate(zip(graph.groups, calls)):
        members = [by_name[n] for n in names]
        key = _workload_key(graph, members)
        outputs = _output_positions(graph, members, consumers)
        if (key, outputs) not in kernels:  # a group computing the same function reuses the first's kernel
            group = group_compute(graph, k, members, consumers)
            template = schedule_template(tgt, group)
            config = None
            if template is not None:
                config, choice = logs.choose(template, key, tgt) if len(logs) else (None, None)
                tuned += config is not None
                schedule = {"template": template.name, "revision": getattr(template, "revision", 1),
                            "config": template.fallback if config is None else config}
            else:
                choice, schedule = None, {"template": None}
            cache_key = kernel_key(key, list(outputs), schedule, switches, identity or backend.name,
                                   fingerprint)
            if identity is not None:  # a cached kernel keeps its name in every model: one from its key
                digest = hashlib.sha256(cache_key.encode()).hexdigest()[:16]
                kname = f"nnvm_k{digest}_{_c_name(group.anchor.op)}"
            else:
                kname = f"nnvm_k{len(jobs_list)}_{_c_name(group.anchor.op)}"
            if choice is not None:
                served[kname] = choice.reason()
            jobs_list.append(KernelJob(kname, cache_key, (group, template, config, names)))
            kernels[key, outputs] = kname
        call["kernel"] = kernels[key, outputs]
    seconds["schedule"] = time.perf_counter() - t0

    def lower_job(job: KernelJob):
        group, template, config, names = job.payload
        # not schedule_group: that would ask for the template again
        sch = template.apply(config) if template is not None else _untemplated_schedule(tgt, group)
        args = [t for _, t in group.inputs] + list(group.outputs)
        try:
            return lower_schedule(sch, args, job.name)
        except Error as exc:
            raise with_context(exc, f"fused group {list(names)}") from None

    t0 = time.perf_counter()
    funcs = [lower_job(job) for job in jobs_list] if dump_ir or identity is None else None
    if dump_ir:
        os.makedirs(dump_ir, exist_ok=True)
        with open(os.path.join(dump_ir, "kernels.tir.txt"), "w") as f:
            f.write("\n\n".join(str(fn) for fn in funcs))
    counts = None
    if identity is None:  # a backend compiling all kernels together: no cache, no workers
        seconds["kernels"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        library = backend.build(funcs, tgt)
    else:
        if funcs is not None:  # lowered once already for the dump: compile those
            lowered = dict(zip((job.name for job in jobs_list), funcs))
            make = lambda job: backend.compile_kernel(lowered[job.name], tgt)  # noqa: E731
        else:
            make = lambda job: backend.compile_kernel(lower_job(job), tgt)  # noqa: E731
        # a dump shows what this compile lowers, so it reads nothing from the cache
        payloads, counts = compile_kernels(jobs_list, make, kernel_cache, jobs, read_cache=not dump_ir)
        seconds["kernels"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            library = backend.link_kernels(payloads, tgt)
        except ValueError:  # a cached kernel the backend cannot read (its checksum held): compile afresh
            payloads, counts = compile_kernels(jobs_list, make, kernel_cache, jobs, read_cache=False)
            library = backend.link_kernels(payloads, tgt)
    seconds["link"] = time.perf_counter() - t0
    if dump_ir:
        with open(os.path.join(dump_ir, f"kernels.{tgt.kind}.txt"), "w") as f:
            f.write(library.source())

    t0 = time.perf_counter()
    plan = make_plan(graph, calls)
    seconds["plan"] = time.perf_counter() - t0
    seconds["passes_detail"] = dict(ctx.timings)
    cache_stats = counts.to_dict() if counts is not None else {"compiled": len(jobs_list), "cached": 0,
                                                               "jobs": 1, "cache_dir": None}
    stats = {
        "nodes_before": nodes_before,
        "nodes_after": len(graph.nodes),
        "kernels": len(calls),
        "distinct_kernels": len(jobs_list),
        # distinct kernels compiled here, read from the kernel cache, and groups that reused another's
        "kernel_cache": {**cache_stats, "deduplicated": len(calls) - len(jobs_list)},
        "tuned_kernels": tuned,  # distinct kernels scheduled with a config from a tuning log
        "tuning": {"signature": logs.signature.describe() if logs.signature is not None else None,
                   "logs": logs.summary(), "kernels": served},
        "fused_groups": [list(g) for g in graph.groups],
        "weight_bytes": int(sum(np.asarray(v).nbytes for v in graph.params.values())),
        "activation_bytes_planned": plan["arena_bytes"],
        "activation_bytes_naive": plan["naive_bytes"],
        "activation_bytes_lower_bound": plan["lower_bound_bytes"],
        "compile_seconds": seconds,
        "target": str(tgt),
        "opt_level": opt_level,
        **(library.stats() if hasattr(library, "stats") else {}),
    }
    return Module(plan, dict(graph.params), library, tgt, stats, graph)


def _output_positions(graph: Graph, members: list, consumers: dict) -> tuple:
    """Which values of a group are its kernel's outputs, as (node position, output index): two groups of
    one workload whose outputs differ (one also hands an intermediate on) are two kernels."""
    _, outputs = group_values(graph, members, consumers)
    where = {o: (pos, k) for pos, node in enumerate(members) for k, o in enumerate(node.outputs)}
    return tuple(where[o] for o in outputs)


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the core's source (every kernel's cache key holds it with the backend's own)."""
    return source_fingerprint(nnvm)

"""The compile driver: model -> graph -> passes -> one kernel per fused group -> runnable module.

The part up to each group's schedule is ``lowering.py`` (the tuner runs it too, so both see the same
workload keys); this module adds the kernel cache, the compile jobs, the link and the plan.

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
import os
import time

import numpy as np

import nnvm
from nnvm.autotune.log import TuningLogs
from nnvm.batch_loop import bound_members, group_loop_dim, image_views
from nnvm.cpu.concat_in_place import image_batch
from nnvm.cpu.switches import check_options, switch_state
from nnvm.errors import Error, with_context
from nnvm.graph.ir import Graph, detached
from nnvm.kernel_cache import KernelCache, kernel_key, source_fingerprint
from nnvm.kernel_jobs import KernelJob, compile_kernels
from nnvm.lowering import (  # noqa: F401  (import_model, schedule_group, GroupCompute: nnvm.compiler's API)
    GroupCompute,
    c_name,
    group_calls,
    group_compute,
    group_values,
    import_model,
    optimized_graph,
    schedule_group,
    schedule_template,
    untemplated_schedule,
    workload_key,
)
from nnvm.options import Options, activated, active
from nnvm.runtime.module import Module
from nnvm.runtime.plan import bound_graph, make_plan, symbolic_dims
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.lower import batch_loop


def tuning_logs_for(target, tuning_log=None):
    """The logs the compiler consults: ``tuning_log`` (a path or a list of paths) first, then the logs
    the backend ships (``Backend.default_tuning_logs``), matched against the target's CPU signature
    (``Backend.cpu_signature``); ``tuning_log=False``: none at all (every template gets its fallback)."""
    if tuning_log is False:
        return TuningLogs([])
    given = [] if tuning_log is None else [tuning_log] if isinstance(tuning_log, str | os.PathLike) \
        else list(tuning_log)
    shipped = getattr(target.backend, "default_tuning_logs", lambda _target: [])(target)
    signature = getattr(target.backend, "cpu_signature", lambda _target: None)(target)
    return TuningLogs(given, signature=signature, shipped=shipped)


def compile_model(model, target="llvm", shapes=None, options: Options | None = None, **kwargs):
    """What ``nnvm.compile`` runs, as ``options`` say (``nnvm.Options``; they are the active options while it
    runs). Their ``kernel_cache`` is where compiled kernels are looked up and stored: a ``KernelCache``,
    anything else for none (``nnvm.compile`` resolves the default). ``kwargs`` go to the frontend."""
    options = (active() or Options()) if options is None else options
    check_options(options)
    with activated(options):
        return _compile(model, target, shapes, options, **kwargs)


def _compile(model, target, shapes, options: Options, **kwargs):
    opt_level, tuning_log, dump_ir = options.opt_level, options.tuning_log, options.dump_ir
    jobs = options.jobs
    kernel_cache = options.kernel_cache if isinstance(options.kernel_cache, KernelCache) else None
    seconds: dict = {}
    graph, tgt, ctx, nodes_before = optimized_graph(model, target, shapes, opt_level, dump_ir,
                                                    options.disabled_passes, options.enabled_passes, seconds,
                                                    options=options, **kwargs)
    backend = tgt.backend

    t0 = time.perf_counter()
    logs = tuning_logs_for(tgt, tuning_log)
    identity = backend.kernel_identity(tgt)
    fingerprint = compiler_fingerprint()
    switches = switch_state()
    tuned = 0
    served: dict = {}  # kernel name -> which log served its config, and why
    steps: dict = {}  # value -> elements between its images, inside a view's block over a symbolic batch
    computed: dict = {}  # group (node names) -> (GroupCompute, loop dim), found while placing those views
    calls = group_calls(graph)
    batch = image_batch(graph) if any(c.get("view") for c in calls) else None
    if batch is not None:
        graph, steps, computed = image_views(graph, batch)
        calls = group_calls(graph)
    by_name = {n.name: n for n in graph.nodes}
    consumers = graph.consumers()
    kernels: dict = {}  # (workload key, outputs, image strides) -> kernel name
    jobs_list: list[KernelJob] = []
    batched: dict = {}  # dim name -> the graph with it bound to 1: groups run image by image over it
    for k, (names, call) in enumerate(zip(graph.groups, calls)):
        if call.get("view"):
            continue  # computes nothing: make_plan places its inputs inside its output
        members = [by_name[n] for n in names]
        key = workload_key(graph, members)
        outputs = _output_positions(graph, members, consumers)
        strides = tuple(steps.get(v) for v in call["args"]) if any(v in steps for v in call["args"]) else ()
        if (key, outputs, strides) not in kernels:  # a group computing the same function reuses a kernel
            if tuple(names) in computed:
                group, dim = computed[tuple(names)]
            else:
                group = group_compute(graph, k, members, consumers)
                # a symbolic batch of independent images: the batch-1 group's kernel, looped (batch_loop)
                # (CPU targets: a GPU kernel's thread-bound loops must stay outermost)
                dim = group_loop_dim(group) if call.get("dims") and "cpu" in tgt.keys else None
            if strides and dim is None:
                raise Error(f"fused group {list(names)}: it reads or writes a view over a symbolic batch but "
                            "does not loop over the images")
            one, log_key = group, key
            if dim is not None:
                if dim.name not in batched:
                    batched[dim.name] = bound_graph(graph, dim.name)
                one_members = bound_members(members, dim.name)
                one = group_compute(batched[dim.name], k, one_members, consumers)
                log_key = workload_key(batched[dim.name], one_members)
            template = schedule_template(tgt, one)
            config = None
            if template is not None:
                config, choice = logs.choose(template, log_key, tgt) if len(logs) else (None, None)
                tuned += config is not None
                schedule = {"template": template.name, "revision": getattr(template, "revision", 1),
                            "config": template.fallback if config is None else config}
            else:
                choice, schedule = None, {"template": None}
            if dim is not None:
                schedule["batch_loop"] = dim.name
            if strides:
                schedule["image_strides"] = list(strides)
            cache_key = kernel_key(key, list(outputs), schedule, switches, identity or backend.name,
                                   fingerprint)
            if identity is not None:  # a cached kernel keeps its name in every model: one from its key
                digest = hashlib.sha256(cache_key.encode()).hexdigest()[:16]
                kname = f"nnvm_k{digest}_{c_name(group.anchor.op)}"
            else:
                kname = f"nnvm_k{len(jobs_list)}_{c_name(group.anchor.op)}"
            if choice is not None:
                served[kname] = choice.reason()
            jobs_list.append(KernelJob(kname, cache_key, (group, template, config, names, one, dim, strides)))
            kernels[key, outputs, strides] = kname
        call["kernel"] = kernels[key, outputs, strides]
    seconds["schedule"] = time.perf_counter() - t0

    def lower_job(job: KernelJob):
        group, template, config, names, one, dim, strides = job.payload
        # not schedule_group: that would ask for the template again
        sch = template.apply(config) if template is not None else untemplated_schedule(tgt, one)
        args = [t for _, t in one.inputs] + list(one.outputs)
        try:
            func = lower_schedule(sch, args, job.name)
            if dim is None:
                return func
            full = [t for _, t in group.inputs] + list(group.outputs)
            return batch_loop(func, tuple(S.Buffer(t.name, tuple(E.convert(x) for x in t.shape), t.dtype)
                                          for t in full), dim, strides)
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
    # symbolic dims: planned here for every dim at 1; a symbolic module plans each binding it runs
    dims = symbolic_dims(graph)
    plan = make_plan(graph, calls, dims=dict.fromkeys(dims, 1) if dims else None)
    graph = graph.replace(params={k: detached(v) for k, v in graph.params.items()})
    seconds["plan"] = time.perf_counter() - t0
    seconds["passes_detail"] = dict(ctx.timings)
    cache_stats = counts.to_dict() if counts is not None else {"compiled": len(jobs_list), "cached": 0,
                                                               "jobs": 1, "cache_dir": None}
    stats = {
        "nodes_before": nodes_before,
        "nodes_after": len(graph.nodes),
        "kernels": len(plan["calls"]),
        "distinct_kernels": len(jobs_list),
        # distinct kernels compiled here, read from the kernel cache, and groups that reused another's
        "kernel_cache": {**cache_stats, "deduplicated": len(plan["calls"]) - len(jobs_list)},
        "tuned_kernels": tuned,  # distinct kernels scheduled with a config from a tuning log
        # distinct kernels over a symbolic batch that run the batch-1 kernel image by image (batch_loop)
        "batch_loop_kernels": sum(1 for job in jobs_list if job.payload[5] is not None),
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


# The core's modules that build or run modules but generate no kernel code: what a kernel does is in its
# key already (the group's workload: operators, attributes, shapes), so how the graph was imported, how a
# module plans memory and runs, and the command line are left out of the fingerprint, and editing them
# keeps every cached kernel (the test suite's cold run is ~3x its warm one).
NOT_KERNEL_SOURCE = ("frontend", "runtime/module.py", "runtime/plan.py", "runtime/crt.py", "runtime/c",
                     "runtime/fibers", "cli.py", "bench.py", "generate.py", "autotune/cluster.py",
                     "autotune/driver.py", "errors.py", "kernel_cache.py")


@functools.cache
def compiler_fingerprint() -> str:
    """A hash of the core's source that generates kernels (every kernel's cache key holds it with the
    backend's own)."""
    return source_fingerprint(nnvm, leave_out=NOT_KERNEL_SOURCE)

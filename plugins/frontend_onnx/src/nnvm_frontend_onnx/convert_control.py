"""Control flow lowered into the graph: If, Loop and Scan become plain nnvm nodes.

nnvm graphs are static, so:

- ``If`` with a condition known when importing converts only the branch taken; otherwise both branches
  are converted and each output is ``where(cond, then, else)`` (the branches must agree in shape; for
  sequences and optionals, in length and presence too, else the condition must be known).
- ``Loop`` is unrolled: the trip count must be known when importing (a graph input that gives it is
  specialized on by ``nnvm_frontend_onnx.backend``), and the loop-carried condition must fold to a
  constant after each iteration (loops that stop on a run-time value are reported as unsupported).
- ``Scan`` is unrolled over the scanned axis, whose length is static (Scan-8: per batch entry).

A body is converted node by node into the enclosing graph, its values renamed per iteration, with
the outer scope's values visible to it, as ONNX scoping says.
"""

from __future__ import annotations

import numpy as np

from nnvm_frontend_onnx.context import Context, converter, normalize_axis
from nnvm_frontend_onnx.sequences import merged


def graph_attr(ctx: Context, key: str):
    """The graph held by attribute ``key`` of the node being converted."""
    attr = ctx.attr(key)
    if attr is None or not hasattr(attr, "g"):
        raise ctx.error(f"the {key} attribute (a graph) is missing")
    return attr.g


def run_body(ctx: Context, graph, bindings: list, tag: str) -> list:
    """Convert ``graph``'s nodes into the enclosing graph; ``bindings`` are the nnvm values of its
    inputs, in order. Returns the nnvm values of its outputs. The caller's node stays current."""
    from onnx import numpy_helper

    from nnvm_frontend_onnx.importer import _convert_node, _node_names

    node, name, op_type, attrs = ctx.node, ctx.name, ctx.op_type, ctx.attrs
    env = dict(ctx.env)
    for vi, value in zip(graph.input, bindings):
        env[vi.name] = value
    for t in graph.initializer:
        env[t.name] = ctx.param(numpy_helper.to_array(t), f"{tag}/{t.name}")
    saved_consumed, saved_env = ctx.consumed, ctx.env
    ctx.env = env
    ctx.consumed = saved_consumed | {v for n in graph.node for v in n.input if v} | \
        {o.name for o in graph.output}
    try:
        for inner, inner_name in zip(graph.node, _node_names(graph)):
            _convert_node(ctx, inner, f"{name}/{tag}/{inner_name}", env)
    finally:
        ctx.consumed, ctx.env = saved_consumed, saved_env
        ctx.node, ctx.name, ctx.op_type, ctx.attrs = node, name, op_type, attrs
    missing = [o.name for o in graph.output if o.name not in env]
    if missing:
        raise ctx.error(f"the {tag} body does not produce {missing[0]!r}")
    return [env[o.name] for o in graph.output]


def stack(ctx: Context, values: list, axis: int = 0) -> str:
    """Stack same-shaped values along a new ``axis``."""
    shape = ctx.shape(values[0])
    axis = normalize_axis(axis, len(shape) + 1, ctx)
    parts = [ctx.reshape(v, shape[:axis] + (1,) + shape[axis:]) for v in values]
    return parts[0] if len(parts) == 1 else ctx.op("concatenate", parts, {"axis": axis})


@converter("If")
def convert_if(ctx: Context, inputs):
    cond = inputs[0]
    known = ctx.const_value(cond)
    if known is not None:
        branch = "then_branch" if bool(np.asarray(known).reshape(-1)[0]) else "else_branch"
        return run_body(ctx, graph_attr(ctx, branch), [], branch)
    then = run_body(ctx, graph_attr(ctx, "then_branch"), [], "then")
    other = run_body(ctx, graph_attr(ctx, "else_branch"), [], "else")
    flag = ctx.reshape(cond, ())
    return [merged(ctx, flag, cond, a, b) for a, b in zip(then, other)]


@converter("Loop")
def convert_loop(ctx: Context, inputs):
    body = graph_attr(ctx, "body")
    trip_v = inputs[0] if inputs else ""
    cond_v = inputs[1] if len(inputs) > 1 else ""
    carried = list(inputs[2:])
    trips = int(np.asarray(ctx.const(trip_v, "the trip count M")).reshape(-1)[0]) if trip_v else None
    cond = True
    if cond_v:
        cond = bool(np.asarray(ctx.const(cond_v, "the initial condition")).reshape(-1)[0])
    if trips is None:
        trips = 1 << 16  # bounded by the condition, which must fold to a constant
    n_carried = len(carried)
    scans: list[list] = []
    i = 0
    while cond and i < trips:
        iteration = ctx.param(np.asarray(i, dtype=np.int64), "iter")
        flag = ctx.param(np.asarray(True), "cond")
        outs = run_body(ctx, body, [iteration, flag] + carried, f"iter{i}")
        known = ctx.const_value(outs[0])
        if known is None:
            raise ctx.error("the loop condition is computed at run time (loops must unroll when importing)")
        cond = bool(np.asarray(known).reshape(-1)[0])
        carried = outs[1 : 1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried :]):
            if len(scans) <= k:
                scans.append([])
            scans[k].append(v)
        i += 1
        if i > 4096:
            raise ctx.error("more than 4096 iterations; not unrolled")
    n_scan = len(body.output) - 1 - n_carried
    stacked = [stack(ctx, s) if s else None for s in scans] + [None] * (n_scan - len(scans))
    if any(s is None for s in stacked):
        raise ctx.error("a scan output of a loop that runs zero times has no static shape")
    return carried + stacked


@converter("Scan")
def convert_scan(ctx: Context, inputs):
    body = graph_attr(ctx, "body")
    n_scan_in = int(ctx.attr("num_scan_inputs"))
    if ctx.opset < 9:  # Scan-8: optional sequence_lens first, a batch axis 0 on everything
        return _scan8(ctx, body, inputs, n_scan_in)
    states = list(inputs[:len(inputs) - n_scan_in])
    xs = list(inputs[len(inputs) - n_scan_in:])
    n_out = len(body.output) - len(states)
    return _scan(ctx, body, states, xs, list(ctx.attr("scan_input_axes", (0,) * n_scan_in)),
                 list(ctx.attr("scan_input_directions", (0,) * n_scan_in)),
                 list(ctx.attr("scan_output_axes", (0,) * n_out)),
                 list(ctx.attr("scan_output_directions", (0,) * n_out)), "")


def _scan8(ctx: Context, body, inputs, n_scan_in: int) -> list:
    """Scan-8 is Scan-9 per batch entry: slice each state and scan input at the batch index, scan
    over axis 0 of what is left, and stack the results along a new batch axis."""
    seq_lens = inputs[0] if inputs else ""
    rest = list(inputs[1:])
    states, xs = rest[:len(rest) - n_scan_in], rest[len(rest) - n_scan_in:]
    batch = ctx.shape(xs[0])[0]
    steps = ctx.shape(xs[0])[1]
    if seq_lens:
        lens = ctx.const_ints(seq_lens, "the sequence_lens input")
        if any(n != steps for n in lens):
            raise ctx.error("sequence_lens shorter than the sequence are not supported")
    dirs = list(ctx.attr("directions", (0,) * n_scan_in))
    n_out = len(body.output) - len(states)
    per_batch = []
    for b in range(batch):
        def row(v, b=b):
            piece = ctx.op("strided_slice", [v], {"begin": (b,), "end": (b + 1,), "strides": (1,),
                                                  "axes": (0,)})
            return ctx.reshape(piece, ctx.shape(v)[1:])
        per_batch.append(_scan(ctx, body, [row(v) for v in states], [row(v) for v in xs], [0] * n_scan_in,
                               dirs, [0] * n_out, [0] * n_out, f"b{b}/"))
    return [stack(ctx, [outs[k] for outs in per_batch]) for k in range(len(per_batch[0]))]


def _scan(ctx: Context, body, states, xs, in_axes, in_dirs, out_axes, out_dirs, tag: str) -> list:
    """Unroll a scan: slice the scan inputs at each step, run the body, carry the states, and stack the
    per-step outputs along their output axes."""
    n_out = len(body.output) - len(states)
    in_axes = [normalize_axis(a, ctx.rank(x), ctx) for a, x in zip(in_axes, xs)]
    lengths = {ctx.shape(x)[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise ctx.error(f"the scan inputs have different lengths {sorted(lengths)}")
    steps = lengths.pop()
    collected: list[list] = [[] for _ in range(n_out)]
    for t in range(steps):
        slices = []
        for x, a, d in zip(xs, in_axes, in_dirs):
            k = steps - 1 - t if d else t
            piece = ctx.op("strided_slice", [x], {"begin": (k,), "end": (k + 1,), "strides": (1,),
                                                  "axes": (a,)})
            shape = ctx.shape(x)
            slices.append(ctx.reshape(piece, shape[:a] + shape[a + 1:]))
        outs = run_body(ctx, body, states + slices, f"{tag}step{t}")
        states = outs[:len(states)]
        for k, v in enumerate(outs[len(states):]):
            collected[k].append(v)
    results = []
    for values, axis, d in zip(collected, out_axes, out_dirs):
        if not values:
            raise ctx.error("a scan over zero steps has no static output shape")
        values = values[::-1] if d else values
        results.append(stack(ctx, values, axis))
    return states + results

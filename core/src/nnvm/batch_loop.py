"""Kernels over a symbolic batch: the bound batch-1 kernel inside a loop over the images.

A convolution network's batch is the outermost axis of every tensor and no operator mixes two images, so
the kernel of a group over ``[batch, C, H, W]`` is the batch-1 kernel run once per image. For such a
group (``loop_dim`` says which), the compiler schedules the group bound at batch 1 (the very template,
config and tuning-log entry of a batch-1 compile) and ``tir.lower.batch_loop`` puts the lowered program
in a loop over the symbolic batch, every batched buffer offset by the image's index: at batch 1 the
kernel is the bound one, at batch N it is N of them (docs/dynamic-shapes.md, "A symbolic batch").

The check is on the group's tensor expressions, never on operator names: every tensor leading with the
dim is read only at its reader's own first index, which appears nowhere else (no reduction over images,
no gather across them, no use of the index as a value), and the dim appears in no other extent.
"""

from __future__ import annotations

from nnvm.graph.ir import Graph
from nnvm.lowering import group_calls, group_compute
from nnvm.ops.registry import get_op
from nnvm.runtime.plan import bind_dim, bound_graph, view_placements
from nnvm.te.tensor import ComputeOp, Tensor
from nnvm.tir import expr as E
from nnvm.tir.visit import free_vars, rewrite


def group_loop_dim(group) -> E.Var | None:
    """``loop_dim`` of a fused group (``lowering.GroupCompute``), its operators declaring ``images_apart``
    taken at their word."""
    apart = {}
    for node in group.nodes:
        if get_op(node.op).images_apart:
            ins = [group.tensors[v] for v in node.inputs if v]
            apart.update({group.tensors[o]: ins for o in node.outputs})
    return loop_dim([t for _, t in group.inputs], group.outputs, apart)


def loop_dim(inputs: list, outputs: list, apart: dict | None = None) -> E.Var | None:
    """The dim variable a kernel of ``inputs`` (placeholders) and ``outputs`` (te tensors) can loop over as
    a batch of independent images, or None.

    Every output and every input that holds a symbolic dim must lead with the same variable and hold no
    other symbolic extent; every compute stage of the group must be separable along it (module docstring).
    ``apart``: tensors known to keep images apart (an operator's ``images_apart``) -> the tensors they are
    computed from; their own stages are not inspected, those tensors are.
    """
    apart = apart or {}
    outs = list(outputs)
    dim = outs[0].shape[0] if outs and outs[0].shape else None
    if not isinstance(dim, E.Var):
        return None
    for t in [*outs, *inputs]:  # batched, or all static (weights)
        if not _leads(t, dim) and not all(isinstance(e, E.Const) for e in t.shape):
            return None
    if any(not _leads(t, dim) for t in outs):
        return None
    seen: set = set()
    todo = list(outs)
    while todo:
        t = todo.pop()
        if t in apart:
            if t.op in seen:
                continue
            if not _leads(t, dim):
                return None
            seen.add(t.op)
            todo.extend(apart[t])
            continue
        op = t.op
        if op in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(op)
        if not _separable(op, dim):
            return None
        todo.extend(op.input_tensors)
    return dim


def _mentions(exprs, var: E.Var) -> bool:
    return any(isinstance(e, E.Expr) and var in free_vars(e) for e in exprs)


def _leads(t: Tensor, dim: E.Var) -> bool:
    """``t`` is ``[dim, static...]`` (every other extent a constant: one image's size is known)."""
    return bool(t.shape) and t.shape[0] is dim and all(isinstance(e, E.Const) for e in t.shape[1:])


def _separable(op: ComputeOp, dim: E.Var) -> bool:
    """Each output image of ``op`` reads only the same image of the batched tensors, and nothing else
    depends on which image it is."""
    out = op.outputs[0]
    batched = _leads(out, dim)
    if not batched and not all(isinstance(e, E.Const) for e in out.shape):
        return False
    doms = [iv.dom for iv in (*op.axis[1 if batched else 0:], *op.reduce_axis) if iv.dom is not None]
    if any(free_vars(r.min) or free_vars(r.extent) for r in doms):  # one image's loops: all static
        return False
    own = op.axis[0].var if batched else None
    ok = True

    def fn(node):
        nonlocal ok
        if isinstance(node, E.TensorLoad) and node.tensor.shape and _mentions(node.tensor.shape, dim):
            if own is None or not _leads(node.tensor, dim) or node.indices[0] is not own:
                ok = False
                return None
            return E.TensorLoad(node.tensor, (E.const(0, own.dtype), *node.indices[1:]), node.dtype)
        return None

    for body in op.body:
        rest = rewrite(body, fn)
        if not ok:
            return False
        used = free_vars(rest)
        if dim in used or (own is not None and own in used):
            return False
    return ok


def bound_members(members: list, name: str, size: int = 1) -> list:
    """The group's nodes with dim ``name`` set to ``size`` in their attributes (reshape targets)."""
    return [n.replace(attrs=bind_dim(dict(n.attrs), name, size)) for n in members]


def image_views(graph: Graph, batch: str) -> tuple[Graph, dict, dict]:
    """Views (in-place concatenations) over a symbolic batch, placed for one image: ``(graph, steps,
    computed)``. A value inside a view's block holds its images a block's image apart, not its own
    (``steps``: value -> elements between its images), which only a kernel looping over the images can
    honour; so a block touched by a group that does not loop (``loop_dim``) is copied again (its views
    unmarked) until every such group loops. ``computed``: group (node names) -> (``GroupCompute``,
    loop dim), the work done here, for the compiler to reuse."""
    image = bound_graph(graph, batch)
    computed: dict = {}
    while True:
        calls = group_calls(graph)
        places = view_placements(image, calls)
        steps = {v: image.type_of(root).size for v, (root, _) in places.items() if v != root}
        by_name = {n.name: n for n in graph.nodes}
        consumers = graph.consumers()
        copied: set = set()  # blocks to copy again
        for k, (names, call) in enumerate(zip(graph.groups, calls)):
            strided = [v for v in call["args"] if v in steps]
            if call.get("view") or not strided:
                continue
            key = tuple(names)
            if key not in computed:
                group = group_compute(graph, k, [by_name[n] for n in names], consumers)
                computed[key] = (group, group_loop_dim(group))
            if computed[key][1] is None:
                copied.update(places[v][0] for v in strided)
        if not copied:
            return graph, steps, computed
        nodes = []
        for n in graph.nodes:
            block = places.get(n.outputs[0], (None,))[0]
            if n.op == "concatenate" and n.attrs.get("in_place") and block in copied:
                n = n.replace(attrs={k: v for k, v in n.attrs.items() if k != "in_place"})
            nodes.append(n)
        graph = graph.replace(nodes=tuple(nodes))

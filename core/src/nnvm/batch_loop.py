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

from nnvm.graph.dims import Dim
from nnvm.graph.ir import Graph, TensorType
from nnvm.te.tensor import ComputeOp, Tensor
from nnvm.tir import expr as E
from nnvm.tir.visit import free_vars, rewrite


def loop_dim(inputs: list, outputs: list) -> E.Var | None:
    """The dim variable a kernel of ``inputs`` (placeholders) and ``outputs`` (te tensors) can loop over as
    a batch of independent images, or None.

    Every output and every input that holds a symbolic dim must lead with the same variable and hold no
    other symbolic extent; every compute stage of the group must be separable along it (module docstring).
    """
    outs = list(outputs)
    dim = outs[0].shape[0] if outs and outs[0].shape else None
    if not isinstance(dim, E.Var):
        return None
    for t in [*outs, *inputs]:
        if _mentions(t.shape, dim) and not _leads(t, dim):
            return None
    if any(not _leads(t, dim) for t in outs):
        return None
    seen: set = set()
    todo = list(outs)
    while todo:
        t = todo.pop()
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
    """``t`` is ``[dim, static...]``."""
    return bool(t.shape) and t.shape[0] is dim and not _mentions(t.shape[1:], dim)


def _separable(op: ComputeOp, dim: E.Var) -> bool:
    """Each output image of ``op`` reads only the same image of the batched tensors, and nothing else
    depends on which image it is."""
    out = op.outputs[0]
    batched = _leads(out, dim)
    if not batched and _mentions(out.shape, dim):
        return False
    doms = [iv.dom for iv in (*op.axis[1 if batched else 0:], *op.reduce_axis) if iv.dom is not None]
    if any(_mentions((r.min, r.extent), dim) for r in doms):
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


def bind_dim(value, name: str, size: int):
    """An attribute value (nested tuples, lists, dicts) with dim ``name`` set to ``size`` where it
    appears; other dims are left symbolic (a group using them is not looped)."""
    if isinstance(value, Dim):
        return value.evaluate({name: size}) if set(value.names) <= {name} else value
    if isinstance(value, tuple | list):
        return type(value)(bind_dim(v, name, size) for v in value)
    if isinstance(value, dict):
        return {k: bind_dim(v, name, size) for k, v in value.items()}
    return value


def bound_members(members: list, name: str, size: int = 1) -> list:
    """The group's nodes with dim ``name`` set to ``size`` in their attributes (reshape targets)."""
    return [n.replace(attrs=bind_dim(dict(n.attrs), name, size)) for n in members]


def bound_graph(graph: Graph, name: str, size: int = 1) -> Graph:
    """``graph`` with dim ``name`` set to ``size`` in its types (dims of other names stay)."""
    types = {v: TensorType(tuple(bind_dim(d, name, size) for d in ty.shape), ty.dtype) if ty.symbolic else ty
             for v, ty in graph.types.items()}
    return graph.replace(types=types)

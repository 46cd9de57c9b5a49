"""What the CPU layer's schedule templates share: vector lanes, constant extents, tile divisors, the anchor
stage of a group and its epilogue, a reduction's size."""

from __future__ import annotations

import math

from nnvm import te
from nnvm.generic_schedule import guarded_inputs_of_reductions
from nnvm.te.tensor import ComputeOp
from nnvm.tir.expr import Const
from nnvm.tir.simplify import simplify


def vector_lanes(target) -> int:
    """float32 lanes of the widest vector unit ``target`` has, as its backend answers
    (``Backend.vector_lanes``: 16 with AVX-512, 8 with AVX2, 4 with NEON): the layer asks, never
    guesses, so a new CPU backend sizes these templates by answering one method."""
    return target.backend.vector_lanes(target)


def extent(iv) -> int | None:
    """The constant extent of an axis, None when it is symbolic."""
    return constant(iv.dom.extent)


def constant(value) -> int | None:
    """An int, or an expression (a tensor's dim) that simplifies to a constant; None when it is symbolic."""
    if isinstance(value, int):
        return value
    ext = simplify(value)
    return int(ext.value) if isinstance(ext, Const) else None


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` not above ``limit`` (so tiles need no bounds guards)."""
    for b in range(min(n, limit), 0, -1):
        if n % b == 0:
            return b
    return 1


def divisors(n: int, limit: int, low: int = 1) -> list:
    """Divisors of ``n`` in ``[low, limit]``, ascending: the tile sizes a template offers."""
    return [d for d in range(max(low, 1), min(n, limit) + 1) if n % d == 0]


def sole_anchor(sch, tag: str):
    """The one compute stage of ``sch`` tagged ``tag`` when it is the group's only reduction, else None
    (a second reduction in the group is not the shape these templates know)."""
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    anchors = [st for st in computes if st.op.tag == tag]
    if len(anchors) != 1 or any(st.op.reduce_axis for st in computes if st is not anchors[0]):
        return None
    return anchors[0]


def tagged_stages(group, anchor: str, tags: tuple, required: tuple):
    """``(schedule, {tag: stage})`` of a one-output group anchored by ``anchor``, holding the compute
    stages tagged ``tags`` (all of ``required`` among them), else None: how the 8-bit templates find
    their stages."""
    if group.anchor_op != anchor or len(group.outputs) != 1:
        return None
    sch = te.create_schedule([group.outputs[0].op])
    found = {st.op.tag: st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag in tags}
    return (sch, found) if set(required) <= set(found) else None


def inline_epilogue(sch, keep) -> None:
    """Inline every compute stage that is not an output and whose op is not in ``keep`` (the anchor and
    the padded inputs that stay materialized): the epilogue then runs on the anchor's registers."""
    for stage in sch.stages:
        if isinstance(stage.op, ComputeOp) and not stage.is_output and stage.op not in keep:
            stage.compute_inline()


def single_conv_stage(group, depthwise: bool):
    """(schedule, conv stage, padded stages) for a float32 NCHW conv2d group with one output and one
    reduction, ``depthwise`` or not (plain or grouped); None for anything else."""
    if group.anchor_op != "conv2d" or len(group.outputs) != 1:
        return None
    attrs = group.anchor_attrs
    if attrs.get("layout", "NCHW") not in ("NCHW", None):
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 4:
        return None
    sch = te.create_schedule([out.op])
    conv = sole_anchor(sch, "conv2d")
    if conv is None:
        return None
    is_depthwise = bool(conv.op.attrs.get("depthwise"))
    if depthwise != is_depthwise:
        return None
    return sch, conv, guarded_inputs_of_reductions(sch)


def reduction_steps(op) -> int:
    """Multiply-adds into each output element of a reduction stage: the product of its reduce axes."""
    return math.prod(extent(iv) or 1 for iv in op.reduce_axis)


def reduction_flops(op) -> float:
    """Multiply-adds x 2 of a reduction stage (conv2d, a Winograd product): its output size times its
    reduction size."""
    return 2.0 * math.prod(extent(iv) or 1 for iv in op.axis) * reduction_steps(op)

"""Registers the CPU layer for the target key ``cpu`` through the same hooks any plugin uses.

It serves a target when the target has the key ``cpu`` and its backend answers ``Backend.vector_lanes``
(x86: 16/8/4 from its features; Arm: 4); the blocked layout pass runs where the backend's
``blocked_layout`` says yes (x86). ``trylast``: a backend plugin's own answer for its target kind wins,
as for the GPU layer (``nnvm.gpu.plugin``).
"""

from nnvm.hookspecs import hookimpl


def serves(target) -> bool:
    """Whether the CPU layer serves ``target``: the key ``cpu`` and an installed backend that answers
    ``vector_lanes`` (one that does not, or no backend at all, leaves every group to the generic
    schedule)."""
    if "cpu" not in getattr(target, "keys", ()):
        return False
    from nnvm.plugins import backends

    found = backends().get(target.kind)
    return found is not None and found[1].vector_lanes(target) is not None


@hookimpl
def nnvm_register_ops(register):
    """``dense_packed`` (dense over a weight packed for streaming; ``batched_weight_pack`` packs a batched
    matmul's right side for it) and ``grouped_weight_pack`` (grouped convolution weights for blocks that
    straddle groups), made by the layout pass (``layout.py``)."""
    from nnvm.cpu.layout import GROUPED_WEIGHT_PACK
    from nnvm.cpu.schedule_dense import BATCHED_WEIGHT_PACK, DENSE_PACKED

    register(DENSE_PACKED)
    register(BATCHED_WEIGHT_PACK)
    register(GROUPED_WEIGHT_PACK)


@hookimpl(trylast=True)
def nnvm_schedule_template(target, group):
    """The first template of ``templates.TEMPLATE_BUILDERS`` that takes the group (conv2d, depthwise
    conv2d, dense, softmax ...); None lets the generic schedule serve it."""
    if not serves(target):
        return None
    from nnvm.cpu.templates import schedule_template

    return schedule_template(target, group)


@hookimpl(trylast=True)
def nnvm_schedule_group(target, group):
    """Groups that only move data (a channel shuffle, a layout transform) with their rows kept apart
    (``schedule_injective.py``); None lets the generic schedule serve every other untemplated group."""
    if not serves(target):
        return None
    from nnvm.cpu.schedule_injective import schedule_index_remap

    return schedule_index_remap(target, group)


@hookimpl(trylast=True)
def nnvm_alter_op_layout(target, node, in_types):
    """conv2d in NCHW[x]c, dense with a constant weight packed (``layout.py``), where the backend wants
    the blocked layout; every other node keeps its layout."""
    if not serves(target) or not target.backend.blocked_layout(target):
        return None
    from nnvm.cpu.layout import alter_op_layout

    return alter_op_layout(target, node, in_types)

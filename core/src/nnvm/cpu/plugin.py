"""Registers the CPU layer for the target key ``cpu`` through the same hooks any plugin uses.

It serves a target when the target has the key ``cpu`` and its backend answers ``Backend.vector_lanes``
(x86: 16/8/4 from its features; Arm: 4) (``nnvm.cpu.serves``); the blocked layout pass, and the
channel-shuffle pass that follows it, run where the backend's ``blocked_layout`` says yes (x86); its
8-bit part wherever the backend has the ``dot_u8s8`` intrinsic (x86 and Arm).
``trylast``: a backend plugin's own answer for its target kind wins,
as for the GPU layer (``nnvm.gpu.plugin``).
"""

from nnvm.cpu import serves, templates
from nnvm.cpu.concat_in_place import concat_in_place
from nnvm.cpu.expand_depthwise import EXPAND_DEPTHWISE_NCHWC, fuse_expand_depthwise
from nnvm.cpu.grouped import SPLIT_WEIGHT_PACK
from nnvm.cpu.layout_choice import GROUPED_WEIGHT_PACK, alter_op_layout
from nnvm.cpu.patches import PATCH_WEIGHT_PACK, PATCHES
from nnvm.cpu.schedule_concat import schedule_channel_concat
from nnvm.cpu.schedule_dense import BATCHED_WEIGHT_PACK, DENSE_PACKED
from nnvm.cpu.schedule_injective import schedule_index_remap
from nnvm.cpu.schedule_pool import schedule_pool_rows
from nnvm.cpu.schedule_qconv import (
    DOT_ZERO_POINT_CORRECTION,
    QCONV2D_NCHWC,
    QCONV2D_WEIGHT_PACK,
    alter_qconv2d_nchwc,
)
from nnvm.cpu.schedule_qdense import QDENSE_PACKED, QDENSE_WEIGHT_PACK, alter_qdense
from nnvm.cpu.schedule_qdepthwise import QDEPTHWISE_NCHWC, QDEPTHWISE_WEIGHT_PACK, alter_qdepthwise
from nnvm.cpu.shuffle import CHANNEL_SHUFFLE_NCHWC, fuse_channel_shuffle, schedule_channel_shuffle
from nnvm.cpu.softmax_rows import SOFTMAX_EXP, SOFTMAX_NORMALIZE
from nnvm.hookspecs import hookimpl
from nnvm.passes.manager import Pass


@hookimpl
def nnvm_register_ops(register):
    """``dense_packed`` (dense over a weight packed for streaming; ``batched_weight_pack`` packs a batched
    matmul's right side for it), ``grouped_weight_pack`` (grouped convolution weights for blocks that
    straddle groups), ``split_weight_pack`` (``grouped.py``), ``patches`` and ``patch_weight_pack`` (a patch
    embedding as a product, ``patches.py``) and softmax's two row kernels
    (``softmax_rows.py``), made by the layout pass (``layout_choice.py``); ``channel_shuffle_nchwc`` and
    ``expand_depthwise_nchwc``, made by the passes below."""
    register(DENSE_PACKED)
    register(BATCHED_WEIGHT_PACK)
    register(GROUPED_WEIGHT_PACK)
    register(SPLIT_WEIGHT_PACK)
    register(CHANNEL_SHUFFLE_NCHWC)
    register(EXPAND_DEPTHWISE_NCHWC)
    register(PATCHES)
    register(PATCH_WEIGHT_PACK)
    register(SOFTMAX_EXP)
    register(SOFTMAX_NORMALIZE)
    register(QCONV2D_NCHWC)  # schedule_qconv.py: qconv2d over channel-blocked uint8 activations
    register(QCONV2D_WEIGHT_PACK)
    register(DOT_ZERO_POINT_CORRECTION)
    register(QDENSE_PACKED)  # schedule_qdense.py: qdense over a weight packed for dot_u8s8
    register(QDENSE_WEIGHT_PACK)
    register(QDEPTHWISE_NCHWC)  # schedule_qdepthwise.py: depthwise qconv2d in the same channel blocks
    register(QDEPTHWISE_WEIGHT_PACK)


@hookimpl
def nnvm_register_passes(register):
    """``fuse_channel_shuffle``: a ShuffleNet channel shuffle and the layout transforms around it as one
    ``channel_shuffle_nchwc`` in NCHW[x]c (``shuffle.py``); ``fuse_expand_depthwise``: a 1x1 expansion
    and the depthwise convolution reading it as one ``expand_depthwise_nchwc`` (``expand_depthwise.py``).
    Both after the layout pass, where they run. Last, ``concat_in_place``: concatenations whose inputs the
    memory plan can place inside the output, marked so that none is copied (``concat_in_place.py``)."""
    register(Pass("fuse_channel_shuffle", fuse_channel_shuffle, 3, ("infer_types",),
                  "channel shuffles (reshape, transpose, reshape) in NCHW[x]c as channel_shuffle_nchwc"))
    register(Pass("fuse_expand_depthwise", fuse_expand_depthwise, 3, ("infer_types",),
                  "a 1x1 expansion read only by a depthwise convolution, with it, as expand_depthwise_nchwc"))
    register(Pass("concat_in_place", concat_in_place, 3, ("infer_types",),
                  "concatenations over leading dims of 1 planned in place: no copy, no kernel"))


@hookimpl(trylast=True)
def nnvm_schedule_template(target, group):
    """The first template of ``templates.TEMPLATE_BUILDERS`` that takes the group (conv2d, depthwise
    conv2d, dense, softmax ...); None lets the generic schedule serve it."""
    if not serves(target):
        return None

    return templates.schedule_template(target, group)  # through the module: tests spy on it


@hookimpl(trylast=True)
def nnvm_schedule_group(target, group):
    """Groups that only move data (a channel shuffle, a layout transform) with their rows kept apart
    (``schedule_injective.py``, ``shuffle.py``), average pools a row at a time (``schedule_pool.py``),
    channel concatenations per channel block (``schedule_concat.py``); None lets the generic schedule
    serve every other untemplated group."""
    if not serves(target):
        return None

    return (schedule_channel_shuffle(target, group) or schedule_pool_rows(target, group)
            or schedule_channel_concat(target, group) or schedule_index_remap(target, group))


@hookimpl(trylast=True)
def nnvm_alter_op_layout(target, node, in_types):
    """8-bit convolutions in channel-blocked uint8 and 8-bit dense packed for ``dot_u8s8``
    (``schedule_qconv.py``, ``schedule_qdepthwise.py``, ``schedule_qdense.py``) wherever the backend has
    that intrinsic (x86, Arm); conv2d in NCHW[x]c and dense with a constant weight packed
    (``layout_choice.py``) where the backend wants the blocked layout (x86); every other node keeps its
    layout."""
    if not serves(target):
        return None
    quantized = (alter_qconv2d_nchwc(target, node, in_types) or alter_qdepthwise(target, node, in_types)
                 or alter_qdense(target, node, in_types))
    if quantized is not None or not target.backend.blocked_layout(target):
        return quantized
    return alter_op_layout(target, node, in_types)

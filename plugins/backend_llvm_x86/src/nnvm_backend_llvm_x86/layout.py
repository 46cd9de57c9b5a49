"""Which layout each operator runs in on x86: conv2d in NCHW[x]c, x the vector width in float32 lanes.

In ``NCHW16c`` (AVX-512; ``NCHW8c`` with AVX2) sixteen output channels of one pixel are one vector
register, so the convolution's inner step is a broadcast input scalar times a weight vector into a
vector accumulator, with no gathers and no horizontal sums; the weights are pre-transformed to
``OIHW{i}i{o}o`` so the vector of 16 output channels for one input channel is contiguous.

A tensor's block depends only on its channel count (the widest of lanes, lanes/2 dividing it), so a
producer and every consumer agree without negotiation, and residual adds meet in one layout.
Convolutions whose input has few channels (the 3-channel stem) read plain ``NCHW`` data: a block of
one is the same memory, and no transform kernel is needed at the model input.

3x3 stride-1 convolutions may run as Winograd F(2x2, 3x3) instead (``winograd.py`` decides). Grouped
convolutions (ShuffleNet, ResNeXt, RegNet) are blocked within each group (``grouped_blocks``).

``NNVM_X86_LAYOUT=0`` keeps every operator in NCHW (an A/B switch for benchmarks).
"""

from __future__ import annotations

from nnvm.passes.alter_layout import AlteredNode
from nnvm_backend_llvm_x86.switches import enabled
from nnvm_backend_llvm_x86.winograd import alter_winograd


def channel_block(channels: int, lanes: int) -> int | None:
    """The block for a tensor of ``channels`` channels: lanes or half of it when it divides, else None."""
    for b in (lanes, lanes // 2):
        if b >= 4 and channels % b == 0:
            return b
    return None


def output_block(out_channels: int, lanes: int) -> int | None:
    """The block of a plain convolution's output: its tensor's block (``channel_block``), or a whole
    vector with a partial last block (zero weights, the padding cropped by the transform back to NCHW)
    when no block divides the channels and the padding is under half of them (ShuffleNet's 60), or
    when it costs under 2% (SqueezeNet's 1000 classes run in 63 blocks of 16 at twice the speed of
    125 half-width blocks of 8). Only outputs are padded: a convolution never reads padded channels
    (its input block divides its channels), so what elementwise followers leave in the padding is
    never seen."""
    block = channel_block(out_channels, lanes)
    if block == lanes or out_channels < lanes:
        return block
    padding = -out_channels % lanes
    if block is None:
        return lanes if padding * 2 <= out_channels else None
    return lanes if padding * 64 <= out_channels else block


def grouped_blocks(channels: int, out_channels: int, groups: int, lanes: int) -> tuple | None:
    """(input block, output block) of a grouped (not depthwise) convolution, or None to keep NCHW.

    A block must not straddle two groups, so the output block divides the output channels per group:
    the tensor's own block when it does, else the widest of lanes, lanes/2, lanes/4 (at least 4) that
    does (the consumers then read the output through a transform). The input is read in its tensor's
    block when that divides the input channels per group, else as plain NCHW (one channel, broadcast)."""
    per_group_in, per_group_out = channels // groups, out_channels // groups
    oc = channel_block(out_channels, lanes)
    if oc is None or per_group_out % oc:
        oc = next((b for b in (lanes, lanes // 2, lanes // 4) if b >= 4 and per_group_out % b == 0), None)
    if oc is None:
        return None
    ic = channel_block(channels, lanes)
    if ic is None or per_group_in % ic:
        ic = 1
    return ic, oc


def alter_conv2d(target, node, in_types) -> AlteredNode | None:
    """conv2d (plain or depthwise, float32, 4-D) -> conv2d_nchwc, or None to keep NCHW."""
    from nnvm.ops.registry import get_op
    from nnvm_backend_llvm_x86.schedules import vector_lanes

    if node.op != "conv2d" or len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    if data.dtype != "float32" or len(data.shape) != 4 or len(weight.shape) != 4:
        return None
    attrs = get_op("conv2d").normalize_attrs(dict(node.attrs), node.name)
    lanes = vector_lanes(target)
    channels, out_channels = data.shape[1], weight.shape[0]
    groups = attrs["groups"]
    oc = channel_block(out_channels, lanes)
    if groups == 1:
        oc = output_block(out_channels, lanes)
        if oc is None:
            return None
    new_attrs = {"strides": tuple(attrs["strides"]), "padding": tuple(attrs["padding"]),
                 "dilation": tuple(attrs["dilation"]), "groups": groups}
    if groups == 1:
        ic = channel_block(channels, lanes)
        winograd = alter_winograd(node, attrs, data, weight, ic, oc)
        if winograd is not None:
            return winograd
        data_layout = f"NCHW{ic}c" if ic else "NCHW"
        weight_layout = f"OIHW{ic or 1}i{oc}o"
    elif groups == channels == out_channels and weight.shape[1] == 1:
        if oc is None:
            return None
        data_layout, weight_layout = f"NCHW{oc}c", f"OIHW1i{oc}o"
    else:
        blocks = grouped_blocks(channels, out_channels, groups, lanes)
        if blocks is None:
            return None
        ic, oc = blocks
        data_layout, weight_layout = (f"NCHW{ic}c" if ic > 1 else "NCHW"), f"OIHW{ic}i{oc}o"
    return AlteredNode("conv2d_nchwc", new_attrs, inputs=(("NCHW", data_layout), ("OIHW", weight_layout)),
                       outputs=(("NCHW", f"NCHW{oc}c"),))


MAX_PACKED_BATCH = 16  # dense_packed streams the weight once per this many rows at most: a GEMV's kernel


def alter_dense(target, node, in_types) -> AlteredNode | None:
    """dense (float32, small batch, constant weight) -> dense_packed over the weight packed ``NK{b}n``
    (``b`` the widest of lanes, lanes/2, lanes/4 dividing the outputs), or None to keep it. A 2-D
    ``matmul`` by a constant ``[K, N]`` is the same product: its weight is packed from ``KN``."""
    from nnvm_backend_llvm_x86.schedules import vector_lanes

    if len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    if data.dtype != "float32" or len(data.shape) != 2 or len(weight.shape) != 2:
        return None
    if data.shape[0] > MAX_PACKED_BATCH:
        return None
    lanes = vector_lanes(target)
    src = "NK" if node.op == "dense" else "KN"
    n = weight.shape[src.index("N")]
    block = next((b for b in (lanes, lanes // 2, lanes // 4) if b >= 4 and n % b == 0), None)
    if block is None:
        return None
    return AlteredNode("dense_packed", {}, inputs=(None, (src, f"NK{block}n")), outputs=((None, None),),
                       constant_inputs=(1,))


def alter_op_layout(target, node, in_types) -> AlteredNode | None:
    """Entry point for ``nnvm_alter_op_layout`` on ``llvm`` targets."""
    if not enabled("NNVM_X86_LAYOUT"):
        return None
    if node.op == "conv2d":
        return alter_conv2d(target, node, in_types)
    if node.op in ("dense", "matmul"):
        return alter_dense(target, node, in_types)
    return None

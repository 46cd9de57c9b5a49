"""Which layout each operator runs in where the backend wants blocked layouts (x86): conv2d in NCHW[x]c.

x is the vector width in float32 lanes.

In ``NCHW16c`` (AVX-512; ``NCHW8c`` with AVX2) sixteen output channels of one pixel are one vector
register, so the convolution's inner step is a broadcast input scalar times a weight vector into a
vector accumulator, with no gathers and no horizontal sums; the weights are pre-transformed to
``OIHW{i}i{o}o`` so the vector of 16 output channels for one input channel is contiguous.

A tensor's block depends only on its channel count (the widest of lanes, lanes/2 dividing it; whole
vectors with a padded last block where lanes/2 divides it, ``padded_block``), so a producer and every
consumer agree without negotiation, and residual adds meet in one layout.
Convolutions whose input has few channels (the 3-channel stem) read plain ``NCHW`` data: a block of
one is the same memory, and no transform kernel is needed at the model input.

3x3 stride-1 convolutions may run as Winograd F(2x2, 3x3) instead (``winograd.py`` decides). Grouped
convolutions (ShuffleNet, ResNeXt, RegNet) are blocked within each group (``grouped_blocks``); where no
block divides the channels per group they read sub-blocks of the blocked input (``subblock_read``), and
1x1 ones may run split (``grouped.py``).

``cpu_switches={"layout": "0"}`` keeps every operator in NCHW (an A/B switch for benchmarks).
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.cpu.cost_model import machine_of
from nnvm.cpu.grouped import plan_cost, split_plan
from nnvm.cpu.patches import is_patch_embedding
from nnvm.cpu.schedule_dense import computed_rows, padded_blocks, padded_rows
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.cpu.switches import enabled
from nnvm.cpu.winograd import alter_winograd
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.blocked_layout import group_window, window_start
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern, get_op
from nnvm.passes.alter_op_layout import AlteredNode


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
    125 half-width blocks of 8). A convolution never reads padded channels (its input block divides
    its channels, or it reads sub-blocks of a ``padded_block`` tensor), so what elementwise followers
    leave in the padding is never seen."""
    block = channel_block(out_channels, lanes)
    if block == lanes or out_channels < lanes:
        return block
    padding = -out_channels % lanes
    if block is None:
        return lanes if padding * 2 <= out_channels else None
    return lanes if padding * 64 <= out_channels else block


def padded_block(channels: int, lanes: int) -> bool:
    """Whether a tensor of ``channels`` channels that half a vector divides (24, 40, 72 with 16 lanes) is
    stored in whole vectors instead, its last block part padding (``cpu_switches["padded_blocks"]``): the
    convolution writing it then runs full-width vectors (24 -> 32 lanes: a third more multiply-adds at
    twice the width; MobileNetV2's 1x1 convolutions to 24 channels ran 1.5x faster, as onnxruntime's
    NCHWc rounds channels up), and a plain convolution reading it reads sub-blocks of ``lanes / 2``
    (``conv2d_nchwc`` with a narrower weight block), so the padded lanes are never read. Other readers
    (depthwise, grouped, Winograd, pooling followed by them) get it through a transform."""
    return (channels % lanes == lanes // 2 and channels > lanes and lanes // 2 >= 4
            and enabled("padded_blocks"))


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


MAX_STRADDLE_WORK = 3.0  # multiply-adds of straddling blocks / useful ones, at most


def straddling_plan(channels: int, out_channels: int, groups: int, lanes: int, aligned: int | None):
    """(input block, output block, window) for a grouped convolution whose blocks straddle groups, when
    that beats the aligned block ``aligned`` (or there is none), else None.

    With few output channels per group (ShuffleNet's 240 -> 60 in 3 groups: 20 each) the aligned block
    is 4 lanes, a quarter of an AVX-512 vector. Full-width blocks that straddle groups read every
    input channel of the groups they touch (zero weights for the others): more multiply-adds, at four
    times the width. Taken when the work per useful output lane is under 3/4 of the aligned block's,
    and the extra work at most ``MAX_STRADDLE_WORK`` times the useful one."""
    oc = lanes
    blocks = -(-out_channels // oc)
    window = max(group_window(co, oc, out_channels, groups, channels)[1] for co in range(blocks))
    waste = blocks * oc * window / (out_channels * (channels // groups))
    if waste > MAX_STRADDLE_WORK or (aligned is not None and waste * aligned / oc >= 0.75):
        return None
    ic = channel_block(channels, lanes)
    if ic is None or (channels // groups) % ic:
        ic = 1
    return ic, oc, window


def subblock_read(channels: int, groups: int, lanes: int) -> tuple | None:
    """(data block, read block) for a grouped convolution whose channels per group no tensor block
    divides (ShuffleNet's 28, 34, 68), or None to read plain NCHW. The data stays in its tensor's block
    ``b`` and the convolution reads sub-blocks of the widest of b, b/2, .. 1 dividing the channels per
    group (channel ``c`` at block ``c // b``, lane ``c % b``): the broadcast input scalars are the same
    either way, and the transform of the whole tensor back to NCHW in front of the convolution goes
    (ShuffleNet: 29 of them, 0.2 ms of 3 at batch 1, 2.5 ms at batch 8). ``cpu_switches={"grouped": "0"}``:
    None."""
    block = channel_block(channels, lanes)
    if block is None or not enabled("grouped"):
        return None
    per_group = channels // groups
    read = next(b for b in (block, block // 2, block // 4, block // 8, 1) if b and per_group % b == 0)
    return block, read


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("grouped_weight_pack", in_types, ("weight",))
    if len(w.shape) != 4 or w.shape[1] * attrs["groups"] != attrs["channels"] or w.shape[0] % attrs["groups"]:
        raise Error(f"grouped_weight_pack: the weight must be OIHW with {attrs['channels']} // "
                    f"{attrs['groups']} input channels per group, got shape {w.shape}")
    oc, ic, window = attrs["out_block"], attrs["in_block"], attrs["window"]
    return [TensorType((-(-w.shape[0] // oc), window // ic, w.shape[2], w.shape[3], ic, oc), w.dtype)]


def _pack_source(co, lane, ro, ri, attrs, out_channels):
    """(output channel, input channel within its group) that packed element [co, ro, .., .., ri, lane]
    holds; it is a weight when the channel is below ``out_channels`` and the input one in [0, per group)."""
    oc, ic, groups, channels = attrs["out_block"], attrs["in_block"], attrs["groups"], attrs["channels"]
    o = co * oc + lane
    c = window_start(co, oc, out_channels, groups, channels, attrs["window"]) + ro * ic + ri
    local = c - (o // (out_channels // groups)) * (channels // groups)
    return o, local


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    out_channels, per_group = shape_of(w)[0], shape_of(w)[1]

    def body(co, ro, ky, kx, ri, lane):
        o, local = _pack_source(co, lane, ro, ri, attrs, out_channels)
        valid = te.all_of(o < out_channels, local >= 0, local < per_group)
        return te.if_then_else(valid, w[o, local, ky, kx], te.const(0, w.dtype))

    return [te.compute(out_types[0].shape, body, name="grouped_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    (w,) = xs
    out_channels, per_group = w.shape[:2]
    (shape,) = _pack_infer([TensorType(w.shape, str(w.dtype))], attrs)
    blocks, _, kh, kw, ic, oc = shape.shape
    out = np.zeros((blocks, oc, attrs["window"], kh, kw), w.dtype)  # [co, lane, r, ky, kx]
    lanes, r = np.arange(oc)[:, None], np.arange(attrs["window"])[None, :]
    for co in range(blocks):  # all lanes and window channels of a block at once
        o, local = _pack_source(co, lanes, r // ic, r % ic, attrs, out_channels)
        o = np.broadcast_to(o, local.shape)
        valid = (o < out_channels) & (local >= 0) & (local < per_group)
        out[co][valid] = w[o[valid], local[valid]]
    # [co, lane, ro * ic + ri, ky, kx] -> [co, ro, ky, kx, ri, lane]
    out = out.reshape(blocks, oc, -1, ic, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return [np.ascontiguousarray(out)]


GROUPED_WEIGHT_PACK = OpDef(
    "grouped_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE, num_inputs=(1, 1),
    attrs={"groups": Attr(int), "channels": Attr(int, doc="input channels of the convolution"),
           "in_block": Attr(int), "out_block": Attr(int),
           "window": Attr(int, doc="input channels one output block reads")},
    evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an OIHW grouped-conv weight as conv2d_nchwc's OIHW[i]i[o]o over windows that straddle groups "
        "(zeros for other groups' channels and for a padded last block)")


def alter_conv2d(target, node, in_types) -> AlteredNode | None:
    """conv2d (plain, depthwise or grouped, float32, 4-D) -> conv2d_nchwc, or None to keep NCHW."""
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
        if oc == lanes // 2 and padded_block(out_channels, lanes):
            oc = lanes
        if oc is None:
            return None
    new_attrs = {"strides": tuple(attrs["strides"]), "padding": tuple(attrs["padding"]),
                 "dilation": tuple(attrs["dilation"]), "groups": groups}
    if groups == 1:
        ic = channel_block(channels, lanes)
        patch = alter_patch_embedding(target, attrs, data, weight, lanes) if ic is None else None
        if patch is not None:
            return patch
        winograd = alter_winograd(node, attrs, data, weight, ic, oc)
        if winograd is not None:
            return winograd
        data_layout = f"NCHW{ic}c" if ic else "NCHW"
        weight_layout = f"OIHW{ic or 1}i{oc}o"
        if ic == lanes // 2 and padded_block(channels, lanes):  # its producer wrote it padded: read 8 of 16
            data_layout = f"NCHW{lanes}c"
    elif groups == channels == out_channels and weight.shape[1] == 1:
        if oc is None:
            return None
        data_layout, weight_layout = f"NCHW{oc}c", f"OIHW1i{oc}o"
    else:
        blocks = grouped_blocks(channels, out_channels, groups, lanes)
        plan = straddling_plan(channels, out_channels, groups, lanes, blocks and blocks[1])
        sub = subblock_read(channels, groups, lanes)
        split = split_plan(attrs, weight.shape, channels, lanes,
                           plan_cost(channels, out_channels, groups, blocks, plan))
        if split is not None:
            data_layout = f"NCHW{sub[0]}c" if sub else "NCHW"
            return AlteredNode("conv2d_nchwc", {**new_attrs, "out_channels": out_channels, "split": 1},
                               inputs=(("NCHW", data_layout), None), outputs=(("NCHW", f"NCHW{lanes}c"),),
                               prepare=(None, ("split_weight_pack", split)), constant_inputs=(1,))
        if plan is not None:
            ic, oc, window = plan
            data_layout = f"NCHW{ic}c" if ic > 1 else f"NCHW{sub[0]}c" if sub else "NCHW"
            ic = sub[1] if ic == 1 and sub else ic
            pack = {"groups": groups, "channels": channels, "in_block": ic, "out_block": oc, "window": window}
            return AlteredNode("conv2d_nchwc", {**new_attrs, "out_channels": out_channels},
                               inputs=(("NCHW", data_layout), None),
                               outputs=(("NCHW", f"NCHW{oc}c"),),
                               prepare=(None, ("grouped_weight_pack", pack)), constant_inputs=(1,))
        if blocks is None:
            return None
        ic, oc = blocks
        data_layout = f"NCHW{ic}c" if ic > 1 else f"NCHW{sub[0]}c" if sub else "NCHW"
        ic = sub[1] if ic == 1 and sub else ic
        weight_layout = f"OIHW{ic}i{oc}o"
    return AlteredNode("conv2d_nchwc", new_attrs, inputs=(("NCHW", data_layout), ("OIHW", weight_layout)),
                       outputs=(("NCHW", f"NCHW{oc}c"),))


def alter_patch_embedding(target, attrs, data, weight, lanes: int) -> AlteredNode | None:
    """A convolution with non-overlapping windows over few channels (``patches.py``) -> ``dense_packed``
    of its input's windows as rows by its weight packed ``NK{b}n``, its output leaving in ``NHWC``; None
    for any other convolution."""
    if not is_patch_embedding(attrs, weight.shape) or not enabled("patch_dense"):
        return None
    out_channels, kernel = weight.shape[0], tuple(weight.shape[2:])
    block = packed_block(out_channels, lanes)
    if block is None:
        return None
    product = packed_attrs(target, out_channels, block, data.shape[3] // kernel[1])  # rows: a patch row
    return AlteredNode("dense_packed", product, inputs=(None, None), outputs=(("NCHW", "NHWC"),),
                       prepare=(("patches", {"kernel": kernel}), ("patch_weight_pack", {"block": block})),
                       constant_inputs=(1,))


def packed_block(n: int, lanes: int) -> int | None:
    """The block of a packed weight with ``n`` outputs: the widest of lanes, lanes/2, lanes/4 dividing
    ``n``; else the widest whose zero-padded last block is under half of ``n`` (GPT-2's 50257-token
    head runs in 3142 blocks of 16, the last one 15 zeros); None when ``n`` is under 4."""
    widths = [b for b in (lanes, lanes // 2, lanes // 4) if b >= 4]
    return next((b for b in widths if n % b == 0), None) or next(
        (b for b in widths if b <= n and (-n % b) * 2 <= n), None)


def packed_attrs(target, n: int, block: int, rows: int | None) -> dict:
    """``dense_packed``'s attributes for ``n`` outputs in blocks of ``block`` over ``rows`` data rows (None:
    not known): ``units`` where the last block is part padding, ``blocks`` where the product computes
    more blocks than the weight has (``padded_blocks``, for this target's tiles), ``padded_rows`` where
    it computes more rows than ``padded_rows`` says (``computed_rows``, for this target's tiles)."""
    attrs = {"units": n} if n % block else {}
    blocks = -(-n // block)
    if rows is not None:
        machine = machine_of(target)
        computed = padded_blocks(machine, blocks, padded_rows(rows))
        if computed != blocks:
            attrs["blocks"] = computed
        padded = computed_rows(machine, computed, rows)
        if padded != padded_rows(rows):
            attrs["padded_rows"] = padded
    return attrs


def alter_dense(target, node, in_types) -> AlteredNode | None:
    """dense (float32, constant weight) -> dense_packed over the weight packed ``NK{b}n`` (``b`` from
    ``packed_block``), or None to keep it, at any row count: the Gemms of Hugging Face's GPT-2 (its
    ``Conv1D``, ``addmm`` over 128 token rows) ran on the rfactor schedule when it stopped at 16 rows,
    three times onnxruntime's time for the whole model. A ``matmul`` by a constant ``[K, N]`` is the same
    product whatever the rank of its left side (torch exports ``nn.Linear`` on ``[B, S, K]`` so) and
    however many rows it has (the generic matmul runs at a fifth of the packed speed): its weight is
    packed from ``KN`` and ``dense_packed`` reads ``[..., K]`` data as it is.

    A batched ``matmul`` of two activations with the same batch axes (attention's ``Q @ K^T`` and
    ``softmax @ V``, ``[B, H, S, D]``) runs the same way: its right side is packed per batch and head
    (``batched_weight_pack``: ``[..., K, N]`` -> ``[..., N/b, K, b]``, a partial last block when no block
    divides ``N``, as ViT's 197 tokens) by a kernel that also takes in the ``Transpose`` before it, so
    ``K^T`` is read strided from ``K`` once rather than copied and then read again.

    Where a product with many rows would leave tiles of one weight block, it computes more blocks than
    the weight has (``padded_blocks``, for this target's tiles: the op's ``blocks``)."""
    if len(in_types) != 2 or None in in_types:
        return None
    data, weight = in_types
    if data.dtype != "float32" or len(weight.shape) < 2:
        return None
    batch = len(weight.shape) - 2
    if not batch and (weight.symbolic or not isinstance(data.shape[-1], int)):
        # symbolic rows are padded to a multiple of the tile rows (``padded_rows``); a symbolic depth of
        # a constant weight keeps the generic product
        return None
    if batch and (node.op != "matmul" or tuple(data.shape[:-2]) != tuple(weight.shape[:-2])):
        return None  # a broadcast batch axis: the generic matmul
    if node.op == "dense" and len(data.shape) != 2:
        return None
    if node.op == "matmul" and len(data.shape) < 2:
        return None
    lanes = vector_lanes(target)
    src = "NK" if node.op == "dense" else "KN"
    n = weight.shape[-2 + src.index("N")]
    if not isinstance(n, int):  # attention's Q @ K^T over a symbolic sequence: whole vectors, cropped
        attrs = {"units": n}
        return AlteredNode("dense_packed", attrs, inputs=(None, None), outputs=((None, None),),
                           prepare=(None, ("batched_weight_pack", {"block": lanes})))
    if node.op == "dense" and n % 4:  # a dense with a few odd outputs (7) stays on the rfactor schedule
        return None
    block = packed_block(n, lanes)
    if block is None:
        return None
    rows = data.shape[-2]
    attrs = packed_attrs(target, n, block, rows if isinstance(rows, int) else None)
    if batch:
        return AlteredNode("dense_packed", attrs, inputs=(None, None), outputs=((None, None),),
                           prepare=(None, ("batched_weight_pack", {"block": block})))
    return AlteredNode("dense_packed", attrs, inputs=(None, (src, f"NK{block}n")), outputs=((None, None),),
                       constant_inputs=(1,))


def alter_concat(target, node, in_types) -> AlteredNode | None:
    """A channel concatenation of 4-D float32 tensors whose channel counts all take the same block ->
    the same ``concatenate`` on ``NCHW{b}c`` data along the block axis (a block never mixes two
    inputs), or None. DenseNet's and GoogLeNet's concatenations read convolution outputs that are
    already blocked and feed convolutions (through DenseNet's batch norm and ReLU) and max pools that
    read blocked data: in NCHW every one of them transformed each input back to NCHW and the result to
    blocks again, about a fifth of DenseNet-121's time at batch 1."""
    if not in_types or None in in_types or any(t.dtype != "float32" or len(t.shape) != 4 for t in in_types):
        return None
    if get_op("concatenate").normalize_attrs(dict(node.attrs), node.name)["axis"] % 4 != 1:
        return None
    lanes = vector_lanes(target)
    blocks = {channel_block(t.shape[1], lanes) for t in in_types}
    blocks.add(channel_block(sum(t.shape[1] for t in in_types), lanes))
    if len(blocks) != 1 or None in blocks:
        return None
    layout = f"NCHW{blocks.pop()}c"
    return AlteredNode("concatenate", {"axis": 1}, inputs=tuple(("NCHW", layout) for _ in in_types),
                       outputs=(("NCHW", layout),))


def alter_softmax(target, node, in_types) -> AlteredNode | None:
    """A float32 softmax along the last axis -> ``softmax_normalize(softmax_exp(x))`` (``softmax_rows.py``:
    each ``exp`` computed once, a causal mask's underflow flushed to 0), or None to keep it."""
    if len(in_types) != 1 or in_types[0] is None or in_types[0].dtype != "float32" or not in_types[0].shape:
        return None
    rank = len(in_types[0].shape)
    if get_op("softmax").normalize_attrs(dict(node.attrs), node.name)["axis"] % rank != rank - 1:
        return None
    return AlteredNode("softmax_normalize", {}, inputs=(None,), outputs=((None, None),),
                       prepare=(("softmax_exp", {}),))


def alter_op_layout(target, node, in_types) -> AlteredNode | None:
    """What ``nnvm_alter_op_layout`` answers where the backend wants the blocked layout (``plugin.py``)."""
    if not enabled("layout"):
        return None
    if node.op == "conv2d":
        return alter_conv2d(target, node, in_types)
    if node.op in ("dense", "matmul"):
        return alter_dense(target, node, in_types)
    if node.op == "concatenate":
        return alter_concat(target, node, in_types)
    if node.op == "softmax":
        return alter_softmax(target, node, in_types)
    return None

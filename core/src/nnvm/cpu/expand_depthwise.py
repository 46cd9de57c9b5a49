"""An inverted residual's expansion and depthwise convolution as one kernel: ``expand_depthwise_nchwc``.

MobileNetV2's blocks widen a narrow tensor six times with a 1x1 convolution (+ bias, ReLU6), filter
that wide tensor with a 3x3 depthwise convolution, and narrow it again. As two kernels the wide tensor
goes to memory and back: at batch 8 the 96-channel 112 x 112 one is 38.5 MB, written by the 1x1
convolution (2.3 ms, at the memory's speed more than its arithmetic's) and read back by the depthwise
one (1.3 ms), where the two convolutions' arithmetic takes about 2 ms.

``fuse_expand_depthwise`` (a graph pass of the CPU layer, after the layout pass) replaces the 1x1
``conv2d_nchwc``, its bias ``add`` and ``clip``/``relu``, and the depthwise ``conv2d_nchwc`` reading them
by one node; the depthwise convolution's own epilogue follows it as any convolution's does. Its kernel
runs a band of output rows of a few channel blocks per parallel chunk: the expansion of the input rows
the band reads (its window's halo rows computed twice, by the two bands that read them) into a buffer
that stays in the core's L2, then the depthwise tiles over it::

    parallel for n.channel_groups.bands:
      act[rows the band reads, W, group's blocks, x] =         # the 1x1 convolution's register tiles
          clip(sum_k x[n, k, row, col] * w1[.., k, ..] + b1)   # (expand_ow pixels x expand_blocks)
      for block, tile rows, tile columns:                       # the depthwise tiles of depthwise_nchwc.py
        pad[window] = act[...] or 0
        out[...] = epilogue(sum_ry,rx pad[..] * w2[..])

Each stage's code is the one the two convolutions have alone (``conv2d_nchwc``'s compute, the register
tiles of ``cost_model.py`` and ``depthwise_nchwc.py``); what changes is where the wide tensor lives.

Where it pays (``_pays``): measured on the 2-core AVX2 Zen 4 host (MobileNetV2, kernels timed in model
order, fused against the two), at batch 8 the stride-2 pairs whose wide tensor streams from memory
gained: 96 x 112 x 112 -> 56 3.75 -> 3.17 ms, 144 x 56 x 56 -> 28 1.82 -> 1.36 ms; the whole model
0.95-0.96 of the two-kernel build (one process, alternated). Everywhere else the pair ran as fast or
faster apart: stride 1 (its output as large as the wide tensor, still written) 1.03-1.24, the same
pairs at batch 1 (the wide tensor in cache) 1.1-1.6. There the separate kernels have what this one
lacks: the 1x1 convolution's parallel loop and flat planes chosen for its shape, and a depthwise tile
whose 9 weight vectors and 8 accumulators do not exceed AVX2's 16 registers (here they spill).
So the pass fuses a pair only where the depthwise convolution strides and the wide tensor, written
and read back, exceeds ``cost_model.streams_from_memory``'s share of the last-level cache.
``cpu_switches={"expand_depthwise": "0"}`` keeps the two convolutions everywhere, for A/B benchmarks.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu import serves
from nnvm.cpu.cost_model import (
    machine_of,
    oc_blocks_for,
    register_budget,
    registers_needed,
    step_latency,
    streams_from_memory,
    tile_cost,
)
from nnvm.cpu.depthwise_nchwc import depthwise_tile, schedule_tiles
from nnvm.cpu.schedule_helpers import divisors, extent, inline_epilogue, reduction_flops
from nnvm.cpu.switches import enabled
from nnvm.errors import Error
from nnvm.generic_schedule import guarded_inputs_of_reductions
from nnvm.graph.dims import is_symbolic
from nnvm.graph.ir import Node, TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern, get_op
from nnvm.passes.builtin import eliminate_dead_code, infer_types
from nnvm.te.tensor import ComputeOp

NAME = "cpu.expand_depthwise_nchwc.bands"
ACT = "expand_act"  # the stage of the expanded tensor (bias and activation applied): one band's buffer
EXPAND_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1}
BAND_L2_SHARE = 0.75  # of a core's L2 the band's expanded rows may take
MIN_CHUNKS_PER_THREAD = 2  # parallel chunks a thread gets at least, where the bands can be cut that thin


def _depthwise_attrs(attrs: dict) -> dict:
    return {k: attrs[k] for k in ("strides", "padding", "dilation", "groups")}


def _infer(in_types, attrs):
    if len(in_types) != 4:
        raise Error(f"expand_depthwise_nchwc takes the inputs (data, expand_weight, expand_bias or none, "
                    f"depthwise_weight), got {len(in_types)}")
    bias = in_types[2]
    data, w1, w2 = require_inputs("expand_depthwise_nchwc", [in_types[0], in_types[1], in_types[3]],
                                  ("data", "expand_weight", "depthwise_weight"))
    conv = get_op("conv2d_nchwc")
    if len(data.shape) != 5 or len(w1.shape) != 6 or w1.shape[2:4] != (1, 1):
        raise Error(f"expand_depthwise_nchwc: the data must be NCHW[x]c and the expansion a 1x1 OIHW[i]i[o]o "
                    f"weight, got {data.shape} and {w1.shape}")
    (wide,) = conv.infer_type([data, w1], conv.normalize_attrs(dict(EXPAND_ATTRS)))
    if bias is not None and tuple(bias.shape) != (1, wide.shape[1], 1, 1, wide.shape[4]):
        raise Error(f"expand_depthwise_nchwc: the expansion's bias must be [1, {wide.shape[1]}, 1, 1, "
                    f"{wide.shape[4]}], got {bias.shape}")
    return conv.infer_type([wide, w2], conv.normalize_attrs(_depthwise_attrs(attrs)))


def _compute(inputs, attrs, out_types):
    data, w1, bias, w2 = inputs
    conv = get_op("conv2d_nchwc")
    expand_attrs = conv.normalize_attrs(dict(EXPAND_ATTRS))
    (wide_type,) = conv.infer_type([TensorType(shape_of(t), t.dtype) for t in (data, w1)], expand_attrs)
    (expand,) = conv.compute([data, w1], expand_attrs, [wide_type])
    lo, hi = attrs["a_min"], attrs["a_max"]

    def activation(n, c, h, w, lane):
        value = expand[n, c, h, w, lane]
        if bias is not None:
            value = value + bias[0, c, 0, 0, lane]
        if lo > -math.inf:
            value = te.max(value, te.const(lo, data.dtype))
        if hi < math.inf:
            value = te.min(value, te.const(hi, data.dtype))
        return value

    act = te.compute(wide_type.shape, activation, name=ACT, tag="injective")
    return conv.compute([act, w2], conv.normalize_attrs(_depthwise_attrs(attrs)), out_types)


def _eval(xs, attrs):
    data, w1, bias, w2 = xs
    conv = get_op("conv2d_nchwc")
    (wide,) = conv.evaluate([data, w1], conv.normalize_attrs(dict(EXPAND_ATTRS)))
    if bias is not None:
        wide = wide + bias
    wide = np.clip(wide, attrs["a_min"], attrs["a_max"]).astype(data.dtype)
    return conv.evaluate([wide, w2], conv.normalize_attrs(_depthwise_attrs(attrs)))


EXPAND_DEPTHWISE_NCHWC = OpDef(
    "expand_depthwise_nchwc", _infer, _compute, OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(4, 4),
    attrs={"strides": Attr(tuple, (1, 1), "the depthwise convolution's"),
           "padding": Attr(tuple, (0, 0, 0, 0), "the depthwise convolution's: top, left, bottom, right"),
           "dilation": Attr(tuple, (1, 1), "the depthwise convolution's"),
           "groups": Attr(int, doc="the depthwise convolution's: the expanded channels"),
           "a_min": Attr(float, -math.inf, "the expansion's activation: clip below"),
           "a_max": Attr(float, math.inf, "the expansion's activation: clip above")},
    evaluate=checked_evaluate(_infer, _eval),
    doc="a 1x1 conv2d_nchwc (+ bias, clip) whose output only a depthwise conv2d_nchwc reads, as one "
        "node (made by the CPU layer's pass fuse_expand_depthwise)")


# -- the graph pass --------------------------------------------------------------------------------


def _expansion(graph, node: Node) -> bool:
    """Whether ``node`` is a 1x1 stride-1 unpadded ``conv2d_nchwc`` over NCHW[x]c data whose weight
    blocks are the data's (the plain reduction the fused kernel's tiles are written for)."""
    if node.op != "conv2d_nchwc" or node.attrs.get("split") or node.attrs.get("groups", 1) != 1:
        return False
    if tuple(node.attrs.get("strides", (1, 1))) != (1, 1) or any(node.attrs.get("padding", (0,) * 4)) \
            or tuple(node.attrs.get("dilation", (1, 1))) != (1, 1) or node.attrs.get("out_channels"):
        return False
    data, weight = graph.types.get(node.inputs[0]), graph.types.get(node.inputs[1])
    return (data is not None and weight is not None and data.dtype == "float32" and len(data.shape) == 5
            and len(weight.shape) == 6 and weight.shape[2:4] == (1, 1) and weight.shape[4] == data.shape[4])


def _depthwise(graph, node: Node, wide: str) -> bool:
    """Whether ``node`` is a depthwise ``conv2d_nchwc`` over every channel of the value ``wide``."""
    if node.op != "conv2d_nchwc" or node.inputs[0] != wide or node.attrs.get("split"):
        return False
    shape, weight = graph.types[wide].shape, graph.types.get(node.inputs[1])
    return (node.attrs.get("groups") == shape[1] * shape[4] and weight is not None
            and weight.shape == (shape[1], 1, weight.shape[2], weight.shape[3], 1, shape[4]))


def _pays(target, graph, depthwise: Node) -> bool:
    """Whether fusing pays (the module docstring): where the depthwise convolution strides (its output a
    quarter of the wide tensor) and the wide tensor, written and read back, streams from memory."""
    shape = graph.types[depthwise.inputs[0]].shape
    if is_symbolic(shape):  # a symbolic batch runs image by image (nnvm.batch_loop): one image's bytes
        if is_symbolic(shape[1:]):
            return False
        shape = shape[1:]
    wide_bytes = 4 * math.prod(shape)
    return max(depthwise.attrs.get("strides", (1, 1))) > 1 and streams_from_memory(target, 2 * wide_bytes)


def fuse_expand_depthwise(graph, ctx=None):
    """Each 1x1 expansion (+ bias ``add``, ``clip``/``relu``) read only by a depthwise convolution, with
    it, as one ``expand_depthwise_nchwc`` (on CPU targets whose backend wants the blocked layout, after
    ``alter_op_layout``; ``cpu_switches={"expand_depthwise": "0"}`` keeps them apart)."""
    target = getattr(ctx, "target", None)
    if target is None or not serves(target) or not target.backend.blocked_layout(target) \
            or not enabled("expand_depthwise"):
        return graph
    consumers = graph.consumers()

    def only_reader(value):
        readers = consumers.get(value, [])
        return readers[0] if len(readers) == 1 and value not in graph.outputs else None

    replace: dict = {}  # node name -> the node taking its place (None: dropped)
    for node in graph.nodes:
        if node.name in replace or not _expansion(graph, node):
            continue
        wide, chain, bias, lo, hi = node.outputs[0], [node], "", -math.inf, math.inf
        reader = only_reader(wide)
        if reader is not None and reader.op == "add" and len(reader.inputs) == 2:
            other = reader.inputs[1] if reader.inputs[0] == wide else reader.inputs[0]
            shape = graph.types[wide].shape
            if other in graph.params and graph.types[other].shape == (1, shape[1], 1, 1, shape[4]):
                bias, wide = other, reader.outputs[0]
                chain.append(reader)
                reader = only_reader(wide)
        if reader is not None and reader.op in ("clip", "relu"):
            lo = float(reader.attrs.get("a_min", -math.inf)) if reader.op == "clip" else 0.0
            hi = float(reader.attrs.get("a_max", math.inf)) if reader.op == "clip" else math.inf
            wide = reader.outputs[0]
            chain.append(reader)
            reader = only_reader(wide)
        if reader is None or not _depthwise(graph, reader, wide) or not _pays(target, graph, reader):
            continue
        attrs = {"strides": tuple(reader.attrs.get("strides", (1, 1))),
                 "padding": tuple(reader.attrs.get("padding", (0, 0, 0, 0))),
                 "dilation": tuple(reader.attrs.get("dilation", (1, 1))), "groups": reader.attrs["groups"],
                 "a_min": lo, "a_max": hi}
        replace[reader.name] = Node("expand_depthwise_nchwc", reader.name,
                                    (node.inputs[0], node.inputs[1], bias, reader.inputs[1]), reader.outputs,
                                    attrs)
        for dropped in chain:
            replace[dropped.name] = None
    if not replace:
        return graph
    nodes = [replace.get(n.name, n) for n in graph.nodes if replace.get(n.name, n) is not None]
    return infer_types(eliminate_dead_code(graph.replace(nodes=tuple(nodes), groups=())))


# -- the schedule ----------------------------------------------------------------------------------


def _stages(group):
    """(schedule, expansion, expanded tensor, depthwise, padded stages) of an expand_depthwise_nchwc
    group with one float32 output, or None."""
    if group.anchor_op != "expand_depthwise_nchwc" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 5:
        return None
    sch = te.create_schedule([out.op])
    convs = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag == "conv2d_nchwc"]
    acts = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.name == ACT]
    if len(convs) != 2 or len(acts) != 1:
        return None
    expand, depthwise = sorted(convs, key=lambda st: bool(st.op.attrs.get("depthwise")))
    if not depthwise.op.attrs.get("depthwise") or expand.op.attrs.get("depthwise"):
        return None
    padded = [p for p in guarded_inputs_of_reductions(sch) if p is not acts[0].op]
    return sch, expand, acts[0], depthwise, padded


def expand_tile(target, width: int, blocks: int) -> tuple[int, int]:
    """(pixels, channel blocks) of the expansion's register tile: ``cost_model.py``'s cheapest that fits
    the register file, among pixel counts dividing the row (no guarded partial tile in the band)."""
    machine = machine_of(target)
    budget, latency = register_budget(machine), step_latency(machine)
    best = None
    for ow in divisors(width, width):
        cp = oc_blocks_for(machine, ow, blocks)
        if registers_needed(ow, cp, machine.broadcast_operand) > budget:
            continue
        key = (round(tile_cost(ow, cp, width, blocks, latency), 2), -ow)
        if best is None or key < best[0]:
            best = (key, (ow, cp))
    return best[1] if best is not None else (1, 1)


def band_candidates(out_rows: int, tile_rows: int) -> list:
    """Bands a chunk may take: divisors of the output rows that are whole register tiles."""
    return [b for b in divisors(out_rows, out_rows) if b % tile_rows == 0] or [out_rows]


def band_rows(target, batch: int, groups: int, out_rows: int, tile_rows: int, stride: int, kernel: int,
              row_bytes: int) -> int:
    """Output rows of a parallel chunk: the most (a multiple of ``tile_rows`` dividing ``out_rows``) whose
    expanded input rows (``row_bytes`` each, for the chunk's channel blocks) fit ``BAND_L2_SHARE`` of L2,
    cut thinner while the chunks are fewer than ``MIN_CHUNKS_PER_THREAD`` a thread (the halo rows the
    two bands beside a cut both compute are the price)."""
    machine = machine_of(target)
    bands = band_candidates(out_rows, tile_rows)
    fits = [b for b in bands if ((b - 1) * stride + kernel) * row_bytes <= BAND_L2_SHARE * machine.l2]
    fits = fits or bands[:1]
    want = MIN_CHUNKS_PER_THREAD * max(machine.threads, 1)
    enough = [b for b in fits if batch * groups * (out_rows // b) >= want]
    return max(enough) if enough else min(fits)


def expand_depthwise_template(target, group) -> ScheduleTemplate | None:
    """``cpu.expand_depthwise_nchwc.bands`` for an expand_depthwise_nchwc group, or None to decline."""
    if not enabled("conv_schedule"):
        return None
    found = _stages(group)
    if found is None:
        return None
    _, expand, act, depthwise, padded = found
    if len(padded) > 1:
        return None
    sizes = [extent(iv) for iv in (*depthwise.op.axis, *depthwise.op.reduce_axis, *act.op.axis)]
    if None in sizes:
        return None
    batch, blocks, out_rows, out_cols, lanes, kh, kw, _, _, _, width, _ = sizes
    stride = depthwise.op.attrs.get("strides", (1, 1))[0]
    window = (kh - 1) * depthwise.op.attrs.get("dilation", (1, 1))[0] + 1  # input rows one output row reads
    tile_rows, ow_block = depthwise_tile(target, out_rows, out_cols, lanes, stride)
    expand_ow, expand_blocks = expand_tile(target, width, blocks)
    row_bytes = width * expand_blocks * lanes * 4
    band = band_rows(target, batch, blocks // expand_blocks, out_rows, tile_rows, stride, window, row_bytes)
    space = {"band": band_candidates(out_rows, tile_rows),
             "tile_rows": [tile_rows], "ow_block": sorted(set(divisors(out_cols, 8)) | {ow_block}),
             "expand_ow": sorted(set(divisors(width, 14)) | {expand_ow}),
             "expand_blocks": [b for b in range(1, 5) if blocks % b == 0]}
    fallback = {"band": band, "tile_rows": tile_rows, "ow_block": ow_block, "expand_ow": expand_ow,
                "expand_blocks": expand_blocks}
    flops = reduction_flops(expand.op) + reduction_flops(depthwise.op)
    return ScheduleTemplate(NAME, space, fallback, lambda config: build_expand_depthwise(group, config),
                            flops=flops)


def build_expand_depthwise(group, config: dict):
    """The schedule of ``cpu.expand_depthwise_nchwc.bands`` for one config (the module docstring)."""
    sch, expand, act, depthwise, padded = _stages(group)
    inline_epilogue(sch, {expand.op, act.op, depthwise.op, *padded})
    out = sch[group.outputs[0].op]
    n, c, oh, ow, lane = out.op.axis
    c_outer, c_inner = out.split(c, factor=config["expand_blocks"])
    band, rows = out.split(oh, factor=config["band"])
    row_tiles, tile_rows = out.split(rows, factor=config["tile_rows"])
    col_tiles, tile_cols = out.split(ow, factor=config["ow_block"])
    out.reorder(n, c_outer, band, c_inner, row_tiles, col_tiles, tile_rows, tile_cols, lane)
    chunk = out.fuse(n, c_outer, band)
    out.parallel(chunk)
    schedule_tiles(sch, out, depthwise, padded, (chunk, c_inner, row_tiles, col_tiles), tile_rows, tile_cols,
                   lane)
    # The band's expanded rows, in register tiles of expand_ow pixels x expand_blocks channel blocks.
    act.compute_at(out, chunk)
    an, ac, ah, aw, al = act.op.axis
    pixels, pixel = act.split(aw, factor=config["expand_ow"])
    act.reorder(an, ah, pixels, pixel, ac, al)
    act.unroll(pixel)
    act.unroll(ac)
    act.vectorize(al)
    expand.compute_at(act, pixels)
    en, ec, eh, ew, el = expand.op.axis
    expand.reorder(en, eh, *expand.op.reduce_axis, ew, ec, el)  # each broadcast pixel feeds every block
    expand.unroll(ew)
    expand.unroll(ec)
    expand.vectorize(el)
    return sch

"""ShuffleNet's channel shuffle as one CPU operator that reads and writes NCHW[x]c: ``channel_shuffle_nchwc``.

ONNX has no shuffle operator; exporters write ``reshape (N, g, C/g, H, W) -> transpose (0, 2, 1, 3, 4)
-> reshape (N, C, H, W)``, and the layout pass puts a transform to NCHW before it and one back to
NCHW[x]c after it (the grouped convolutions around it run blocked). Fused, the five nodes were one kernel
whose every output element divides a flat NCHW index back into its parts (the simplifier cannot split
``(t * H * W + h * W + w) // (C/g * H * W)``), one scalar load per lane: 28% of ShuffleNet's time.

``fuse_channel_shuffle`` (a graph pass of the CPU layer, after the layout pass) replaces that chain by
one node computing, for output channel ``c = j * g + i`` (``j < C/g``, ``i < g``), input channel
``i * C/g + j``, straight from the blocked input to the blocked output. In a block of ``B`` output lanes
(``g`` dividing ``B``), lane ``t = q * g + i`` reads run ``i`` at offset ``q``: the block is ``g`` runs of
``r = B / g`` contiguous input channels, interleaved (ShuffleNet g=4 in NCHW16c: four runs of four). When
the runs cannot straddle an input block (``r`` divides ``C/g`` and the input block) the compute says so:
a stage ``channel_shuffle_runs`` reads run ``i`` as ``x[.., s % A + q]`` (``s`` its first channel, ``q < r``
a vector load), computed at each output vector, and the output lane ``t`` takes ``runs[t % g, t // g]``;
LLVM keeps the ``B`` floats in registers and the interleave becomes shuffles (the 112 x 56 x 56 shuffle
at the speed of a plain layout transform: 55 us against 48, one thread). Otherwise (a run across two
input blocks, a padded last output block, ``g`` not dividing ``B``) every lane computes its own source
channel (one scalar load each): still one pass over the data, without leaving NCHW[x]c.
"""

from __future__ import annotations

import math
import re

import numpy as np

from nnvm import te
from nnvm.cpu import serves
from nnvm.cpu.schedule_helpers import extent
from nnvm.cpu.switches import enabled
from nnvm.errors import Error
from nnvm.generic_schedule import PARALLEL_MIN_WORK
from nnvm.graph.ir import Node, TensorType
from nnvm.ops.common import checked_evaluate, require_inputs
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.passes.builtin import eliminate_dead_code, infer_types
from nnvm.te.tensor import ComputeOp

_BLOCKED = re.compile(r"^NCHW(\d+)c$")
RUNS = "channel_shuffle_runs"  # the stage of the vector-load form holding one output block's runs


def _block_of(layout: str) -> int | None:
    """1 for NCHW, ``b`` for NCHW{b}c, None for anything else."""
    if layout == "NCHW":
        return 1
    found = _BLOCKED.match(layout)
    return int(found.group(1)) if found else None


def _shuffle_infer(in_types, attrs):
    (x,) = require_inputs("channel_shuffle_nchwc", in_types, ("data",))
    c, g, a, b = attrs["channels"], attrs["groups"], attrs["in_block"], attrs["out_block"]
    if g < 1 or c % g or a < 1 or b < 1:
        raise Error(f"channel_shuffle_nchwc: {c} channels do not split into {g} groups "
                    f"(blocks {a} -> {b})")
    want = len(x.shape) == (4 if a == 1 else 5) and x.shape[1] == -(-c // a) and (a == 1 or x.shape[4] == a)
    if not want:
        raise Error(f"channel_shuffle_nchwc: input shape {x.shape} is not {c} channels in blocks of {a}")
    n, _, h, w = x.shape[:4]
    shape = (n, c, h, w) if b == 1 else (n, -(-c // b), h, w, b)
    return [TensorType(shape, x.dtype)]


def runs_fit(channels: int, groups: int, in_block: int, out_block: int) -> bool:
    """Whether every output block is ``groups`` runs of ``out_block / groups`` consecutive input channels
    that each lie in one input block (the vector-load form), with no padded last output block."""
    if out_block == 1 or out_block % groups or channels % out_block:
        return False
    run = out_block // groups
    return (channels // groups) % run == 0 and (in_block == 1 or in_block % run == 0)


def _shuffle_compute(inputs, attrs, out_types):
    (x,) = inputs
    c, g, a, b = attrs["channels"], attrs["groups"], attrs["in_block"], attrs["out_block"]
    per = c // g

    def read(n, src, h, w, extra=0):
        if a == 1:
            return x[n, src + extra, h, w]
        return x[n, src // a, h, w, src % a + extra]

    if b == 1:
        def body(n, ch, h, w):
            return read(n, (ch % g) * per + ch // g, h, w)
    elif runs_fit(c, g, a, b):
        run = b // g
        n_, blocks, h_, w_ = out_types[0].shape[:4]
        # run i of block cb (first channel s = i * C/g + cb * r): r consecutive channels, s % a + q in
        # s's block, so a vector load; then lane t = q * g + i of the output takes run t % g, offset t // g
        runs = te.compute((n_, blocks, h_, w_, g, run),
                          lambda n, cb, h, w, i, q: read(n, i * per + cb * run, h, w, q), name=RUNS)

        def body(n, cb, h, w, t):
            return runs[n, cb, h, w, t % g, t // g]
    else:
        def body(n, cb, h, w, t):
            ch = cb * b + t
            value = read(n, ch % g * per + ch // g, h, w)  # (a guarded load: not read for padding)
            return te.if_then_else(ch < c, value, te.const(0, x.dtype)) if c % b else value

    return [te.compute(out_types[0].shape, body, name="channel_shuffle_nchwc", tag="injective")]


def _shuffle_eval(xs, attrs):
    (x,) = xs
    c, g, a, b = attrs["channels"], attrs["groups"], attrs["in_block"], attrs["out_block"]
    if a > 1:  # -> NCHW, cropped
        x = x.transpose(0, 1, 4, 2, 3).reshape(x.shape[0], -1, x.shape[2], x.shape[3])[:, :c]
    n, _, h, w = x.shape
    y = x.reshape(n, g, c // g, h, w).transpose(0, 2, 1, 3, 4).reshape(n, c, h, w)
    if b > 1:
        blocks = -(-c // b)
        y = np.pad(y, ((0, 0), (0, blocks * b - c), (0, 0), (0, 0)))
        y = y.reshape(n, blocks, b, h, w).transpose(0, 1, 3, 4, 2)
    return [np.ascontiguousarray(y)]


CHANNEL_SHUFFLE_NCHWC = OpDef(
    "channel_shuffle_nchwc", _shuffle_infer, _shuffle_compute, OpPattern.INJECTIVE, num_inputs=(1, 1),
    attrs={"groups": Attr(int), "channels": Attr(int, doc="channels of the tensor (without padding)"),
           "in_block": Attr(int, doc="the input's channel block (1: NCHW)"),
           "out_block": Attr(int, doc="the output's channel block (1: NCHW; a partial last block is zeros)")},
    evaluate=checked_evaluate(_shuffle_infer, _shuffle_eval),
    doc="channel shuffle (reshape N,g,C/g,H,W -> transpose 0,2,1,3,4 -> reshape N,C,H,W) between "
        "channel-blocked layouts, made by the CPU layer's pass fuse_channel_shuffle")


# -- the graph pass --------------------------------------------------------------------------------


def _shuffle_groups(graph, first: Node, consumers: dict) -> tuple | None:
    """(groups, transpose node, last reshape node) when ``first`` starts reshape -> transpose -> reshape
    splitting the channels of an NCHW tensor into groups and back, transposed; else None."""
    types = graph.types

    def only_reader(v):
        readers = consumers.get(v, [])
        return readers[0] if len(readers) == 1 and v not in graph.outputs else None

    src, mid = types.get(first.inputs[0]), types.get(first.outputs[0])
    if src is None or mid is None or len(src.shape) != 4 or len(mid.shape) != 5 or src.dtype != "float32":
        return None
    n, c, h, w = src.shape
    g = mid.shape[1]
    if tuple(mid.shape) != (n, g, c // g, h, w) or g * (c // g) != c or g < 2 or c // g < 2:
        return None
    trans = only_reader(first.outputs[0])
    if trans is None or trans.op != "transpose" or tuple(trans.attrs.get("axes") or ()) != (0, 2, 1, 3, 4):
        return None
    last = only_reader(trans.outputs[0])
    if last is None or last.op != "reshape" or tuple(types[last.outputs[0]].shape) != (n, c, h, w):
        return None
    return g, trans, last


def fuse_channel_shuffle(graph, ctx=None):
    """Each channel shuffle chain, with the layout transforms around it, as one ``channel_shuffle_nchwc``
    (on CPU targets whose backend wants the blocked layout, after ``alter_op_layout``;
    ``cpu_switches={"shuffle": "0"}`` keeps the chains)."""
    target = getattr(ctx, "target", None)
    if target is None or not serves(target) or not target.backend.blocked_layout(target) \
            or not enabled("shuffle"):
        return graph
    producers, consumers = graph.producers(), graph.consumers()
    replace: dict = {}  # node name -> the node taking its place (None: dropped)
    for node in graph.nodes:
        if node.op != "reshape" or node.name in replace:
            continue
        found = _shuffle_groups(graph, node, consumers)
        if found is None:
            continue
        g, trans, last = found
        n, channels, h, w = graph.types[node.inputs[0]].shape
        source, in_block = node.inputs[0], 1
        prev = producers.get(source)
        if prev is not None and prev.op == "layout_transform" and prev.attrs.get("dst_layout") == "NCHW":
            block = _block_of(str(prev.attrs.get("src_layout", "")))
            have = graph.types.get(prev.inputs[0])
            if block and block > 1 and have is not None \
                    and tuple(have.shape) == (n, -(-channels // block), h, w, block):
                source, in_block = prev.inputs[0], block
        output, out_block, end = last.outputs[0], 1, last
        readers = consumers.get(output, [])
        if len(readers) == 1 and output not in graph.outputs and readers[0].op == "layout_transform" \
                and readers[0].attrs.get("src_layout") == "NCHW":
            block = _block_of(str(readers[0].attrs.get("dst_layout", "")))
            want = graph.types.get(readers[0].outputs[0])
            if block and block > 1 and want is not None \
                    and tuple(want.shape) == (n, -(-channels // block), h, w, block):
                output, out_block, end = readers[0].outputs[0], block, readers[0]
        attrs = {"groups": g, "channels": channels, "in_block": in_block, "out_block": out_block}
        replace[end.name] = Node("channel_shuffle_nchwc", end.name, (source,), (output,), attrs)
        for dropped in {node.name, trans.name, last.name} - {end.name}:
            replace[dropped] = None
    if not replace:
        return graph
    nodes = []
    for node in graph.nodes:
        if node.name not in replace:
            nodes.append(node)
        elif replace[node.name] is not None:
            nodes.append(replace[node.name])
    out = graph.replace(nodes=tuple(nodes), groups=())
    return infer_types(eliminate_dead_code(out))


# -- the schedule ----------------------------------------------------------------------------------


def schedule_channel_shuffle(target, group):
    """A group computing ``channel_shuffle_nchwc``: (batch, channel block, row) parallel, then the row,
    the channel lanes vectorized (a plain NCHW output: the row's pixels vectorized); else None."""
    if not enabled("templates"):
        return None
    if len(group.outputs) != 1 or not any(n.op == "channel_shuffle_nchwc" for n in group.nodes):
        return None
    out = group.outputs[0]
    sch = te.create_schedule([out.op])
    computes = [st for st in sch.stages if isinstance(st.op, ComputeOp)]
    if any(st.op.reduce_axis for st in computes) or len(out.shape) not in (4, 5):
        return None
    stage = sch[out.op]
    runs = None
    for st in computes:
        if st is stage:
            continue
        if st.op.name == RUNS and runs is None:
            runs = st
        else:
            st.compute_inline()
    axes = list(stage.op.axis)
    extents = [extent(iv) for iv in axes]
    if None in extents:
        return None
    outer = axes[:3] if len(axes) == 5 else axes[:2]
    fused = stage.fuse(*outer)
    if math.prod(extents) >= PARALLEL_MIN_WORK:
        stage.parallel(fused)
    stage.vectorize(axes[-1])
    if runs is not None:  # one output vector's runs: g vector loads into 16 floats LLVM keeps in registers
        runs.compute_at(stage, axes[3])
        runs.unroll(runs.op.axis[4])
        runs.vectorize(runs.op.axis[5])
    return sch

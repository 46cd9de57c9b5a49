"""Concatenations without a copy: each input written where it lies in the output.

Where every dim before a concatenation's axis is 1 (batch 1, channels in NCHW or NCHW[x]c), the output's
bytes are the inputs' bytes one after the other. This pass marks such a ``concatenate`` ``in_place``
(``nnvm.ops.transform.is_view``): it gets no kernel, the memory plan (``runtime/plan.py``) puts each
input at its offset inside the output, and the kernels making the inputs write there. What the copy
cost goes, and so does its kernel: DenseNet-121's 57 concatenations (each a prefix of the next,
fused with the batch norm and ReLU reading them) were half of its compile; now the batch norm and ReLU
read one contiguous tensor. GoogLeNet's and SqueezeNet's concatenations stop copying their branches.

A value can lie inside several concatenations only at one place: DenseNet's layer ``k`` concatenates
the first ``k`` of the features its block's last layer concatenates, so every layer's input is the
front of one block. The pass ties values together as it marks (``runtime.plan.ViewPlaces``, the
walk ``make_plan`` does again) and leaves a concatenation a copy where that would put one value at two
places or two values on the same bytes. It also leaves one alone where an input is not a kernel's
output of its own (a graph input, a weight, a graph output, the same value twice), where the
output is a graph output, and on graphs with symbolic dims other than a batch (``image_batch``: a
batch is placed image by image, each kernel touching a view looping over the images at the block's stride).
It leaves a concatenation a copy, too, where fusion would make it part of an input's kernel (NASNet's
concatenations of cropped or padded values: marked, each crop would become a kernel of its own, 18 more
calls); a trial ``fuse_ops`` says where. Only CPU targets: their runtimes take any byte offset (the GPU
runtimes align theirs).
``cpu_switches={"concat_in_place": "0"}`` keeps the copies.
"""

from __future__ import annotations

import math

from nnvm.cpu import serves
from nnvm.cpu.switches import enabled
from nnvm.graph.dims import Dim
from nnvm.passes.builtin import fuse_ops
from nnvm.runtime.plan import ViewPlaces, bound_graph


def concat_in_place(graph, ctx=None):
    """Mark each concatenation that can be planned in place (see the module docstring)."""
    target = getattr(ctx, "target", None)
    if target is None or not serves(target) or not enabled("concat_in_place"):
        return graph
    image = graph  # what the views are decided on: one image of a symbolic batch
    if any(isinstance(d, Dim) for ty in graph.types.values() for d in ty.shape):
        batch = image_batch(graph)
        if batch is None:
            return graph
        image = bound_graph(graph, batch)
    producers = graph.producers()
    outputs = set(graph.outputs)
    starts = {g[0] for g in fuse_ops(graph, ctx).groups}  # nodes that start a kernel of their own
    places = ViewPlaces()
    nodes = []
    for node in graph.nodes:
        if node.op != "concatenate" or node.name not in starts:
            nodes.append(node)
            continue
        if _eligible(image, node, producers, outputs) and places.tie(image, node) is None:
            node = node.replace(attrs={**node.attrs, "in_place": True})
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes))


def image_batch(graph) -> str | None:
    """The name of a graph's one symbolic dim where it is a batch: the leading axis of every value holding
    it, every other extent static; else None. A view of such a graph is placed for one image, and each
    image of a value lies at its block's image stride (``tir.lower.batch_loop`` writes it there)."""
    names = set()
    for ty in graph.types.values():
        if not ty.symbolic:
            continue
        lead = ty.shape[0]
        if not isinstance(lead, Dim) or len(lead.names) != 1 or lead != Dim.named(lead.names[0]):
            return None
        if any(isinstance(d, Dim) for d in ty.shape[1:]):
            return None
        names.add(lead.names[0])
    return names.pop() if len(names) == 1 else None


def _eligible(graph, node, producers, outputs) -> bool:
    out = node.outputs[0]
    shape = graph.type_of(out).shape
    axis = int(node.attrs.get("axis", 0)) % len(shape)
    if len(node.inputs) < 2 or math.prod(shape[:axis]) != 1 or out in outputs:
        return False
    if len(set(node.inputs)) != len(node.inputs):
        return False
    return all(v in producers and v not in outputs and v not in graph.params for v in node.inputs)

"""A batch's first layers run one image at a time, so their activations stay in the caches between kernels.

At batch 8 MobileNetV2's first activations are 13-39 MB (112 x 112 x 32..96 channels x 8 images): every
kernel there writes its output to memory and the next reads it back, and the depthwise layers, a few
multiply-adds per byte, run at the memory's speed (96 -> 96 stride 2 on 112x112: 1.46 ms at batch 8
against 8 x 0.083 ms at batch 1; all of the first 19 layers 15.6 ms against 8 x 1.80). Later layers have
small activations and large weights, and are faster batched (their weights read once for 8 images).

``slice_batch`` (a CPU pass after the layout pass) cuts the graph where one tensor alone crosses from
the first layers to the rest, after the last layer whose input or output exceeds what the cores' L2
caches hold twice over, and runs the part before the cut once per image: the input ``split`` into
images, the first layers' nodes repeated per image (the same kernels: one compile), their results
``concatenate``-d into the tensor at the cut. Only operators that never mix two images are sliced:
convolutions, pools, layout transforms, channel concatenations and shuffles, and elementwise operators
whose weights have no batch axis. ``NNVM_X86_BATCH_SLICES=0`` keeps the batch whole, for A/B benchmarks.
"""

from __future__ import annotations

from nnvm.cpu.switches import enabled
from nnvm.graph.ir import Graph, Node
from nnvm.ops.registry import OpPattern, get_op

# operators whose every image's output depends on that image's input alone (besides elementwise ones)
PER_IMAGE_OPS = {"conv2d", "conv2d_nchwc", "conv2d_winograd_nchwc", "max_pool2d", "max_pool2d_nchwc",
                 "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", "layout_transform",
                 "channel_shuffle_nchwc", "lrn"}
CACHE_MULTIPLE = 2  # an activation over this many times the cores' L2 caches together is "large"


def _nbytes(ty) -> int:
    size = 1
    for d in ty.shape:
        size *= d
    return size * (2 if ty.dtype == "float16" else 8 if ty.dtype in ("float64", "int64") else 4)


def _per_image(graph: Graph, node: Node, batch: int) -> bool:
    """Whether ``node`` computes each image from that image alone, with every activation it reads and
    writes batch-first (``batch`` images) and every weight free of the batch axis."""
    types = graph.types
    acts = [v for v in node.inputs if v and v not in graph.params]
    if not acts or any(types.get(v) is None for v in (*acts, *node.outputs)):
        return False
    if any(not types[v].shape or types[v].shape[0] != batch for v in (*acts, *node.outputs)):
        return False
    opdef = get_op(node.op, node.name)
    if node.op == "layout_transform":
        return all(str(node.attrs.get(k, "")).startswith("N") for k in ("src_layout", "dst_layout"))
    if node.op == "concatenate":
        rank = len(types[node.outputs[0]].shape)
        return opdef.normalize_attrs(dict(node.attrs), node.name)["axis"] % rank != 0
    if node.op in PER_IMAGE_OPS:
        return True
    if opdef.pattern > OpPattern.BROADCAST or len(node.outputs) != 1:
        return False
    rank = len(types[node.outputs[0]].shape)
    weights = [types[v] for v in node.inputs if v in graph.params]
    return all(len(w.shape) < rank or w.shape[0] == 1 for w in weights)


def batch_cut(graph: Graph, limit: int) -> int | None:
    """How many of ``graph``'s nodes to run per image, or None: a cut after which only one tensor computed
    before it is read, the first past the last node with an activation over ``limit`` bytes, else the
    last with such a node before it (ResNet's 28x28 blocks take their 56x56 input in two branches).
    The first layers end at the first node that mixes images or whose weight, read again for every
    image, would outweigh its activations (VGG-19's 3x3 512 -> 512 on 28x28: 9.4 MB of weight a read
    against 26 MB of activations at batch 8)."""
    if len(graph.inputs) != 1:
        return None
    x = graph.inputs[0]
    shape = graph.types[x].shape
    batch = shape[0] if shape else 1
    if batch < 2:
        return None
    last_use = {x: -1}
    for k, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in last_use or v == x:
                last_use[v] = k
        for v in node.outputs:
            last_use.setdefault(v, k)
    for v in graph.outputs:
        last_use[v] = len(graph.nodes)
    first_large, large, cuts, live = -1, -1, [], {x}
    for k, node in enumerate(graph.nodes):
        if not _per_image(graph, node, batch):
            break
        acts = [_nbytes(graph.types[v]) for v in (*node.inputs, *node.outputs) if v and v not in graph.params]
        if sum(_nbytes(graph.types[v]) for v in node.inputs if v in graph.params) * (batch - 1) > sum(acts):
            break  # its weight read once an image would cost more than its activations
        if max(acts) > limit:
            large = k
            first_large = k if first_large < 0 else first_large
        live = {v for v in (*live, *node.outputs) if last_use[v] > k}
        if len(live) == 1 and x not in live:
            cuts.append(k + 1)
    past = [c for c in cuts if c > first_large >= 0]  # cuts with a large activation before them
    return next((c for c in past if c > large), past[-1] if past else None)


def slice_batch(graph: Graph, ctx=None) -> Graph:
    """The graph with its first layers repeated per image (see the module docstring), or as it is."""
    from nnvm.cpu import serves
    from nnvm.cpu.cost_model import machine_of
    from nnvm.passes.builtin import infer_types

    target = getattr(ctx, "target", None)
    if target is None or not serves(target) or not target.backend.blocked_layout(target) \
            or not enabled("NNVM_X86_BATCH_SLICES") or graph.groups:
        return graph
    machine = machine_of(target)
    cut = batch_cut(graph, CACHE_MULTIPLE * machine.l2 * max(1, machine.threads))
    if cut is None:
        return graph
    x, head = graph.inputs[0], graph.nodes[:cut]
    batch = graph.types[x].shape[0]
    taken = set(graph.types) | set(graph.params) | {n.name for n in graph.nodes}
    taken |= {o for n in graph.nodes for o in n.outputs}

    def fresh(hint: str) -> str:
        name, k = hint, 0
        while name in taken:
            k += 1
            name = f"{hint}_{k}"
        taken.add(name)
        return name

    images = [fresh(f"{x}_image{i}") for i in range(batch)]
    nodes = [Node("split", fresh(f"{x}_images"), (x,), tuple(images),
                  {"axis": 0, "indices": tuple(range(1, batch))})]
    ends = []
    for i, image in enumerate(images):
        renamed = {x: image}
        for node in head:
            outs = tuple(renamed.setdefault(o, fresh(f"{o}_image{i}")) for o in node.outputs)
            attrs = dict(node.attrs)
            if node.op == "layout_transform" and attrs.get("shape"):
                attrs["shape"] = (1, *tuple(attrs["shape"])[1:])
            nodes.append(Node(node.op, fresh(f"{node.name}_image{i}"),
                              tuple(renamed.get(v, v) for v in node.inputs), outs, attrs))
        ends.append(renamed)
    last_use_after = {v for n in graph.nodes[cut:] for v in n.inputs} | set(graph.outputs)
    (crossing,) = [o for n in head for o in n.outputs if o in last_use_after]
    nodes.append(Node("concatenate", fresh(f"{crossing}_batch"), tuple(e[crossing] for e in ends),
                      (crossing,), {"axis": 0}))
    nodes.extend(graph.nodes[cut:])
    later = {o for n in graph.nodes[cut:] for o in n.outputs} | {crossing} | set(graph.params) | {x}
    kept = {v: t for v, t in graph.types.items() if v in later}
    return infer_types(graph.replace(nodes=tuple(nodes), types=kept, groups=()))

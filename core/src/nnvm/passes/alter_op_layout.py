"""alter_op_layout: let the backend store activations in the layout its kernels prefer.

The backend answers ``nnvm_alter_op_layout`` per node with an ``AlteredNode``: another operator
(``conv2d_nchwc``), the layout each input must arrive in and the layout each output leaves in. The
pass keeps, for every value, the layouts it already exists in, and inserts a ``layout_transform``
only where a reader needs a layout the value does not have yet, so a transform and its inverse never
both appear (``cancel_layout_transforms`` also removes such pairs from an input graph).

Between two altered nodes the layout is carried through elementwise and broadcast operators (bias,
batch-norm scale and shift, relu, clip, the residual add, requantize and the dequantize/quantize around
an int8 residual add): their constant operands are reshaped and
transformed by nodes on weights alone, which ``fold_constants`` evaluates at compile time, so
weights are stored pre-transformed. Any other reader (pooling, reshape, dense, a graph output) gets
the value back in its original layout through one transform. A chain conv -> bias -> relu -> add
-> conv thus runs blocked from the first convolution to the first operator without blocked support.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nnvm.errors import Error
from nnvm.graph.ir import Graph, Node
from nnvm.ops.blocked_layout import transformed_shape
from nnvm.ops.registry import OpPattern, get_op
from nnvm.passes.builtin import eliminate_dead_code, infer_types, rename_uses
from nnvm.plugins import hook

_BLOCKED_NCHW = re.compile(r"^NCHW(\d+)c$")
# Operators with a blocked-layout twin taking the same attributes, used when their input is blocked.
BLOCKED_FOLLOWERS = {"max_pool2d": "max_pool2d_nchwc"}


@dataclass(frozen=True)
class AlteredNode:
    """A backend's answer for one node: compute it as ``op(attrs)`` over re-laid-out inputs.

    ``inputs`` has one entry per input of the original node: ``(from_layout, to_layout)`` (the layout
    the original value is in, and the one the new operator reads), or ``None`` to read the value as
    it is. ``outputs`` has ``(original_layout, new_layout)`` per output. ``prepare`` optionally holds,
    per input, ``(op, attrs)`` of a node applied to the re-laid-out input before the new operator
    reads it (a Winograd weight transform, say: on a weight, ``fold_constants`` evaluates it).
    ``constant_inputs`` lists inputs that must be computable from weights alone (so their transform is
    folded at compile time, not paid per run); when one is not, the node is kept as it is. ``extra``
    holds ``(k, op, attrs)`` per input the new operator reads beyond the original ones: ``op(attrs)``
    applied to its (prepared) input ``k``, appended in order (a packed weight's per-channel sums, say:
    on a weight, folded at compile time too).
    """

    op: str
    attrs: dict = field(default_factory=dict)
    inputs: tuple = ()
    outputs: tuple = ()
    prepare: tuple = ()
    constant_inputs: tuple = ()
    extra: tuple = ()


class _Rewriter:
    def __init__(self, graph: Graph, choose):
        self.graph = graph
        self.choose = choose
        self.nodes: list = []
        self.defined = set(graph.inputs) | set(graph.params)  # values that exist in their original layout
        self.reps: dict = {}  # value -> {layout: value name}, for values that exist re-laid-out
        self.altered = False  # a node was replaced (maybe with no value re-laid-out: a prepare alone)
        self.orig_layout: dict = {}  # value -> its original layout, for values in ``reps``
        self.taken = set(graph.types) | set(graph.params) | {o for n in graph.nodes for o in n.outputs}
        self.taken |= {n.name for n in graph.nodes}
        self.constant = set(graph.params)  # values computed from weights alone
        for node in graph.nodes:
            if node.inputs and all(not v or v in self.constant for v in node.inputs):
                self.constant.update(node.outputs)

    def fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.taken:
            k += 1
            name = f"{hint}_{k}"
        self.taken.add(name)
        return name

    def transform(self, value: str, src: str, dst: str, out: str | None = None, shape=None) -> str:
        out = out or self.fresh(f"{value}_{dst}")
        attrs = {"src_layout": src, "dst_layout": dst}
        if shape is not None:
            attrs["shape"] = tuple(shape)
        self.nodes.append(Node("layout_transform", self.fresh(f"{out}_transform"), (value,), (out,), attrs))
        return out

    def padded_shape(self, v: str, layout: str, orig: str | None = None):
        """The shape of ``v`` in ``layout`` when some axis is not a whole number of blocks there (it is
        then padded to whole blocks), else None. ``layout`` is the original one: ``v``'s own shape."""
        orig = orig or self.orig_layout.get(v, "NCHW")
        shape = tuple(self.graph.types[v].shape)
        if layout == orig:
            return shape
        return padded_shape(shape, orig, layout)

    def original(self, v: str) -> str:
        """``v`` in its original layout, transformed back (once) if it only exists re-laid-out."""
        if not v or v in self.defined:
            return v
        layout, name = next(iter(self.reps[v].items()))
        crop = self.padded_shape(v, layout) is not None  # drop the padding of a partial last block
        self.transform(name, layout, self.orig_layout[v], out=v,
                       shape=self.graph.types[v].shape if crop else None)
        self.defined.add(v)
        return v

    def laid_out(self, v: str, src: str, dst: str) -> str:
        """``v`` (originally in layout ``src``) in layout ``dst``, transformed (once) if needed."""
        if src == dst:
            return self.original(v)
        have = self.reps.setdefault(v, {})
        if dst in have:
            return have[dst]
        self.orig_layout.setdefault(v, src)
        if v in self.defined:
            name = self.transform(v, src, dst, shape=self.padded_shape(v, dst))
        else:
            layout, existing = next(iter(have.items()))
            padded = self.padded_shape(v, layout) is not None or self.padded_shape(v, dst) is not None
            name = self.transform(existing, layout, dst,
                                  shape=transformed_shape(self.graph.types[v].shape, src, dst, pad=True)
                                  if padded else None)
        have[dst] = name
        return name

    def emit(self, node: Node, inputs: list, out_layouts: tuple, op: str | None = None, attrs=None):
        outs = []
        for o, (orig, new) in zip(node.outputs, out_layouts):
            if orig == new:
                outs.append(o)
                self.defined.add(o)
            else:
                name = self.fresh(f"{o}_{new}")
                self.reps.setdefault(o, {})[new] = name
                self.orig_layout[o] = orig
                outs.append(name)
        self.nodes.append(Node(op or node.op, node.name, tuple(inputs), tuple(outs),
                               dict(node.attrs) if attrs is None else dict(attrs)))

    # -- one node ----------------------------------------------------------------------------------
    def visit(self, node: Node) -> None:
        types = self.graph.types
        spec = self.choose(node, [types.get(v) if v else None for v in node.inputs])
        if spec is not None and any(node.inputs[k] not in self.constant for k in spec.constant_inputs):
            spec = None
        if spec is not None:
            if len(spec.inputs) != len(node.inputs) or len(spec.outputs) != len(node.outputs):
                raise Error(f"node {node.name} ({node.op}): the backend's layout choice names "
                            f"{len(spec.inputs)} inputs and {len(spec.outputs)} outputs, the node has "
                            f"{len(node.inputs)} and {len(node.outputs)}")
            ins = [self.laid_out(v, *io) if io and v else self.original(v) for v, io in zip(node.inputs,
                                                                                        spec.inputs)]
            for k, prep in enumerate(spec.prepare):
                if prep and ins[k]:
                    out = self.fresh(f"{ins[k]}_{prep[0]}")
                    self.nodes.append(Node(prep[0], self.fresh(f"{out}_node"), (ins[k],), (out,),
                                           dict(prep[1])))
                    ins[k] = out
            for k, op, attrs in spec.extra:
                out = self.fresh(f"{ins[k]}_{op}")
                self.nodes.append(Node(op, self.fresh(f"{out}_node"), (ins[k],), (out,), dict(attrs)))
                ins.append(out)
            self.emit(node, ins, spec.outputs, spec.op, spec.attrs)
            self.altered = True
            return
        if self.follow(node) or self.follow_pool(node):
            return
        self.emit(node, [self.original(v) for v in node.inputs],
                  tuple((None, None) for _ in node.outputs))

    def follow(self, node: Node) -> bool:
        """Run an elementwise or broadcast node in the blocked layout of its inputs, when it can."""
        opdef = get_op(node.op, node.name)
        if opdef.pattern > OpPattern.BROADCAST or len(node.outputs) != 1:
            return False
        attrs = opdef.normalize_attrs(dict(node.attrs), node.name)
        out_ty = self.graph.types.get(node.outputs[0])
        if out_ty is None or len(out_ty.shape) != 4:
            return False
        is_bias = node.op == "bias_add"
        # requantize's per-channel operands become blocked ones at the data's rank (which it broadcasts)
        per_channel = is_bias or node.op == "requantize"
        if per_channel and attrs["axis"] % 4 != 1:
            return False
        if not per_channel and ({"axis", "axes"} & attrs.keys()):
            return False  # an axis attribute would mean something else in another layout
        layout = None
        for v in node.inputs:
            # (shapes, not types: requantize, quantize and dequantize change the dtype)
            if v and _same_shape(self.graph.types.get(v), out_ty) and self.orig_layout.get(v) == "NCHW":
                layout = next((lay for lay in self.reps[v] if _BLOCKED_NCHW.match(lay)), None)
                if layout:
                    break
        if layout is None:
            return False
        channels, block = out_ty.shape[1], int(_BLOCKED_NCHW.match(layout).group(1))
        plan = []  # per input: ("act", v) | ("param", v, 4-d shape)
        for k, v in enumerate(node.inputs):
            ty = self.graph.types.get(v) if v else None
            if ty is None:
                return False
            if _same_shape(ty, out_ty) and v not in self.graph.params:
                plan.append(("act", v))
                continue
            if v not in self.graph.params:
                return False  # a broadcast activation: keep the original layout
            if (is_bias and k == 1) or (per_channel and len(ty.shape) == 1):
                shape4 = (1, ty.shape[0], 1, 1)
            elif len(ty.shape) <= 4:
                shape4 = (1,) * (4 - len(ty.shape)) + tuple(ty.shape)
                if any(d not in (1, o) for d, o in zip(shape4, out_ty.shape)):
                    return False
            else:
                return False
            if shape4[1] not in (1, channels):
                return False
            plan.append(("param", v, shape4))
        ins = []
        for item in plan:
            if item[0] == "act":
                ins.append(self.laid_out(item[1], "NCHW", layout))
                continue
            _, v, shape4 = item
            ins.append(self.param_in_layout(v, shape4, layout, block))
        self.emit(node, ins, (("NCHW", layout),), "add" if is_bias else None, {} if is_bias else None)
        return True

    def follow_pool(self, node: Node) -> bool:
        """A max pool whose input is already blocked pools in the blocked layout (no transform)."""
        v = node.inputs[0] if node.inputs else None
        if node.op not in BLOCKED_FOLLOWERS or self.orig_layout.get(v) != "NCHW":
            return False
        layout = next((lay for lay in self.reps[v] if _BLOCKED_NCHW.match(lay)), None)
        if layout is None or v in self.defined or v in self.graph.outputs:
            return False  # also needed in NCHW anyway: pooling there costs no extra transform
        self.emit(node, [self.reps[v][layout]], (("NCHW", layout),), BLOCKED_FOLLOWERS[node.op])
        return True

    def param_in_layout(self, v: str, shape4: tuple, layout: str, block: int) -> str:
        """A weight broadcast against NCHW data, as nodes on the weight alone (folded later)."""
        key = f"{layout}@{'x'.join(map(str, shape4))}"
        have = self.reps.setdefault(v, {})
        if key in have:
            return have[key]
        cur = v
        if shape4[1] == 1:  # no channel variation: one block lane broadcasts
            new_shape = (shape4[0], 1, shape4[2], shape4[3], 1)
            cur = self.reshape(cur, new_shape)
        else:
            if tuple(self.graph.types[v].shape) != shape4:
                cur = self.reshape(cur, shape4)
            cur = self.transform(cur, "NCHW", layout, shape=padded_shape(shape4, "NCHW", layout))
        have[key] = cur
        return cur

    def reshape(self, v: str, shape: tuple) -> str:
        out = self.fresh(f"{v}_reshaped")
        self.nodes.append(Node("reshape", self.fresh(f"{out}_reshape"), (v,), (out,),
                               {"newshape": tuple(shape)}))
        return out


def _same_shape(a, b) -> bool:
    return a is not None and b is not None and tuple(a.shape) == tuple(b.shape)


def padded_shape(shape: tuple, src: str, dst: str):
    """``shape`` (layout ``src``) in layout ``dst`` padded to whole blocks, or None when it needs no
    padding (a channel count such as 1000 in ``NCHW16c`` is 63 blocks, the last one part padding)."""
    try:
        transformed_shape(tuple(shape), src, dst)
        return None
    except Error:
        return transformed_shape(tuple(shape), src, dst, pad=True)


def cancel_layout_transforms(graph: Graph) -> Graph:
    """A ``layout_transform`` whose input is the inverse transform reads the original value instead."""
    producers = graph.producers()
    rename = {}
    for node in graph.nodes:
        if node.op != "layout_transform" or node.attrs.get("shape"):
            continue  # (a padding transform is not undone by a cropping one: the padding is not zeros)
        prev = producers.get(node.inputs[0])
        if (prev is not None and prev.op == "layout_transform"
                and prev.attrs.get("src_layout") == node.attrs.get("dst_layout")
                and prev.attrs.get("dst_layout") == node.attrs.get("src_layout")
                and not prev.attrs.get("shape")):
            rename[node.outputs[0]] = prev.inputs[0]
    if not rename:
        return graph
    kept_outputs = [o for o in graph.outputs if o in rename]
    if kept_outputs:  # a graph output keeps its name: leave those transforms alone
        rename = {k: v for k, v in rename.items() if k not in kept_outputs}
    return eliminate_dead_code(rename_uses(graph, rename))


def _hook_chooser(target):
    def choose(node, in_types):
        return hook().nnvm_alter_op_layout(target=target, node=node, in_types=in_types)

    return choose


def alter_op_layout(graph: Graph, ctx=None, choose=None) -> Graph:
    """Replace nodes by the backend's blocked-layout versions, with layout transforms at the borders.

    ``choose(node, in_types) -> AlteredNode | None`` decides per node; by default the backends'
    ``nnvm_alter_op_layout`` hook for the compile's target (no target: the graph is returned as is).
    """
    target = getattr(ctx, "target", None)
    if choose is None:
        if target is None:
            return graph
        choose = _hook_chooser(target)
    graph = cancel_layout_transforms(graph)
    rw = _Rewriter(graph, choose)
    for node in graph.nodes:
        rw.visit(node)
    if not rw.reps and not rw.altered:
        return graph
    outputs = tuple(rw.original(v) for v in graph.outputs)
    out = graph.replace(nodes=tuple(rw.nodes), outputs=outputs, groups=())
    return infer_types(out)

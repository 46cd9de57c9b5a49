"""The core's graph passes. Each takes a graph and returns a new one; none mutates its input."""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error, with_context
from nnvm.graph.evaluate import evaluate_node
from nnvm.graph.ir import Graph, Node, TensorType
from nnvm.ops.registry import OpPattern, get_op
from nnvm.ops.transform import is_view

# ---------------------------------------------------------------------------------------------------
# helpers


def rename_uses(graph: Graph, mapping: dict) -> Graph:
    """Make every reader of value ``a`` read ``mapping[a]`` instead (node inputs and graph outputs)."""
    if not mapping:
        return graph

    def follow(v):
        seen = 0
        while v in mapping and seen < 1000:
            v = mapping[v]
            seen += 1
        return v

    nodes = [n.replace(inputs=tuple(follow(i) for i in n.inputs)) if set(n.inputs) & mapping.keys() else n
             for n in graph.nodes]
    return graph.replace(nodes=tuple(nodes), outputs=tuple(follow(o) for o in graph.outputs))


def _param_name(graph: Graph, hint: str, taken: set) -> str:
    name, k = hint, 0
    while name in taken or name in graph.params or name in graph.types:
        k += 1
        name = f"{hint}_{k}"
    taken.add(name)
    return name


# ---------------------------------------------------------------------------------------------------
# infer_types


def infer_types(graph: Graph, ctx=None) -> Graph:
    """Every value's shape and dtype from the inputs and weights; errors name the node."""
    types: dict = {}
    for v in graph.inputs:
        if v not in graph.types:
            raise Error(f"graph input {v!r} has no shape and dtype; pass shapes= to bind it")
        types[v] = graph.types[v]
    for k, arr in graph.params.items():
        types[k] = TensorType(arr.shape, str(arr.dtype))
    for node in graph.nodes:
        opdef = get_op(node.op, node.name)
        opdef.check_attrs(node)
        attrs = opdef.normalize_attrs(dict(node.attrs), node.name)
        missing = [v for v in node.inputs if v and v not in types]
        if missing:
            raise Error(f"node {node.name} ({node.op}): input {missing[0]!r} is not defined before it")
        try:
            outs = opdef.infer_type([types[v] if v else None for v in node.inputs], attrs)
        except Error as exc:
            raise with_context(exc, f"node {node.name} ({node.op})") from None
        if len(outs) != len(node.outputs):
            raise Error(f"node {node.name} ({node.op}): produces {len(outs)} values but names "
                        f"{len(node.outputs)} outputs")
        types.update(zip(node.outputs, outs))
    for o in graph.outputs:
        if o not in types:
            raise Error(f"graph output {o!r} is not produced by any node")
    return graph.replace(types=types)


# ---------------------------------------------------------------------------------------------------
# simplify_inference


SMALL_POWERS = (2, 3, 4)  # x ** n by a constant n written as multiplies: at most two of them


def _small_power(graph: Graph, node: Node) -> int | None:
    """The exponent of ``power(x, c)`` when ``c`` is a weight whose every element is the same integer in
    ``SMALL_POWERS`` and the output has ``x``'s type (no broadcast by the exponent), else None."""
    if node.op != "power" or len(node.inputs) != 2 or node.inputs[1] not in graph.params:
        return None
    c = graph.params[node.inputs[1]]
    x_type, out_type = graph.types.get(node.inputs[0]), graph.types.get(node.outputs[0])
    if c.size == 0 or x_type is None or x_type != out_type or x_type.dtype not in ("float32", "float64"):
        return None
    first = c.reshape(-1)[0]
    if not np.all(c == first) or float(first) not in SMALL_POWERS:
        return None
    return int(first)


def _expand_power(graph: Graph, node: Node, n: int, types: dict, taken: set) -> list:
    """``power(x, n)`` as multiplies: x*x, (x*x)*x, (x*x)*(x*x). A float ``pow`` has no vector form on
    the CPU backends (a libm call per element): Hugging Face's ``gelu_new`` (GPT-2's MLP, ``x ** 3``) ran
    at 2.5 ms per [128, 3072] tensor, a sixth of GPT-2's time once its products were packed."""
    x, out = node.inputs[0], node.outputs[0]
    square = out if n == 2 else _param_name(graph, f"{out}_square", taken)
    types[square] = types[out]
    nodes = [Node("multiply", f"{node.name}_square", (x, x), (square,), {})]
    if n == 3:
        nodes.append(Node("multiply", f"{node.name}_cube", (square, x), (out,), {}))
    elif n == 4:
        nodes.append(Node("multiply", f"{node.name}_fourth", (square, square), (out,), {}))
    return nodes


def simplify_inference(graph: Graph, ctx=None) -> Graph:
    """batch_norm -> multiply and add by per-channel constants; dropout and identity removed; a float
    power by a constant 2, 3 or 4 -> multiplies (``_expand_power``)."""
    params = dict(graph.params)
    types = dict(graph.types)
    taken: set = set()
    nodes: list = []
    rename: dict = {}
    for node in graph.nodes:
        if node.op in ("dropout", "identity", "copy") and len(node.inputs) >= 1 and node.inputs[0]:
            rename[node.outputs[0]] = node.inputs[0]
            continue
        if node.op == "batch_norm" and all(v in params for v in node.inputs[1:5]):
            attrs = get_op("batch_norm").normalize_attrs(dict(node.attrs), node.name)
            data = node.inputs[0]
            ty = types[data]
            gamma, beta, mean, var = (params[v].astype(np.float64) for v in node.inputs[1:5])
            scale = gamma / np.sqrt(var + attrs["epsilon"])
            shift = beta - mean * scale
            axis = attrs["axis"] % len(ty.shape)
            bshape = [1] * (len(ty.shape) - axis)
            bshape[0] = ty.shape[axis]
            s_name = _param_name(graph, f"{node.name}_scale", taken)
            b_name = _param_name(graph, f"{node.name}_shift", taken)
            params[s_name] = scale.astype(ty.dtype).reshape(bshape)
            params[b_name] = shift.astype(ty.dtype).reshape(bshape)
            types[s_name] = TensorType(tuple(bshape), ty.dtype)
            types[b_name] = TensorType(tuple(bshape), ty.dtype)
            mid = f"{node.outputs[0]}_scaled"
            types[mid] = ty
            nodes.append(Node("multiply", f"{node.name}_mul", (data, s_name), (mid,), {}))
            nodes.append(Node("add", f"{node.name}_add", (mid, b_name), node.outputs, {}))
            continue
        n = _small_power(graph, node)
        if n is not None:
            nodes.extend(_expand_power(graph, node, n, types, taken))
            continue
        nodes.append(node)
    out = graph.replace(nodes=tuple(nodes), params=params, types=types)
    out = rename_uses(out, rename)
    # An output renamed onto a graph input would lose its own name; keep such identities.
    return out


# ---------------------------------------------------------------------------------------------------
# fold_constants


def fold_constants(graph: Graph, ctx=None) -> Graph:
    """Evaluate, at compile time, every node whose inputs are all weights; its outputs become weights
    (not where an output's shape is symbolic: a slice of a weight up to ``seq`` runs at each run)."""
    params = dict(graph.params)
    nodes = []
    for node in graph.nodes:
        opdef = get_op(node.op, node.name)
        if opdef.evaluate is not None and node.inputs and all((not v) or v in params for v in node.inputs) \
                and not any(o in graph.types and graph.types[o].symbolic for o in node.outputs):
            values = evaluate_node(node, [params[v] if v else None for v in node.inputs])
            for o, val in zip(node.outputs, values):
                ty = graph.types.get(o)
                if ty is not None:
                    val = val.astype(ty.dtype, copy=False).reshape(ty.shape)
                params[o] = np.asarray(val, order="C")
            continue
        nodes.append(node)
    return graph.replace(nodes=tuple(nodes), params=params)


# ---------------------------------------------------------------------------------------------------
# CSE and DCE


def _attr_key(v):
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, list | tuple):
        return tuple(_attr_key(x) for x in v)
    return (type(v).__name__, v)


def eliminate_common_subexpressions(graph: Graph, ctx=None) -> Graph:
    """Nodes with the same operator, inputs and attributes are computed once."""
    seen: dict = {}
    rename: dict = {}
    nodes = []
    for node in graph.nodes:
        inputs = tuple(rename.get(v, v) for v in node.inputs)
        node = node.replace(inputs=inputs) if inputs != node.inputs else node
        key = (node.op, inputs, tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())))
        if key in seen:
            for a, b in zip(node.outputs, seen[key].outputs):
                rename[a] = b
            continue
        seen[key] = node
        nodes.append(node)
    out = graph.replace(nodes=tuple(nodes))
    return rename_uses(out, rename) if rename else out


def eliminate_dead_code(graph: Graph, ctx=None) -> Graph:
    """Drop nodes whose outputs nobody reads, and weights nobody uses."""
    live = set(graph.outputs)
    kept = []
    for node in reversed(graph.nodes):
        if any(o in live for o in node.outputs):
            kept.append(node)
            live.update(v for v in node.inputs if v)
    kept.reverse()
    params = {k: v for k, v in graph.params.items() if k in live}
    types = {k: v for k, v in graph.types.items()
             if k in live or k in graph.inputs or any(k in n.outputs for n in kept)}
    return graph.replace(nodes=tuple(kept), params=params, types=types)


# ---------------------------------------------------------------------------------------------------
# fuse_ops

MAX_GROUP_SIZE = 64


def fuse_ops(graph: Graph, ctx=None) -> Graph:
    """Partition nodes into groups that each become one kernel.

    A node joins the group of a producer when the producer's value is read by this node alone and:
    an elementwise or broadcast node follows anything up to a conv/dense (its epilogue, including a
    residual add and the activation after it); an injective node follows injective groups; a reduction
    takes its injective inputs (a node with several such producers joins a conv/dense group first, in
    input order otherwise). After joining, only the new node's outputs may be read outside the
    group, which keeps every group convex (no path leaves it and comes back). A view (``is_view``: a
    concatenation planned in place) stays alone: it has no kernel to fuse into.
    """
    level = getattr(ctx, "opt_level", 3) if ctx is not None else 3
    consumers = graph.consumers()
    producers = graph.producers()
    outputs = set(graph.outputs)
    group_of: dict = {}  # node name -> group index
    groups: list = []  # list of lists of nodes
    pattern: list = []  # max pattern per group
    for node in graph.nodes:
        p = get_op(node.op, node.name).pattern
        joined = None
        if level >= 2 and len(node.outputs) == 1 and p <= OpPattern.REDUCTION and not is_view(node):
            # a conv/dense group first: a residual add is its epilogue whichever operand comes first
            for v in sorted(node.inputs, key=lambda v: _anchor_rank(v, producers, group_of, pattern)):
                prod = producers.get(v)
                if prod is None or len(prod.outputs) != 1 or is_view(prod):
                    continue
                if v in outputs or [c.name for c in consumers.get(v, [])] != [node.name]:
                    continue
                g = group_of[prod.name]
                if len(groups[g]) >= MAX_GROUP_SIZE or not _may_join(pattern[g], p):
                    continue
                members = {m.name for m in groups[g]} | {node.name}
                if all(o not in outputs and all(c.name in members for c in consumers.get(o, []))
                       for m in groups[g] for o in m.outputs):
                    joined = g
                    break
        if joined is None:
            group_of[node.name] = len(groups)
            groups.append([node])
            pattern.append(p)
        else:
            group_of[node.name] = joined
            groups[joined].append(node)
            pattern[joined] = max(pattern[joined], p)
            if p <= OpPattern.BROADCAST:
                _absorb_dequantize(node, joined, groups, group_of, producers, consumers, outputs)
    # Execution order: groups ordered by their last member (all inputs of a group are ready then).
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    groups = [g for g in groups if g]
    groups.sort(key=lambda g: position[g[-1].name])
    order = [n for g in groups for n in g]
    return graph.replace(nodes=tuple(order), groups=tuple(tuple(n.name for n in g) for g in groups))


def _absorb_dequantize(node, g: int, groups: list, group_of: dict, producers: dict, consumers: dict,
                       outputs: set) -> None:
    """The other operand of an elementwise node that joined group ``g``, when it is a ``dequantize`` read
    by this node only (an int8 residual add's shortcut) and alone in its group or the last of one (the
    epilogue of the shortcut's own convolution, ResNet's downsample), moves into ``g``: the kernel reads
    the 8-bit bytes instead of a float32 copy, four times the bytes, written by another kernel. Its
    inputs are made outside ``g`` (no member's value leaves ``g``), so ``g`` stays convex; the group it
    leaves ends at its input, which only it read."""
    for v in node.inputs:
        prod = producers.get(v)
        if prod is None or prod.op != "dequantize" or prod.name not in group_of or v in outputs:
            continue
        k = group_of[prod.name]
        if k == g or groups[k][-1] is not prod or [c.name for c in consumers.get(v, [])] != [node.name]:
            continue
        groups[k].pop()
        groups[g].insert(0, prod)
        group_of[prod.name] = g


def _anchor_rank(v, producers: dict, group_of: dict, pattern: list) -> int:
    """0 for a value made in a group anchored by a conv/dense (``OUT_ELEMWISE_FUSABLE``), else 1."""
    prod = producers.get(v)
    g = group_of.get(prod.name) if prod is not None else None
    return 0 if g is not None and pattern[g] == OpPattern.OUT_ELEMWISE_FUSABLE else 1


def _may_join(group_pattern: OpPattern, node_pattern: OpPattern) -> bool:
    if node_pattern <= OpPattern.BROADCAST:
        return group_pattern <= OpPattern.OUT_ELEMWISE_FUSABLE
    if node_pattern == OpPattern.INJECTIVE:
        return group_pattern <= OpPattern.INJECTIVE
    if node_pattern == OpPattern.REDUCTION:
        return group_pattern <= OpPattern.INJECTIVE
    return False

"""Operators defined by an ONNX function body, expanded into their body's nodes when no converter
exists (or the converter declines a form it does not handle).

Many newer ONNX operators (Attention, RMSNormalization, SoftmaxCrossEntropyLoss, Swish, Mish, Celu,
CenterCropPad, RotaryEmbedding, ...) are specified as a *function*: a small graph of older operators,
sometimes built per node from its attributes and input types (a "context-dependent" function). The
schema in the installed onnx holds that graph, so the frontend converts the operator by converting
its body, node by node, with the body's own opset, after renaming the body's values apart and
substituting the attributes it refers to. This is how ONNX itself defines the operator, so the result
is the reference semantics, and the body's nodes fuse like any others.
"""

from __future__ import annotations

STANDARD_DOMAINS = ("", "ai.onnx")


def _schema(op_type: str, opset: int, domain: str = ""):
    from onnx import defs

    try:
        return defs.get_schema(op_type, opset, domain)
    except Exception:  # onnx raises SchemaError for an unknown operator or version
        return None


def has_function(op_type: str, opset: int, domain: str = "") -> bool:
    """Whether the operator, at this opset, has a function body we can expand."""
    schema = _schema(op_type, opset, domain)
    return schema is not None and bool(schema.function_opset_versions
                                       or schema.context_dependent_function_opset_versions)


def function_body(node, opset: int, input_types: list):
    """The ``FunctionProto`` for ``node`` at ``opset`` (``input_types``: ``TypeProto`` per input), or None."""
    from onnx import FunctionProto

    schema = _schema(node.op_type, opset, node.domain)
    if schema is None:
        return None
    proto = FunctionProto()
    # a schema may carry its body written for several opsets; take the newest not above the model's
    # (or, for a body written only for later opsets, the oldest: the operator's semantics are the same)
    static = [v for v in schema.function_opset_versions if v <= opset] or sorted(
        schema.function_opset_versions
    )[:1]
    dependent = [v for v in schema.context_dependent_function_opset_versions if v <= opset] or sorted(
        schema.context_dependent_function_opset_versions
    )[:1]
    if static and (not dependent or max(static) >= max(dependent)):
        proto.ParseFromString(schema.get_function_with_opset_version(max(static)))
    elif dependent:
        data = schema.get_context_dependent_function_with_opset_version(
            max(dependent),
            _with_defaults(node, schema).SerializeToString(),
            [t.SerializeToString() for t in input_types],
        )
        if not data:
            return None
        proto.ParseFromString(data)
    else:
        return None
    return proto


def _with_defaults(node, schema):
    """``node`` with the schema's default attribute values filled in (bodies may refer to them)."""
    from onnx import NodeProto

    full = NodeProto()
    full.CopyFrom(node)
    present = {a.name for a in node.attribute}
    for name, spec in schema.attributes.items():
        if name not in present and spec.default_value and spec.default_value.name:
            full.attribute.append(spec.default_value)
    return full


def expand(node, name: str, opset: int, input_types: list):
    """``(nodes, body opset)``: the body's nodes with values renamed into the caller's graph, or None."""
    from onnx import AttributeProto, NodeProto

    body = function_body(node, opset, input_types)
    if body is None or not body.node:
        return None
    schema = _schema(node.op_type, opset, node.domain)
    attrs = {a.name: a for a in _with_defaults(node, schema).attribute}
    prefix = f"{name}/"
    rename = {"": ""}
    for k, v in enumerate(body.input):
        rename[v] = node.input[k] if k < len(node.input) else ""
    for k, v in enumerate(body.output):
        if k < len(node.output) and node.output[k]:
            rename[v] = node.output[k]

    def r(v: str) -> str:
        return rename.get(v, prefix + v)

    out = []
    for inner in body.node:
        n = NodeProto()
        n.CopyFrom(inner)
        del n.input[:]
        n.input.extend(r(v) for v in inner.input)
        del n.output[:]
        n.output.extend(r(v) for v in inner.output)
        del n.attribute[:]
        for a in inner.attribute:
            if a.HasField("g") or a.graphs:
                a = _renamed_subgraphs(a, r)
            if a.ref_attr_name:
                if a.ref_attr_name not in attrs:
                    continue
                ref = AttributeProto()
                ref.CopyFrom(attrs[a.ref_attr_name])
                ref.name = a.name
                n.attribute.append(ref)
            else:
                n.attribute.append(a)
        n.name = f"{name}/{inner.name or inner.op_type}_{len(out)}"
        out.append(n)
    body_opset = max((o.version for o in body.opset_import if o.domain in STANDARD_DOMAINS), default=opset)
    return out, int(body_opset)


def _renamed_subgraphs(attr, rename):
    """A copy of a graph attribute whose references to the function's values are renamed."""
    from onnx import AttributeProto

    out = AttributeProto()
    out.CopyFrom(attr)
    for g in ([out.g] if out.HasField("g") else []) + list(out.graphs):
        _rename_outer(g, rename, set())
    return out


def _rename_outer(graph, rename, bound: set) -> None:
    inner = set(bound) | {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    for n in graph.node:
        for k, v in enumerate(n.input):
            if v and v not in inner:
                n.input[k] = rename(v)
        for a in n.attribute:
            for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename_outer(g, rename, inner)
        inner.update(n.output)
    for o in graph.output:
        if o.name not in inner:
            o.name = rename(o.name)

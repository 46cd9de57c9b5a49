"""ONNX model -> nnvm ``Graph``.

The steps: read the model (path, bytes or ``ModelProto``; a file's large weights are read in place,
see ``mapped``) and inline its local functions; drop the nodes no output depends on; check every
remaining node's operator is one we convert and report all that are not at once; turn initializers
into weights and the other graph inputs into runtime inputs with static shapes; then convert the nodes
in order through the converter table
(``context.CONVERTERS``), with the builder inferring types and folding constants as it goes.

Input shapes: ``shapes=`` gives an input its whole shape (same rank as declared; it may also change
static dimensions, such as a batch of 1). Otherwise the declared shape is used, where a symbolic
leading dimension whose name says it is the batch (``N``, ``batch``, ``batch_size``; not unnamed or
``unk__0``-style dimensions) defaults to 1, and any other symbolic dimension is an error naming the
input and the dimension.
"""

from __future__ import annotations

import mmap
import os

import numpy as np

from nnvm.errors import Error, InputError, ModelLoadError
from nnvm.frontend import (
    FailedConversionError,
    bind_input,
    call_converter,
    check_shape_keys,
    check_supported,
    reading,
    unique_names,
)
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.ir import Graph
from nnvm_frontend_onnx import (  # noqa: F401  (convert_*: fill CONVERTERS)
    convert_control,
    convert_index,
    convert_math,
    convert_nn,
    convert_norm,
    convert_quant,
    convert_resize,
    convert_rnn,
    convert_sampling,
    convert_sequence,
    convert_signal,
    convert_tensor,
    convert_text,
    functions,
    mapped,
    qdq,
    sequences,
    shape_values,
)
from nnvm_frontend_onnx.context import (
    CONVERTERS,
    Context,
    ConvertError,
    ValueDependentError,
    node_label,
    onnx_dtype,
)

ONNX_DOMAINS = ("", "ai.onnx")


# -- reading ----------------------------------------------------------------------------------------
def is_model_proto(obj) -> bool:
    """True for an ``onnx.ModelProto`` (checked by type, so onnx need not be imported)."""
    t = type(obj)
    return t.__name__ == "ModelProto" and t.__module__.split(".")[0] == "onnx"


def read_model(model, in_place: bool = True) -> tuple:
    """``(ModelProto, path or None, {initializer name: array}})`` from a path, serialized bytes or a
    ``ModelProto``. ``in_place``: a file's large initializers are views of the mapped file, left out of
    the message (``mapped``), and every other initializer is read from the message; else the message
    holds them all (for a caller that hands the message on)."""
    import onnx

    if is_model_proto(model):
        return _checked(model, "the ONNX model"), None, {}
    if isinstance(model, bytes | bytearray | memoryview):
        return _parse(bytes(model), "the ONNX bytes"), None, {}
    if not isinstance(model, str | os.PathLike):
        raise ModelLoadError(f"cannot read an ONNX model from a {type(model).__name__} object")
    path = os.fspath(model)
    try:
        mapping = mapped.open_mapped(path)
    except FileNotFoundError:
        raise ModelLoadError(f"{path}: no such file") from None
    except OSError as exc:
        raise ModelLoadError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except ValueError:  # an empty file cannot be mapped
        mapping = b""
    found = mapped.split(mapping) if in_place else None
    if found is None:
        data = mapping[:]
        if isinstance(mapping, mmap.mmap):
            mapping.close()
        proto, weights = _parse(data, path), {}
    else:
        proto = _parse(found[0], path)
        weights = _mapped_weights(proto, mapping, found[1], path)
    if _has_external_data(proto):
        _check_external_locations(proto, path)
        with reading(path, "the external weight data cannot be read"):
            onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(path) or ".")
    return proto, path, weights


def _mapped_weights(proto, mapping, places: dict, path: str) -> dict:
    """The mapped initializers as arrays, each checked against its declared shape."""
    weights = {}
    for t in proto.graph.initializer:
        if t.name not in places:
            continue
        dtype, offset, nbytes = places[t.name]
        array = mapped.view(mapping, dtype, offset, nbytes, t.dims)
        if array is None:
            raise ModelLoadError(f"{path}: initializer {t.name!r} cannot be read: its {nbytes} bytes of "
                                 f"data do not make a {np.dtype(dtype).name} tensor of shape {list(t.dims)}")
        weights[t.name] = array
    return weights


def _check_external_locations(proto, path: str) -> None:
    """External tensor files must lie inside the model's folder: a location that leaves it (``..``, an
    absolute path, a link elsewhere) could read any file the user can, so it is an error."""
    from onnx import TensorProto

    base = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for t in proto.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        location = next((e.value for e in t.external_data if e.key == "location"), "")
        target = os.path.realpath(os.path.join(base, location))
        if not location or os.path.isabs(location) or os.path.commonpath([base, target]) != base:
            raise ModelLoadError(f"{path}: initializer {t.name!r} keeps its data at {location!r}, outside "
                                 f"the model's folder; external data must lie inside it")
        if not os.path.isfile(target):
            raise ModelLoadError(f"{path}: initializer {t.name!r} keeps its data in {location!r}, which is "
                                 f"missing from the model's folder")


def _parse(data: bytes, where: str):
    import onnx

    proto = onnx.ModelProto()
    with reading(where, "not a valid ONNX model, its protobuf is truncated or corrupt"):
        proto.ParseFromString(data)
    return _checked(proto, where)


def _checked(proto, where: str):
    import onnx

    if not proto.ir_version or not proto.HasField("graph") or not proto.graph.output:
        raise ModelLoadError(f"{where}: not a valid ONNX model (no graph, outputs or IR version)")
    if proto.ir_version > onnx.IR_VERSION:  # a future format may mean what we would misread
        raise ModelLoadError(f"{where}: ONNX IR version {proto.ir_version} is newer than this nnvm reads "
                             f"(IR versions 1 to {onnx.IR_VERSION}, onnx {onnx.__version__})")
    return proto


def _has_external_data(proto) -> bool:
    from onnx import TensorProto

    return any(t.data_location == TensorProto.EXTERNAL for t in proto.graph.initializer)


def looks_like_onnx(model) -> bool:
    """``Frontend.accepts``: a ModelProto, or a file or bytes that parse as an ONNX model."""
    if is_model_proto(model):
        return True
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                if f.read(1) != b"\x08":  # serialized models start with field 1, ir_version
                    return False
        except OSError:
            return False
    elif isinstance(model, bytes | bytearray):
        if not model[:1] == b"\x08":
            return False
    else:
        return False
    try:
        read_model(model)
    except Error:
        return False
    return True


# -- importing --------------------------------------------------------------------------------------
def load_onnx(model, shapes: dict | None = None) -> Graph:
    """The nnvm graph of an ONNX model (path, bytes or ``onnx.ModelProto``).

    ``shapes`` maps input names to shapes and binds symbolic dimensions. A graph output that is a
    sequence or an optional becomes the tensors it holds, one graph output each (``import_onnx``).
    """
    return import_onnx(model, shapes)[0]


def import_onnx(model, shapes: dict | None = None) -> tuple:
    """``(graph, layout)``: ``load_onnx``'s graph and, per ONNX graph output, what it is: an nnvm value
    for a tensor, or a ``sequences.TensorSequence`` / ``OptionalValue`` whose tensors are the graph's
    outputs in ``sequences.flatten``'s order (``sequences.regroup`` puts a run's arrays back)."""
    proto, path, mapped_weights = read_model(model)
    where = path or "the ONNX model"
    if proto.functions:  # model-local functions (exporters write them): inline them into plain nodes
        proto = _inline_functions(proto, where)
    graph = proto.graph
    opset = _opset(proto, where)
    names = _node_names(graph)
    _check_defined(graph, names, where)
    nodes = _live_nodes(graph, names)
    arrays = _initializer_arrays(graph, mapped_weights, where)
    fused = qdq.fuse_qdq(nodes, arrays.get, [o.name for o in graph.output])
    if fused is not nodes:
        nodes = _live_pairs(fused, {o.name for o in graph.output})
    _check_supported(nodes, opset, path)

    b = GraphBuilder(name=graph.name or (os.path.splitext(os.path.basename(path))[0] if path else "model"))
    env: dict[str, str] = {}  # ONNX value name -> nnvm value name
    initializers = {t.name for t in graph.initializer}

    for t in graph.initializer:
        env[t.name] = b.param(t.name, arrays[t.name])
    _add_inputs(b, env, [vi for vi in graph.input if vi.name not in initializers], shapes, where)

    consumed = {v for n, _ in nodes for v in n.input if v} | {o.name for o in graph.output}
    ctx = Context(b, opset, consumed)
    ctx.env = env
    for node, name in nodes:
        _convert_node(ctx, node, name, env)

    produced = {v for n in b.nodes for v in n.outputs}
    layout, names, emitted = [], [], set()
    for out in graph.output:
        if out.name not in env:
            raise ModelLoadError(f"{where}: graph output {out.name!r} is not produced by any node")
        layout.append(env[out.name])
        values = sequences.flatten(env[out.name])
        many = values != [env[out.name]]
        for k, value in enumerate(values):
            name = f"{out.name}.{k}" if many else out.name
            if value not in produced or value in emitted:  # an input, a constant, or a value given twice
                value = _computed_copy(b, value, name)
            emitted.add(value)
            b.output(value)
            names.append(name)
    if not names:
        raise ModelLoadError(f"{where}: the graph outputs hold no tensor (only empty sequences or optionals)")
    return _name_outputs(b.build(), names), layout


def _convert_node(ctx: Context, node, name: str, env: dict) -> None:
    """Convert one ONNX node, recording its outputs' nnvm values in ``env``; errors name the node."""
    inputs = [env[v] if v else "" for v in node.input]
    while inputs and not inputs[-1]:
        inputs.pop()
    if node.op_type not in CONVERTERS:
        _convert_function(ctx, node, name, env, inputs)
        return
    ctx.begin(node, name)
    label = ctx.label
    containers = [k for k, v in enumerate(inputs) if sequences.is_container(v)]
    if containers:
        if node.op_type not in sequences.CONTAINER_OPS:
            raise ConvertError(f"{label}: input {node.input[containers[0]]!r} is a sequence or an optional, "
                               f"and {node.op_type} takes tensors")
        for out, value in zip(node.output, call_converter(ctx, CONVERTERS[node.op_type], inputs)):
            if out and value is not None:
                env[out] = value
        return
    if shape_values.wants(ctx, node.op_type, inputs):  # a shape computation over symbolic dims
        convert = lambda c, ins: shape_values.convert(c, node.op_type, ins)  # noqa: E731
        (env[node.output[0]],) = call_converter(ctx, convert, inputs)
        return
    inputs = shape_values.materialize(ctx, node.op_type, inputs)
    try:
        results = call_converter(ctx, CONVERTERS[node.op_type], inputs)
    except (ValueDependentError, FailedConversionError):
        raise
    except ConvertError:
        symbolic = any(v in ctx.symbolic_values for v in inputs)  # a function body would need a tensor
        if functions.has_function(node.op_type, ctx.opset, node.domain) and not symbolic:
            _convert_function(ctx, node, name, env, inputs)  # a form the converter declines
            return
        raise
    for out, value in zip(node.output, results):
        if out and value is not None and sequences.is_container(value):
            env[out] = value
        elif out and value is not None:
            shape = ctx.shape(value)
            if 0 in shape and ctx.const_value(value) is None:  # an empty tensor needs no kernel
                value = ctx.param(np.zeros(shape, dtype=ctx.dtype(value)), "empty")
            env[out] = value
    for out in node.output[len(results) :]:
        if out in ctx.consumed:
            raise ConvertError(f"{label}: output {out!r} is not supported")


def _convert_function(ctx: Context, node, name: str, env: dict, inputs: list) -> None:
    """Convert an operator through its ONNX function body (see ``functions``), with the body's opset."""
    from onnx import helper

    types = []
    for v in inputs:
        if v:
            elem = helper.np_dtype_to_tensor_dtype(np.dtype(ctx.dtype(v)))
            types.append(helper.make_tensor_type_proto(elem, ctx.shape(v)))
        else:
            types.append(helper.make_tensor_type_proto(0, None))
    expanded = functions.expand(node, name, ctx.opset, types)
    if expanded is None:
        raise ConvertError(f"{node_label(name, node.op_type, ctx.opset)}: operator not supported")
    body, body_opset = expanded
    saved = ctx.opset, ctx.consumed
    ctx.opset = body_opset
    ctx.consumed = saved[1] | {v for n in body for v in n.input if v}
    try:
        for inner in body:
            _convert_node(ctx, inner, inner.name, env)
    finally:
        ctx.opset, ctx.consumed = saved


def _computed_copy(b: GraphBuilder, value: str, name: str) -> str:
    """A graph output that is an input or a constant becomes a ``copy`` of it, computed at run time."""
    fold, b.fold_constants = b.fold_constants, False
    try:
        return b.node("copy", [value], {}, name=name, outputs=[name])[0]
    finally:
        b.fold_constants = fold


def _inline_functions(proto, where: str):
    from onnx import inliner

    try:
        return inliner.inline_local_functions(proto)
    except Exception as exc:  # onnx raises plain RuntimeErrors for malformed functions
        raise ModelLoadError(f"{where}: its local functions cannot be inlined ({exc})") from None


def _opset(proto, where: str = "the ONNX model") -> int:
    """The default domain's opset; one newer than the installed onnx knows is refused (onnxruntime
    refuses it too), since its operators may not mean what the converters assume."""
    from onnx.defs import onnx_opset_version

    versions = [o.version for o in proto.opset_import if o.domain in ONNX_DOMAINS]
    opset = int(max(versions)) if versions else 1
    if not 1 <= opset <= onnx_opset_version():
        raise ModelLoadError(f"{where}: ONNX opset {opset} is not supported (this nnvm reads opsets 1 to "
                             f"{onnx_opset_version()})")
    return opset


def _node_names(graph) -> list[str]:
    """Unique names for the nodes: the ONNX name, or ``<OpType>_<index>`` for unnamed nodes."""
    return unique_names((node.name, node.op_type) for node in graph.node)


def _initializer_arrays(graph, mapped_weights: dict, where: str) -> dict:
    """initializer name -> its array (a view of the mapped file where ``mapped`` left it out)."""
    from onnx import numpy_helper

    arrays = {}
    for t in graph.initializer:
        array = mapped_weights.get(t.name)
        if array is None:
            with reading(where, f"initializer {t.name!r} cannot be read"):  # corrupt or unusual tensor data
                array = numpy_helper.to_array(t)
        arrays[t.name] = array
    return arrays


def _live_nodes(graph, names: list[str]) -> list:
    """``(node, name)`` for the nodes the graph outputs depend on, in order; dead nodes are dropped
    (exporters leave some behind, such as index computations for a MaxPool's unused Indices)."""
    return _live_pairs(list(zip(graph.node, names)), {o.name for o in graph.output})


def _live_pairs(pairs: list, outputs: set) -> list:
    needed = set(outputs)
    live = []
    for node, name in reversed(pairs):
        if any(o in needed for o in node.output if o):
            live.append((node, name))
            needed.update(v for v in node.input if v)
            needed.update(_outer_references(node))
    return live[::-1]


def _outer_references(node) -> set:
    """Values a node's subgraphs (If branches, Loop and Scan bodies) read from enclosing scopes."""
    out: set = set()
    for attr in node.attribute:
        for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            inner = {vi.name for vi in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                out.update(v for v in n.input if v and v not in inner)
                out.update(v for v in _outer_references(n) if v not in inner)
                inner.update(n.output)
            out.update(o.name for o in g.output if o.name not in inner)
    return out


def _check_supported(nodes, opset: int, path) -> None:
    """Raise one ``UnsupportedOperatorError`` listing every operator we cannot convert, with its nodes."""

    def key(node) -> str:
        return node.op_type if node.domain in ONNX_DOMAINS else f"{node.domain}.{node.op_type}"

    supported = {key(node) for node, _ in nodes if node.domain in ONNX_DOMAINS and (
        node.op_type in CONVERTERS or functions.has_function(node.op_type, opset))}
    supported |= {key(node) for node, _ in nodes
                  if node.domain == qdq.MICROSOFT and node.op_type in convert_quant.MICROSOFT_OPS}
    check_supported(((key(node), name) for node, name in nodes), supported.__contains__,
                    f"ONNX (opset {opset})", path)


def _check_defined(graph, names, where: str) -> None:
    """Every node input must be defined before it (catches truncated and unsorted models)."""
    defined = {t.name for t in graph.initializer} | {vi.name for vi in graph.input}
    for node, name in zip(graph.node, names):
        for v in node.input:
            if v and v not in defined:
                raise ModelLoadError(
                    f"{where}: node {name} ({node.op_type}) reads {v!r}, which no earlier "
                    f"node, input or initializer defines"
                )
        defined.update(o for o in node.output if o)


def _add_inputs(b: GraphBuilder, env: dict, inputs, shapes: dict | None, where: str) -> None:
    shapes = check_shape_keys(shapes, [vi.name for vi in inputs], where)
    for vi in inputs:
        name = vi.name
        if not vi.type.HasField("tensor_type"):
            kind = vi.type.WhichOneof("value") or "untyped"
            raise InputError(f"input {name!r} of {where} is a {kind.removesuffix('_type')}, not a tensor; "
                             f"nnvm modules take tensor inputs (ONNX's backend interface, "
                             f"nnvm_frontend_onnx.backend, takes sequences and optionals as lists and None)")
        tt = vi.type.tensor_type
        dtype = onnx_dtype(tt.elem_type, f"input {name!r}") if tt.elem_type else "float32"
        declared = (
            [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim]
            if tt.HasField("shape")
            else None
        )
        env[name] = b.input(name, bind_input(name, declared, shapes, where), dtype)


def _name_outputs(graph: Graph, onnx_names: list[str]) -> Graph:
    """Give graph outputs their ONNX names where the converted value has another name."""
    taken = set(graph.inputs) | set(graph.params) | {v for n in graph.nodes for v in n.outputs}
    produced = {v for n in graph.nodes for v in n.outputs}
    rename: dict[str, str] = {}
    for value, want in zip(graph.outputs, onnx_names):
        if value != want and value in produced and value not in rename and want not in taken:
            rename[value] = want
            taken.add(want)
    if not rename:
        return graph

    def r(v):
        return rename.get(v, v)

    nodes = [
        n.replace(inputs=tuple(r(v) for v in n.inputs), outputs=tuple(r(v) for v in n.outputs))
        for n in graph.nodes
    ]
    types = {r(k): v for k, v in graph.types.items()}
    return graph.replace(nodes=nodes, outputs=tuple(r(v) for v in graph.outputs), types=types)

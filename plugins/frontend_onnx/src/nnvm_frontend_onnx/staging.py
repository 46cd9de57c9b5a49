"""ONNX models cut at a data-dependent node (``Frontend.split``, ``nnvm.staged``): the nodes before it,
the node run on the host (the core's ``nnvm.runtime.host_ops``: ONNX's semantics in numpy), and the
rest, each stage a model of its own.

Operators run so: ``NonZero``, ``TopK`` (a computed k), ``Range`` (computed start, limit or delta),
``Compress`` (a computed condition) and ``Unique``; each converter raises ``DataDependentOpError`` when its
deciding input is not known when importing.
"""

from __future__ import annotations

import numpy as np
from onnx import AttributeProto, helper, numpy_helper

from nnvm.errors import Error
from nnvm.runtime.host_ops import HostOp
from nnvm.staged import Split
from nnvm_frontend_onnx.context import onnx_dtype
from nnvm_frontend_onnx.importer import (
    _initializer_arrays,
    _inline_functions,
    _live_nodes,
    _node_names,
    read_model,
)


def host_op(node, label: str) -> HostOp:
    """The ``HostOp`` running ONNX ``node`` (an operator of the core's ``HOST_OPS``, whose semantics are
    ONNX's); ``label`` names it in errors."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    return HostOp(label, node.op_type, list(node.input), list(node.output), attrs)


# -- cutting a model -------------------------------------------------------------------------------------
def _reads(node) -> set:
    """The values a node reads, its subgraphs' outer values included (over-approximated: every input
    any node of a subgraph names)."""
    out = {v for v in node.input if v}
    for a in node.attribute:
        graphs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) \
            if a.type == AttributeProto.GRAPHS else []
        for g in graphs:
            for inner in g.node:
                out |= _reads(inner)
    return out


def _stage_model(proto, nodes: list, inputs: list, outputs: list, initializers: dict):
    """A model of ``nodes`` over ``inputs`` (``ValueInfoProto``s), computing ``outputs`` (names)."""
    reads = set().union(*(_reads(n) for n in nodes)) if nodes else set()
    graph = helper.make_graph(nodes, f"{proto.graph.name or 'model'}_stage", inputs,
                              [helper.make_empty_tensor_value_info(v) for v in outputs],
                              [t for name, t in initializers.items() if name in reads])
    model = helper.make_model(graph, opset_imports=list(proto.opset_import))
    model.ir_version = proto.ir_version
    return model


def split_onnx(model, exc) -> Split:
    """``Frontend.split``: ``model`` cut at the top-level node whose first output ``exc.output`` names."""
    proto, path, mapped = read_model(model)
    where = path or "the ONNX model"
    if proto.functions:
        proto = _inline_functions(proto, where)
    graph = proto.graph
    names = _node_names(graph)
    live = _live_nodes(graph, names)
    at = next((k for k, (n, _) in enumerate(live) if getattr(exc, "output", None) in n.output), None)
    if at is None:  # inside a subgraph or an operator's function body: no stage boundary there
        raise Error(f"{exc}; it lies inside a subgraph, where the model cannot be cut into stages") from None
    node, label = live[at]
    before, after = [n for n, _ in live[:at]], [n for n, _ in live[at + 1:]]
    arrays = _initializer_arrays(graph, mapped, where)
    initializers = {t.name: t if t.name not in mapped else numpy_helper.from_array(arrays[t.name], t.name)
                    for t in graph.initializer}
    graph_inputs = [vi for vi in graph.input if vi.name not in initializers]
    input_names = [vi.name for vi in graph_inputs]
    outputs = [o.name for o in graph.output]
    produced_before = [v for n in before for v in n.output if v]
    later = set().union(*(_reads(n) for n in after)) if after else set()
    needed = later | {v for v in node.input if v} | set(outputs)
    before_outputs = [v for v in dict.fromkeys(produced_before) if v in needed]
    before_reads = set().union(*(_reads(n) for n in before)) if before else set()
    before_inputs = [v for v in input_names if v in before_reads]
    host = host_op(node, label)
    # what the host op reads, and graph outputs no stage computes (an initializer given as an output)
    constants = {v: arrays[v] for v in [*node.input, *outputs] if v in initializers}

    def types_of(vi):
        tt = vi.type.tensor_type
        dtype = onnx_dtype(tt.elem_type, f"input {vi.name!r}") if tt.elem_type else "float32"
        declared = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        return dtype, declared

    first = _stage_model(proto, before, [vi for vi in graph_inputs if vi.name in before_inputs],
                         before_outputs, initializers) if before_outputs else None
    produced_after = {v for n in after for v in n.output if v}
    after_outputs = [v for v in outputs if v in produced_after]
    available = set(input_names) | set(produced_before) | {v for v in node.output if v}
    after_inputs = [v for v in dict.fromkeys(list(input_names) + produced_before + list(node.output))
                    if v and v in later and v in available]

    def rest(types: dict):
        ins = []
        for v in after_inputs:
            if v in input_names:
                ins.append(next(vi for vi in graph_inputs if vi.name == v))
            else:
                dtype, shape = types[v]
                elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
                ins.append(helper.make_tensor_value_info(v, elem, list(shape)))
        return _stage_model(proto, after, ins, after_outputs, initializers)

    return Split(inputs=input_names, input_types={vi.name: types_of(vi) for vi in graph_inputs},
                 outputs=outputs, before=first, before_inputs=before_inputs, before_outputs=before_outputs,
                 op=host, after=rest if after_outputs else None, after_inputs=after_inputs,
                 after_outputs=after_outputs, constants=constants)

"""The graph IR: building, validation errors that name the node, JSON round trip, text form."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.ir import Graph, Node, TensorType, load_params, save_params
from nnvm.passes import builtin


def _small_graph() -> Graph:
    b = GraphBuilder("small")
    x = b.input("x", (2, 3), "float32")
    w = b.param("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.node1("add", [x, w], name="add0")
    z = b.node1("relu", [y], name="relu0")
    b.output(z)
    return b.build()


def test_builder_infers_types_and_folds_constants():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    c = b.node1("add", [b.const(np.ones((3,), np.float32)), b.const(np.ones((3,), np.float32))])
    assert c in b.params and np.array_equal(b.params[c], np.full((3,), 2, np.float32))
    y = b.node1("multiply", [x, c])
    assert b.type(y) == TensorType((2, 3), "float32")
    assert len(b.nodes) == 1


def test_json_round_trip_keeps_everything():
    g = _small_graph()
    g2 = Graph.from_json(g.to_json())
    assert g2.to_json() == g.to_json()
    assert [n.op for n in g2.nodes] == ["add", "relu"]
    assert np.array_equal(g2.params["w"], g.params["w"])
    assert g2.types["relu0"] == TensorType((2, 3), "float32")


def test_text_form_is_readable():
    text = _small_graph().text()
    assert "%add0: float32[2, 3] = add(%x, %w)  # add0" in text
    assert "param %w: float32[2, 3]" in text
    assert "return %relu0" in text


def test_validation_names_the_node():
    g = _small_graph()
    bad = g.replace(nodes=(g.nodes[0], Node("relu", "relu0", ("nowhere",), ("relu0",), {})))
    with pytest.raises(nnvm.Error, match="node relu0 \\(relu\\): input 'nowhere' is not defined"):
        bad.validate()
    bad = g.replace(nodes=(g.nodes[0], Node("relu", "relu0", ("add0",), ("relu0",), {"alpha": 1.0})))
    with pytest.raises(nnvm.Error, match="node relu0 \\(relu\\): unknown attribute 'alpha'"):
        bad.validate()
    bad = g.replace(nodes=(g.nodes[0], Node("frobnicate", "f0", ("add0",), ("relu0",), {})))
    with pytest.raises(nnvm.Error, match="node f0: unknown operator 'frobnicate'"):
        bad.validate()


def test_type_errors_name_the_node():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.input("y", (4, 5))
    with pytest.raises(nnvm.Error, match="node bad_add \\(add\\)"):
        b.node1("add", [x, y], name="bad_add")


def test_params_blob_round_trip():
    params = {"a": np.arange(10, dtype=np.float32), "b": np.ones((3, 4), np.int64),
              "c": np.zeros((), np.float64)}
    back = load_params(save_params(params))
    for k, v in params.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v)


class _TargetDeclines(nnvm.UnsupportedOperatorError):
    """What a backend raises for an operator it cannot compile (the class is what callers match)."""

    def __init__(self, op: str, node: str):
        super().__init__("llvm", {op: [node]})


def _declining(opdef, where: str):
    def fail(*_args):
        raise _TargetDeclines(opdef.name, "relu0")

    return dataclasses.replace(opdef, **{where: fail})


def test_node_context_keeps_the_error_class(monkeypatch):
    """Type inference and compute add the node to the message without turning an
    UnsupportedOperatorError into a plain Error."""
    from nnvm.compiler import group_compute
    from nnvm.plugins import op_registry

    graph = _small_graph()
    ops = op_registry()._ops
    relu = ops["relu"]
    monkeypatch.setitem(ops, "relu", _declining(relu, "compute"))
    with pytest.raises(_TargetDeclines, match=r"^node relu0 \(relu\): .*unsupported operator"):
        group_compute(graph, 0, list(graph.nodes))
    monkeypatch.setitem(ops, "relu", _declining(relu, "infer_type"))
    b = GraphBuilder()
    with pytest.raises(_TargetDeclines, match=r"^node r \(relu\): "):
        b.node1("relu", [b.input("x", (2, 3))], name="r")
    with pytest.raises(_TargetDeclines, match=r"^node relu0 \(relu\): "):
        builtin.infer_types(graph.replace(types={"x": graph.types["x"]}))

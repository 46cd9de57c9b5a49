"""fold_scale_axis on small hand-built graphs: the graph after the pass, and numbers against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph
from nnvm.passes import builtin
from nnvm.passes.fold_scale import fold_scale_axis

RNG = np.random.default_rng(0)


def _f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _check_same_numbers(before, after, shape):
    x = _f32(*shape)
    want = evaluate_graph(before, {"x": x})
    got = evaluate_graph(after, {"x": x})
    for k, (w, g) in enumerate(zip(want, got)):
        err = np.abs(g.astype(np.float64) - w).max() / (np.abs(w).max() + 1e-30)
        assert err < 1e-5, f"output {k}: relative error {err:.2e} after fold_scale_axis"


def _conv_graph(chain, groups=1, cin=4, cout=8, extra_output=None):
    """conv2d then ``chain``: a list of ("bn" | "bias" | "mul" | "add" | "relu", const shape or None)."""
    b = GraphBuilder("g", fold_constants=False)
    x = b.input("x", (1, cin, 6, 6))
    w = b.param("w", _f32(cout, cin // groups, 3, 3))
    y = b.node1("conv2d", [x, w], {"padding": (1, 1, 1, 1), "groups": groups}, name="conv")
    values = {"conv": y}
    for k, (op, shape) in enumerate(chain):
        if op == "bn":
            stats = [b.param(None, (RNG.random(cout) + 0.5).astype(np.float32)) for _ in range(4)]
            y = b.node1("batch_norm", [y, *stats], name=f"bn{k}")
        elif op == "bias":
            y = b.node1("bias_add", [y, b.param(None, _f32(cout))], {"axis": 1}, name=f"bias{k}")
        elif op in ("multiply", "add"):
            y = b.node1(op, [y, b.param(None, _f32(*shape))], name=f"{op}{k}")
        else:
            y = b.node1(op, [y], name=f"{op}{k}")
        values[f"{op}{k}"] = y
    b.output(y)
    if extra_output:
        b.output(values[extra_output])
    return builtin.infer_types(b.build())


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_conv_batch_norm_becomes_conv_bias_add(groups):
    g = builtin.simplify_inference(_conv_graph([("bn", None), ("relu", None)], groups=groups, cout=4))
    assert [n.op for n in g.nodes] == ["conv2d", "multiply", "add", "relu"]
    g2 = fold_scale_axis(g)
    assert [n.op for n in g2.nodes] == ["conv2d", "bias_add", "relu"]
    assert g2.outputs == g.outputs
    g2.validate()
    _check_same_numbers(g, g2, (1, 4, 6, 6))
    assert [n.op for n in g.nodes] == ["conv2d", "multiply", "add", "relu"]  # input untouched


def test_bias_add_then_scale_scales_the_bias_too():
    g = _conv_graph([("bias", None), ("multiply", (8, 1, 1)), ("add", (1, 8, 1, 1)), ("add", (8, 1, 1))])
    g2 = fold_scale_axis(g)
    assert [n.op for n in g2.nodes] == ["conv2d", "bias_add"]
    assert builtin.infer_types(g2).types == g2.types
    _check_same_numbers(g, g2, (1, 4, 6, 6))


def test_scalar_scale_folds():
    g = fold_scale_axis(_conv_graph([("multiply", (1,)), ("add", ())]))
    assert [n.op for n in g.nodes] == ["conv2d", "bias_add"]


@pytest.mark.parametrize("shape", [(8, 6, 1), (1, 1, 6), (2, 8, 1, 1)])
def test_constants_not_per_channel_stay(shape):
    g = _conv_graph([("multiply", shape)])
    assert [n.op for n in fold_scale_axis(g).nodes] == ["conv2d", "multiply"]


def test_values_read_elsewhere_are_not_changed():
    # the conv output is also a graph output: scaling its weights would change that output
    g = _conv_graph([("multiply", (8, 1, 1))], extra_output="conv")
    g2 = fold_scale_axis(g)
    assert [n.op for n in g2.nodes] == ["conv2d", "multiply"]
    _check_same_numbers(g, g2, (1, 4, 6, 6))
    # a bias_add read twice cannot take the scale either
    g = _conv_graph([("bias", None), ("multiply", (8, 1, 1))], extra_output="bias0")
    assert [n.op for n in fold_scale_axis(g).nodes] == ["conv2d", "bias_add", "multiply"]


def test_scale_after_relu_is_not_folded():
    g = _conv_graph([("relu", None), ("multiply", (8, 1, 1))])
    assert [n.op for n in fold_scale_axis(g).nodes] == ["conv2d", "relu", "multiply"]


def test_dense_scale_and_shift_fold_along_the_last_axis():
    b = GraphBuilder("d", fold_constants=False)
    x = b.input("x", (3, 5))
    y = b.node1("dense", [x, b.param("w", _f32(4, 5))], name="fc")
    y = b.node1("multiply", [b.param("s", _f32(4)), y], name="mul")
    y = b.node1("add", [y, b.param("t", _f32(1, 4))], name="add")
    y = b.node1("add", [y, b.param("u", _f32(4))], name="add2")
    b.output(y)
    g = builtin.infer_types(b.build())
    g2 = fold_scale_axis(g)
    assert [n.op for n in g2.nodes] == ["dense", "bias_add"]
    assert set(g2.params) == {n.inputs[1] for n in g2.nodes}  # the unfolded weights are gone
    _check_same_numbers(g, g2, (3, 5))
    # a per-row constant [3, 1] is not per output channel
    b2 = GraphBuilder("d", fold_constants=False)
    x = b2.input("x", (3, 5))
    y = b2.node1("dense", [x, b2.param("w", _f32(4, 5))], name="fc")
    b2.output(b2.node1("multiply", [y, b2.param("s", _f32(3, 1))], name="mul"))
    assert [n.op for n in fold_scale_axis(builtin.infer_types(b2.build())).nodes] == ["dense", "multiply"]

"""Graph passes on small hand-built graphs: the graph after each pass, and unchanged numbers."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph
from nnvm.passes import builtin
from nnvm.passes.manager import PassContext, run_pipeline

RNG = np.random.default_rng(0)


def conv_bn_relu_graph():
    b = GraphBuilder("cbr", fold_constants=False)
    x = b.input("x", (1, 4, 8, 8))
    w = b.param("w", RNG.standard_normal((8, 4, 3, 3)).astype(np.float32))
    y = b.node1("conv2d", [x, w], {"padding": (1, 1, 1, 1)}, name="conv")
    stats = [b.param(f"bn_{k}", (RNG.random(8) + 0.5).astype(np.float32)) for k in ("g", "b", "m", "v")]
    y = b.node1("batch_norm", [y, *stats], {"epsilon": 1e-5}, name="bn")
    y = b.node1("dropout", [y], name="drop")
    z = b.node1("relu", [y], name="relu")
    b.output(z)
    return b.build()


def _numbers(graph, x):
    return evaluate_graph(graph, {"x": x})[0]


def test_simplify_inference_replaces_batch_norm_and_dropout():
    g = builtin.infer_types(conv_bn_relu_graph())
    g2 = builtin.simplify_inference(g)
    assert [n.op for n in g2.nodes] == ["conv2d", "multiply", "add", "relu"]
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(_numbers(g2, x), _numbers(g, x), rtol=1e-5, atol=1e-5)
    assert g.nodes[1].op == "batch_norm"  # the input graph is untouched


def test_fold_constants_evaluates_weight_only_subgraphs():
    b = GraphBuilder(fold_constants=False)
    x = b.input("x", (2, 3))
    c = b.node1("exp", [b.param("p", np.ones((2, 3), np.float32))], name="expw")
    y = b.node1("add", [x, c], name="add")
    b.output(y)
    g = builtin.fold_constants(builtin.infer_types(b.build()))
    assert [n.op for n in g.nodes] == ["add"]
    np.testing.assert_allclose(g.params["expw"], np.e * np.ones((2, 3)), rtol=1e-6)


def test_cse_and_dce():
    b = GraphBuilder(fold_constants=False)
    x = b.input("x", (2, 3))
    a1 = b.node1("relu", [x], name="r1")
    a2 = b.node1("relu", [x], name="r2")
    b.node1("exp", [x], name="unused")
    y = b.node1("add", [a1, a2], name="add")
    b.output(y)
    g = builtin.infer_types(b.build())
    g = builtin.eliminate_dead_code(builtin.eliminate_common_subexpressions(g))
    assert [n.name for n in g.nodes] == ["r1", "add"]
    assert g.nodes[1].inputs == ("r1", "r1")


def test_fuse_ops_puts_conv_epilogue_in_one_group():
    ctx = PassContext(opt_level=3)
    g = run_pipeline(conv_bn_relu_graph(), ctx)
    assert len(g.groups) == 1
    assert [n.op for n in g.nodes] == ["conv2d", "bias_add", "relu"]  # batch norm folded into the weights
    ctx0 = PassContext(opt_level=0)
    g0 = run_pipeline(conv_bn_relu_graph(), ctx0)
    assert len(g0.groups) == len(g0.nodes) == 4  # level 0: batch_norm and dropout stay


def test_fusion_keeps_groups_convex():
    # relu's output feeds both the add (same chain) and an exp elsewhere: add must not absorb relu
    b = GraphBuilder(fold_constants=False)
    x = b.input("x", (2, 3))
    r = b.node1("relu", [x], name="r")
    e = b.node1("exp", [r], name="e")
    s = b.node1("sigmoid", [e], name="s")
    y = b.node1("add", [s, r], name="add")
    b.output(y)
    g = builtin.fuse_ops(builtin.infer_types(b.build()))
    groups = [set(gr) for gr in g.groups]
    assert {"r"} in groups or all("r" not in gr or gr == {"r", "e", "s", "add"} for gr in groups)
    consumers = g.consumers()
    for gr in g.groups:
        members = set(gr)
        outside_reads = {o for n in g.nodes if n.name in members for o in n.outputs
                         if any(c.name not in members for c in consumers.get(o, []))}
        assert len(outside_reads) <= 1, (gr, outside_reads)


def test_pass_manager_times_dumps_and_disables(tmp_path):
    ctx = PassContext(opt_level=3, dump_dir=str(tmp_path), disabled=frozenset({"simplify_inference"}))
    g = run_pipeline(conv_bn_relu_graph(), ctx)
    assert "batch_norm" in [n.op for n in g.nodes]
    assert "simplify_inference" not in ctx.timings and "fuse_ops" in ctx.timings
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files[0] == "00_input.txt" and any(f.endswith("fuse_ops.txt") for f in files)
    with pytest.raises(nnvm.Error, match="unknown pass 'no_such_pass'"):
        run_pipeline(conv_bn_relu_graph(), PassContext(disabled=frozenset({"no_such_pass"})))


@pytest.mark.parametrize("exponent, ops", [
    (2.0, ["multiply"]), (3.0, ["multiply", "multiply"]), (4.0, ["multiply", "multiply"]),
    (2.5, ["power"]), (5.0, ["power"]),
])
def test_simplify_inference_writes_small_constant_powers_as_multiplies(exponent, ops):
    """Hugging Face's gelu_new (``x ** 3``): a constant integer exponent becomes multiplies (a float pow
    is a libm call per element); other exponents keep the power, and the numbers are numpy's."""
    b = GraphBuilder(fold_constants=False)
    x = b.input("x", (4, 6))
    y = b.node1("power", [x, b.param("e", np.array(exponent, np.float32))], name="pow")
    b.output(b.node1("tanh", [y], name="tanh"))
    g = builtin.simplify_inference(builtin.infer_types(b.build()))
    assert [n.op for n in g.nodes] == [*ops, "tanh"]
    v = RNG.standard_normal((4, 6)).astype(np.float32)
    v = np.abs(v) if exponent % 1 else v  # negative bases too, where the power is real
    np.testing.assert_allclose(_numbers(builtin.infer_types(g), v), np.tanh(np.power(v, exponent)),
                               rtol=1e-5, atol=1e-6)


def test_simplify_inference_keeps_a_power_whose_exponent_broadcasts_or_varies():
    b = GraphBuilder(fold_constants=False)
    x = b.input("x", (1, 3))
    wide = b.node1("power", [x, b.param("e", np.full((2, 3), 2.0, np.float32))], name="wide")
    mixed = b.node1("power", [x, b.param("m", np.array([2.0, 3.0, 2.0], np.float32))], name="mixed")
    b.output(wide)
    b.output(mixed)
    g = builtin.simplify_inference(builtin.infer_types(b.build()))
    assert [n.op for n in g.nodes] == ["power", "power"]

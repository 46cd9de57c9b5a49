"""The pass pipeline on random graphs: same numbers at every opt level, a valid graph, a sound plan.

Graphs are random DAGs of conv2d (plain, grouped, depthwise), batch_norm, bias_add, per-channel and
value-value broadcasts, elementwise ops, pooling and concatenation on NCHW values, closed by a global
pool and a dense layer. Numbers come from each operator's numpy evaluation (the core tests run with no
backend), compared with the unoptimized graph at opt level 0. The memory plan of the fused graph is
checked directly: values live at the same time never share bytes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.compiler import group_calls
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph
from nnvm.passes import builtin
from nnvm.passes.manager import PassContext, run_pipeline
from nnvm.runtime.plan import check_plan, make_plan

HW = 5


@st.composite
def random_graphs(draw):
    """(graph, seed): a random DAG whose values are [1, C, HW, HW] tensors, then pool and dense."""
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    b = GraphBuilder("random", fold_constants=False)
    cin = draw(st.sampled_from([1, 2, 4]))
    values = [b.input("x", (1, cin, HW, HW))]

    def weight(*shape, scale=1.0, positive=False):
        arr = rng.random(shape) + 0.5 if positive else rng.standard_normal(shape) * scale
        return b.param(None, arr.astype(np.float32))

    def channels(v):
        return b.shape(v)[1]

    def pick():
        # recent values are likelier, which makes chains as well as branches
        k = draw(st.integers(0, len(values) - 1))
        return values[max(k, len(values) - 1 - draw(st.integers(0, 3)))]

    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["conv", "conv", "bn", "scale", "binary", "unary", "pool", "concat"]))
        x = pick()
        c = channels(x)
        if kind == "conv":
            k = draw(st.sampled_from([1, 3]))
            shape_kind = draw(st.sampled_from(["plain", "depthwise", "grouped"]))
            if shape_kind == "depthwise":
                groups, cout = c, c * draw(st.sampled_from([1, 2]))
            elif shape_kind == "grouped" and c % 2 == 0:
                groups, cout = 2, 2 * draw(st.integers(1, 3))
            else:
                groups, cout = 1, draw(st.integers(1, 6))
            w = weight(cout, c // groups, k, k, scale=1 / np.sqrt(c // groups * k * k))
            p = k // 2
            y = b.node1("conv2d", [x, w], {"padding": (p, p, p, p), "groups": groups})
            if draw(st.booleans()):
                y = b.node1("bias_add", [y, weight(cout)], {"axis": 1})
        elif kind == "bn":
            y = b.node1("batch_norm", [x, weight(c), weight(c), weight(c), weight(c, positive=True)],
                        {"epsilon": 1e-3})
        elif kind == "scale":
            shape = draw(st.sampled_from([(c, 1, 1), (1, c, 1, 1), (1,), (c,) if c == HW else (1,)]))
            op = draw(st.sampled_from(["multiply", "add", "subtract"]))
            y = b.node1(op, [x, weight(*shape, positive=op == "multiply")])
        elif kind == "binary":
            same = [v for v in values if b.shape(v) == b.shape(x)]
            op = draw(st.sampled_from(["add", "multiply", "maximum"]))
            y = b.node1(op, [x, draw(st.sampled_from(same))])
        elif kind == "unary":
            y = b.node1(draw(st.sampled_from(["relu", "sigmoid", "tanh", "negative"])), [x])
        elif kind == "pool":
            op = draw(st.sampled_from(["max_pool2d", "avg_pool2d"]))
            y = b.node1(op, [x], {"pool_size": (3, 3), "padding": (1, 1, 1, 1)})
        else:
            y = b.node1("concatenate", [x, pick()], {"axis": 1})
        values.append(y)
    last = values[-1]
    pooled = b.node1("global_avg_pool2d", [last])
    flat = b.node1("reshape", [pooled], {"newshape": (1, channels(last))})
    n = draw(st.integers(1, 4))
    out = b.node1("dense", [flat, weight(n, channels(last))])
    for op in draw(st.lists(st.sampled_from(["bias", "multiply", "add"]), max_size=2)):
        if op == "bias":
            out = b.node1("bias_add", [out, weight(n)], {"axis": 1})
        else:
            out = b.node1(op, [out, weight(n)])
    b.output(out)
    if len(values) > 2 and draw(st.booleans()):
        b.output(draw(st.sampled_from(values[1:-1])))  # a value in the middle is read outside too
    return b.build(), seed


def _check_plan(graph):
    assert sorted(n for g in graph.groups for n in g) == sorted(n.name for n in graph.nodes)
    plan = make_plan(graph, group_calls(graph))
    check_plan(plan)
    assert plan["lower_bound_bytes"] <= plan["arena_bytes"] <= plan["naive_bytes"] or not graph.nodes


@settings(max_examples=250, deadline=None, derandomize=True)
@given(random_graphs())
def test_pipeline_keeps_numbers_at_every_opt_level(case):
    graph, seed = case
    x = np.random.default_rng(seed + 1).standard_normal(graph.types["x"].shape).astype(np.float32)
    reference = None
    for level in range(4):
        out = run_pipeline(graph, PassContext(opt_level=level))
        out.validate()
        assert builtin.infer_types(out).types.keys() >= set(out.outputs)
        assert out.outputs == graph.outputs
        got = evaluate_graph(out, {"x": x})
        if reference is None:
            reference = got
        for k, (want, have) in enumerate(zip(reference, got)):
            assert have.shape == want.shape, f"opt level {level} output {k}: {have.shape} != {want.shape}"
            err = np.abs(have.astype(np.float64) - want).max() / (np.abs(want).max() + 1e-30)
            ops = [n.op for n in out.nodes]
            assert err < 1e-5, f"opt level {level} output {k}: relative error {err:.2e}; nodes {ops}"
        _check_plan(out)

"""In-place memory planning: an elementwise kernel's output takes the storage of an input that dies
there, and the plan still never lets two live tensors overlap.

The plan is checked directly (offsets, half-step lifetimes) and by running it: a numpy executor that
keeps every activation in one byte arena at the planned offsets gives the same numbers as evaluating
the graph value by value (each operator's numpy reference), so a wrong overlap would clobber a value.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.compiler import group_calls
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph
from nnvm.passes.manager import PassContext, run_pipeline
from nnvm.runtime.plan import check_plan, inplace_input, make_plan
from nnvm_testing.plans import run_plan


def fused(builder_fn, level=2):
    graph = builder_fn()
    return run_pipeline(graph, PassContext(opt_level=level))


def conv_chain():
    """conv -> relu -> sigmoid -> conv (+ residual add of the relu output) -> relu -> global pool."""
    rng = np.random.default_rng(0)
    b = GraphBuilder("chain", fold_constants=False)
    x = b.input("x", (1, 4, 6, 6))
    w1 = b.param("w1", rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3)
    w2 = b.param("w2", rng.standard_normal((4, 4, 1, 1)).astype(np.float32))
    a = b.node1("conv2d", [x, w1], {"padding": (1, 1, 1, 1)})
    r = b.node1("relu", [a])
    s = b.node1("sigmoid", [r])
    c = b.node1("conv2d", [s, w2])
    d = b.node1("add", [c, r])
    e = b.node1("relu", [d])
    b.output(b.node1("global_avg_pool2d", [e]))
    return b.build()


def test_unfused_elementwise_chain_works_in_place():
    graph = fused(conv_chain, level=0)  # one kernel per node
    calls = group_calls(graph)
    plan = make_plan(graph, calls)
    where = plan["placements"]
    by_op = {n.op: [] for n in graph.nodes}
    for n in graph.nodes:
        by_op[n.op].append(n)
    relu0, sigmoid, relu1 = by_op["relu"][0], by_op["sigmoid"][0], by_op["relu"][1]
    # Each relu reads a value that dies there: in place.
    assert where[relu0.outputs[0]][0] == where[relu0.inputs[0]][0]
    assert where[relu1.outputs[0]][0] == where[relu1.inputs[0]][0]
    # The relu output is read again by the residual add: sigmoid must not overwrite it.
    assert where[sigmoid.outputs[0]][0] != where[sigmoid.inputs[0]][0]
    # The second conv reads the sigmoid output by a reduction: never in place.
    conv2 = by_op["conv2d"][1]
    assert where[conv2.outputs[0]][0] != where[conv2.inputs[0]][0]
    check_plan(plan)


def test_in_place_lowers_the_peak_of_an_elementwise_kernel():
    b = GraphBuilder("peak", fold_constants=False)
    x = b.input("x", (1, 1, 8, 8))
    a = b.node1("conv2d", [x, b.param("w", np.ones((16, 1, 1, 1), np.float32))])
    b.output(b.node1("global_avg_pool2d", [b.node1("relu", [a])]))
    graph = run_pipeline(b.build(), PassContext(opt_level=0))
    calls = group_calls(graph)
    plan, separate = make_plan(graph, calls), make_plan(graph, calls, inplace=False)
    big = 16 * 8 * 8 * 4
    assert separate["arena_bytes"] >= 2 * big  # conv output and relu output side by side
    assert plan["arena_bytes"] < 2 * big and plan["lower_bound_bytes"] < separate["lower_bound_bytes"]


def test_residual_add_epilogue_takes_the_skip_value_storage():
    graph = fused(conv_chain, level=2)
    calls = group_calls(graph)
    plan = make_plan(graph, calls)
    where = plan["placements"]
    call = next(c for c in calls if any("add" in n for n in c["group"]))
    conv = next(n for n in graph.nodes if n.name == call["group"][0])
    skip = next(v for v in call["args"] if v not in conv.inputs and v not in graph.params)
    out = call["args"][-1]
    assert where[out][0] == where[skip][0], "the group reads the skip value only element by element"
    assert where[out][0] != where[conv.inputs[0]][0], "the conv's data is read by a reduction"
    check_plan(plan)


def test_no_in_place_when_the_input_is_read_later_or_changes_shape():
    rng = np.random.default_rng(1)
    b = GraphBuilder("later", fold_constants=False)
    x = b.input("x", (1, 2, 3, 3))
    w = b.param("w", rng.standard_normal((2, 2, 1, 1)).astype(np.float32))
    a = b.node1("conv2d", [x, w])
    r = b.node1("relu", [a])  # a is read again below: r must not take its storage
    s = b.node1("add", [r, a])
    g = b.node1("global_avg_pool2d", [s])
    t = b.node1("add", [g, b.param("k", np.ones((1, 2, 3, 3), np.float32))])  # [1,2,1,1] -> [1,2,3,3]
    b.output(t)
    graph = run_pipeline(b.build(), PassContext(opt_level=0))
    plan = make_plan(graph, group_calls(graph))
    where = plan["placements"]
    assert where[r][0] != where[a][0]
    assert where[t][0] != where[g][0]
    assert where[s][0] == where[r][0] or where[s][0] == where[a][0]  # s is the last reader of both
    check_plan(plan)


def test_graph_inputs_and_outputs_keep_their_own_storage():
    b = GraphBuilder("io", fold_constants=False)
    x = b.input("x", (1, 2, 4, 4))
    r = b.node1("relu", [x])
    s = b.node1("sigmoid", [r])
    b.output(r)
    b.output(s)
    graph = run_pipeline(b.build(), PassContext(opt_level=0))
    producers = graph.producers()
    # relu's input is the graph input (the caller's data), sigmoid's is a graph output.
    assert [inplace_input(graph, c, producers) for c in group_calls(graph)] == [None, None]
    check_plan(make_plan(graph, group_calls(graph)))


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(["relu", "sigmoid", "conv", "add_prev", "scale", "pool"]), min_size=1,
                max_size=8), st.integers(0, 2))
def test_in_place_plan_runs_to_the_reference_numbers(ops, level):
    rng = np.random.default_rng(len(ops))
    b = GraphBuilder("random", fold_constants=False)
    values = [b.input("x", (1, 4, 5, 5))]
    for op in ops:
        x = values[-1]
        if op == "conv":
            w = b.param(None, rng.standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3)
            y = b.node1("conv2d", [x, w], {"padding": (1, 1, 1, 1)})
        elif op == "add_prev":
            y = b.node1("add", [x, values[max(0, len(values) - 3)]])
        elif op == "scale":
            y = b.node1("multiply", [x, b.param(None, rng.random((4, 1, 1)).astype(np.float32) + 0.5)])
        elif op == "pool":
            y = b.node1("max_pool2d", [x], {"pool_size": (3, 3), "padding": (1, 1, 1, 1)})
        else:
            y = b.node1(op, [x])
        values.append(y)
    b.output(values[-1])
    graph = run_pipeline(b.build(), PassContext(opt_level=level))
    calls = group_calls(graph)
    plan = make_plan(graph, calls)
    check_plan(plan)
    xin = np.random.default_rng(7).standard_normal((1, 4, 5, 5)).astype(np.float32)
    (want,) = evaluate_graph(graph, {"x": xin})
    (got,) = run_plan(graph, calls, plan, {"x": xin})
    err = np.abs(got - want).max() / (np.abs(want).max() + 1e-30)
    assert err < 1e-6, f"ops {ops} at opt level {level}: the arena run differs by {err:.2e}"

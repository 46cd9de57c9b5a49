"""Concatenations planned in place (``nnvm.cpu.concat_in_place``, ``make_plan``'s views): the producers write
into the concatenation's output, no copy kernel runs, and the plan still never lets two live values
overlap.

The decisions are checked for explicit CPU targets (the pass reads no host fact); the plans are run by the
arena executor of ``test_plan_inplace`` (every activation read from and written to one byte arena, the
view calls left out as the runtime leaves them out) against the graph evaluated value by value, and whole
compiles against numpy's evaluation with the pass on and off.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.compiler import group_calls
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph
from nnvm.passes.manager import PassContext, run_pipeline
from nnvm.runtime.plan import check_plan, make_plan
from nnvm.target import parse_target
from nnvm_testing.plans import run_plan

TARGETS = ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512", "llvm -mcpu=znver5")


def dense_block(batch=1, layers=3, growth=16, channels=16, size=6, seed=0):
    """A DenseNet block: layer k reads relu(concat(first k features)) and adds ``growth`` channels; the
    output pools all of them. The first feature is a convolution's (a kernel output, not the input)."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("dense_block", fold_constants=False)
    x = b.input("x", (batch, channels, size, size))

    def conv(v, cin, cout, k):
        w = b.param(None, (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32))
        return b.node1("conv2d", [v, w], {"padding": (k // 2,) * 4})

    features = [conv(x, channels, channels, 1)]
    for _ in range(layers):
        cat = b.node1("concatenate", features, {"axis": 1}) if len(features) > 1 else features[0]
        width = channels + growth * (len(features) - 1)
        features.append(conv(b.node1("relu", [cat]), width, growth, 3))
    b.output(b.node1("global_avg_pool2d", [b.node1("concatenate", features, {"axis": 1})]))
    return b.build(), rng.standard_normal((batch, channels, size, size)).astype(np.float32)


def planned(graph, target, switch="1"):
    opts = nnvm.Options(cpu_switches={"concat_in_place": switch})
    with nnvm.options.activated(opts):
        graph = run_pipeline(graph, PassContext(opt_level=3, target=parse_target(target), options=opts))
    calls = group_calls(graph)
    return graph, calls, make_plan(graph, calls)


def concats(graph):
    return [n for n in graph.nodes if n.op == "concatenate"]


@pytest.mark.parametrize("target", TARGETS)
def test_dense_block_concatenations_are_prefixes_of_one_block_with_no_copy(target):
    graph, x = dense_block()
    graph, calls, plan = planned(graph, target)
    marked = concats(graph)
    assert len(marked) == 3 and all(n.attrs.get("in_place") for n in marked)
    names = {n.name for n in marked}
    assert not any(name in names for c in plan["calls"] for name in c["group"]), "no copy kernel runs"
    assert len(plan["calls"]) == len(calls) - 3
    where = plan["placements"]
    last = marked[-1]
    base = where[last.outputs[0]][0]
    at = base
    for v in last.inputs:  # each feature where the pooled concatenation has it
        assert where[v][0] == at
        at += graph.type_of(v).nbytes
    for n in marked[:-1]:  # every layer's concatenation is the front of the last one
        assert where[n.outputs[0]][0] == base
    check_plan(plan)
    run = [c for c in calls if not c.get("view")]
    got = run_plan(graph, run, plan, {"x": graph_input(graph, x)})
    ref = evaluate_graph(graph, {"x": graph_input(graph, x)})
    np.testing.assert_array_equal(got[0], ref[0])


def graph_input(graph, x):
    return x.reshape(graph.type_of("x").shape)


def test_switch_off_and_a_batch_above_one_keep_the_copies():
    graph, _ = dense_block()
    off, _, plan = planned(graph, "llvm -mcpu=znver5", switch="0")
    assert not any(n.attrs.get("in_place") for n in concats(off)) and "views" not in plan
    batched, _ = dense_block(batch=2)
    graph2, _, plan2 = planned(batched, "llvm -mcpu=znver5")
    assert concats(graph2) and not any(n.attrs.get("in_place") for n in concats(graph2))
    assert "views" not in plan2


def test_a_gpu_target_keeps_the_copies():
    graph, _ = dense_block()
    gpu, _, plan = planned(graph, "opencl")
    assert not any(n.attrs.get("in_place") for n in concats(gpu)) and "views" not in plan


def two_orders():
    """concat(a, b) and concat(b, a): b cannot lie both after a and before it; the second stays a copy.
    And concat(c, c): one value twice, never in place."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("orders", fold_constants=False)
    x = b.input("x", (1, 8, 4, 4))

    def conv(v):
        return b.node1("conv2d", [v, b.param(None, rng.standard_normal((8, 8, 1, 1)).astype(np.float32))])

    a, c = conv(x), conv(x)
    d = conv(c)
    ab = b.node1("concatenate", [a, d], {"axis": 1})
    ba = b.node1("concatenate", [d, a], {"axis": 1})
    cc = b.node1("concatenate", [c, c], {"axis": 1})
    b.output(b.node1("add", [b.node1("add", [ab, ba]), cc]))
    return b.build(), rng.standard_normal((1, 8, 4, 4)).astype(np.float32)


@pytest.mark.parametrize("target", ("llvm -mcpu=haswell", "llvm -mcpu=znver5"))
def test_a_value_is_placed_once_and_never_twice_in_one_concatenation(target):
    graph, x = two_orders()
    graph, calls, plan = planned(graph, target)
    marked = [n.attrs.get("in_place", False) for n in concats(graph)]
    assert marked == [True, False, False]
    check_plan(plan)
    got = run_plan(graph, [c for c in calls if not c.get("view")], plan, {"x": x})
    np.testing.assert_array_equal(got[0], evaluate_graph(graph, {"x": x})[0])


def test_graph_inputs_and_outputs_are_not_placed_inside_a_concatenation():
    b = GraphBuilder("io", fold_constants=False)
    x = b.input("x", (1, 8, 4, 4))
    r = b.node1("relu", [x])
    b.output(r)
    b.output(b.node1("concatenate", [x, r], {"axis": 1}))  # an input and an output: stays a copy
    graph, _, plan = planned(b.build(), "llvm -mcpu=znver5")
    assert not any(n.attrs.get("in_place") for n in concats(graph)) and "views" not in plan


@pytest.mark.parametrize("switch", ("1", "0"))
def test_compiled_dense_block_matches_numpy_with_and_without_the_copies(switch):
    graph, x = dense_block(layers=4, channels=16, growth=16, size=7, seed=3)
    ref = evaluate_graph(graph, {"x": x})[0]
    mod = nnvm.compile(graph, target="llvm", tuning_log=False, kernel_cache=False,
                       options=nnvm.Options(cpu_switches={"concat_in_place": switch}))
    assert ("views" in mod.plan) == (switch == "1")
    np.testing.assert_allclose(mod.run(x)[0], ref, rtol=1e-5, atol=1e-5)


def test_a_concatenation_fusion_puts_in_an_inputs_kernel_stays_a_copy():
    """An input made by an injective or elementwise kernel and read by the concatenation alone: fused, the
    concatenation is that kernel's tail (NASNet's crops); marked, the input would be a kernel of its own."""
    rng = np.random.default_rng(4)
    b = GraphBuilder("tail", fold_constants=False)
    x = b.input("x", (1, 16, 4, 4))
    a = b.node1("conv2d", [x, b.param(None, rng.standard_normal((16, 16, 1, 1)).astype(np.float32))])
    r = b.node1("sigmoid", [b.node1("relu", [x])])  # read by the concatenation alone
    b.output(b.node1("global_avg_pool2d", [b.node1("concatenate", [a, r], {"axis": 1})]))
    graph, calls, plan = planned(b.build(), "llvm -mcpu=znver5")
    (cat,) = concats(graph)
    assert not cat.attrs.get("in_place") and "views" not in plan
    assert any(cat.name in c["group"] and len(c["group"]) > 1 for c in calls)

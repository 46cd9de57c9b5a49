"""Average pools a row at a time (``schedule_pool.py``): against onnxruntime at batch 1 and 3, with and
without the padding counted, and which groups the schedule takes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnvm
from nnvm.compiler import group_compute, optimized_graph
from nnvm.cpu.schedule_pool import schedule_pool_rows


def _pool_model(path, n, c, hw, kernel, stride, pad, count_pad):
    """AveragePool then Relu (an elementwise follower in the pool's group)."""
    nodes = [helper.make_node("AveragePool", ["x"], ["p"], kernel_shape=[kernel] * 2, strides=[stride] * 2,
                              pads=[pad] * 4, count_include_pad=count_pad),
             helper.make_node("Relu", ["p"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "pool", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.mark.parametrize(("n", "c", "hw", "kernel", "stride", "pad", "count_pad"),
                         [(1, 24, 56, 3, 2, 1, 1), (3, 24, 28, 3, 2, 1, 1), (3, 136, 14, 3, 2, 1, 0),
                          (1, 5, 9, 2, 2, 0, 0), (2, 7, 11, 3, 1, 1, 0)])
def test_average_pool_matches_onnxruntime(tmp_path, n, c, hw, kernel, stride, pad, count_pad):
    path = str(tmp_path / "pool.onnx")
    _pool_model(path, n, c, hw, kernel, stride, pad, count_pad)
    x = np.random.default_rng(c + hw).standard_normal((n, c, hw, hw)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    graph, tgt, *_ = optimized_graph(path, "llvm")
    by_name = {nd.name: nd for nd in graph.nodes}
    (names,) = [g for g in graph.groups if any(by_name[m].op == "avg_pool2d" for m in g)]
    group = group_compute(graph, graph.groups.index(names), [by_name[m] for m in names])
    assert schedule_pool_rows(tgt, group) is not None, names
    got = nnvm.compile(path, target="llvm").run(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_other_groups_are_not_taken(tmp_path):
    path = str(tmp_path / "pool.onnx")
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 9, 9])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "pool", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    by_name = {nd.name: nd for nd in graph.nodes}
    for k, names in enumerate(graph.groups):
        assert schedule_pool_rows(tgt, group_compute(graph, k, [by_name[m] for m in names])) is None

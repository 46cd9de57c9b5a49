"""dense over a packed constant weight (``dense_packed``, ``cpu.dense.packed``): the layout choice, every
config of the template, and whole models against onnxruntime (batch 1 to 8, outputs in blocks of 16,
8 or 4, epilogues, weights from MatMul's [K, N]); a weight that is not constant is not packed."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.schedule_dense import dense_packed_template


def _save(path, nodes, inits, in_shape, inputs=("x",)):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(in_shape)) for n in inputs]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    graph = helper.make_graph(nodes, "dense", ins, [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _gemm(path, m, k, n, relu=False, matmul=False):
    rng = np.random.default_rng(0)
    if matmul:  # x @ W with W [K, N] (matmul): packed from KN
        inits = {"w": rng.standard_normal((k, n)).astype(np.float32)}
        nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["g"])]
    else:
        inits = {"w": rng.standard_normal((n, k)).astype(np.float32)}
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["g"], transB=1)]
    nodes.append(helper.make_node("Relu" if relu else "Identity", ["g"], ["y"]))
    inits["b"] = rng.standard_normal(n).astype(np.float32)
    _save(path, nodes, inits, (m, k))


def _check(path, shape, inputs=("x",)):
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in inputs}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    got = mod.run(*feeds.values())[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{path}: max relative error {err:.2e} against onnxruntime"
    return {n.op for n in mod.graph.nodes}


@pytest.mark.parametrize("m, k, n, relu, matmul", [
    (1, 300, 64, False, False),    # blocks of 16
    (2, 96, 1000, True, False),    # 1000 outputs: blocks of 8, 125 of them (5 per tile)
    (3, 40, 12, False, True),      # blocks of 4, odd batch, MatMul's [K, N] weight
    (8, 64, 48, True, True),       # batch 8: 4 rows per tile share each weight vector
    (1, 33, 7, False, False),      # 7 outputs: no block divides, the rfactor schedule
    (20, 16, 32, False, False),    # batch above MAX_PACKED_BATCH: the rfactor schedule
])
def test_dense_matches_onnxruntime(tmp_path, m, k, n, relu, matmul):
    path = str(tmp_path / "dense.onnx")
    _gemm(path, m, k, n, relu, matmul)
    ops = _check(path, (m, k))
    packed = n % 4 == 0 and m <= 16
    assert ("dense_packed" in ops) == packed and bool({"dense", "matmul"} & ops) != packed, ops


def test_weight_that_is_not_constant_is_not_packed(tmp_path):
    """x @ y^T for two inputs: packing y would cost a transform per run, so the product stays."""
    path = str(tmp_path / "act.onnx")
    nodes = [helper.make_node("Transpose", ["b"], ["bt"], perm=[1, 0]),
             helper.make_node("MatMul", ["a", "bt"], ["y"])]
    _save(path, nodes, {}, (16, 16), inputs=("a", "b"))
    ops = _check(path, (16, 16), inputs=("a", "b"))
    assert "dense_packed" not in ops and "layout_transform" not in ops, ops


def test_every_config_of_the_packed_space(tmp_path, group_of, every_config):
    path = str(tmp_path / "dense.onnx")
    _gemm(path, 4, 24, 48, relu=True)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "dense_packed")
    template = dense_packed_template(tgt, group)
    assert template is not None and template.size() > 4
    x = np.random.default_rng(2).standard_normal((4, 24)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    every_config(template, group, graph.params, x, want, "dense_packed")

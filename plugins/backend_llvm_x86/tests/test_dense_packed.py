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
    (20, 16, 32, False, False),    # 20 rows: packed too, tiles of rows
])
def test_dense_matches_onnxruntime(tmp_path, m, k, n, relu, matmul):
    path = str(tmp_path / "dense.onnx")
    _gemm(path, m, k, n, relu, matmul)
    ops = _check(path, (m, k))
    packed = n % 4 == 0
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


def _conv1d_gelu_new(path, rows, k, n):
    """Hugging Face's ``Conv1D`` (``addmm``: a Gemm by a [K, N] weight, ``transB=0``) and GPT-2's
    ``gelu_new`` (``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x ** 3)))``), as torch exports them."""
    rng = np.random.default_rng(0)
    inits = {"w": (0.1 * rng.standard_normal((k, n))).astype(np.float32),
             "b": rng.standard_normal(n).astype(np.float32),
             "three": np.array(3.0, np.float32), "c": np.array(0.044715, np.float32),
             "s": np.array(0.7978845608, np.float32), "half": np.array(0.5, np.float32),
             "one": np.array(1.0, np.float32)}
    steps = [("Gemm", ["x", "w", "b"], "g"), ("Pow", ["g", "three"], "g3"), ("Mul", ["g3", "c"], "cg3"),
             ("Add", ["g", "cg3"], "inner"), ("Mul", ["inner", "s"], "si"), ("Tanh", ["si"], "t"),
             ("Add", ["t", "one"], "t1"), ("Mul", ["g", "half"], "hg"), ("Mul", ["hg", "t1"], "y")]
    nodes = [helper.make_node(op, ins, [out]) for op, ins, out in steps]
    _save(path, nodes, inits, (rows, k))


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=znver5"], ids=["avx2", "avx512"])
def test_conv1d_gemm_over_many_rows_is_packed(tmp_path, target):
    """GPT-2's Gemms by [K, N] weights over its 128 token rows run as ``dense_packed`` at either vector
    width (they ran on the rfactor schedule above 16 rows: 3x slower than onnxruntime), and its
    ``gelu_new`` has no ``power`` left (a libm call per element)."""
    path = str(tmp_path / "conv1d.onnx")
    _conv1d_gelu_new(path, 128, 64, 192)
    graph = optimized_graph(path, target)[0]
    ops = {n.op for n in graph.nodes}
    assert "dense_packed" in ops and not {"dense", "matmul", "power"} & ops, ops


def test_conv1d_gemm_with_gelu_new_matches_onnxruntime(tmp_path):
    path = str(tmp_path / "conv1d.onnx")
    _conv1d_gelu_new(path, 37, 40, 96)  # rows that fill no tile
    ops = _check(path, (37, 40))
    assert "dense_packed" in ops and "power" not in ops, ops

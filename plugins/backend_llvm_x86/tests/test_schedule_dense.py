"""The dense template (``cpu.dense.rfactor``): every config computes what onnxruntime computes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, import_model, schedule_template
from nnvm.target import parse_target

# (batch m, in k, out n, bias, relu epilogue)
CASES = [
    (1, 1280, 1000, True, False),  # MobileNetV2's classifier
    (4, 512, 10, True, True),      # batch > 1, relu epilogue
    (3, 100, 7, False, False),     # k not a multiple of the vector: narrower partial sums; dense alone
    (2, 33, 5, True, False),       # odd k: partial sums of 3, 11 or 33 lanes
    (2, 67, 9, True, True),        # prime k above the widest partial sum: scalar sums
]


def _gemm(path, m, k, n, bias, relu):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((n, k)).astype(np.float32), "w")]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b"))
    nodes = [helper.make_node("Gemm", ["x", "w", "b"] if bias else ["x", "w"], ["g" if relu else "y"],
                              transB=1)]
    if relu:
        nodes.append(helper.make_node("Relu", ["g"], ["y"]))
    graph = helper.make_graph(nodes, "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _reference(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "m{}_k{}_n{}_bias{}_relu{}".format(*c))
def test_dense_group_matches_onnxruntime(case, tmp_path):
    path = str(tmp_path / "dense.onnx")
    _gemm(path, *case)
    m, k = case[:2]
    x = np.random.default_rng(1).standard_normal((m, k)).astype(np.float32)
    want = _reference(path, x)
    got = nnvm.compile(path, target="llvm").run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"dense {case}: max relative error {err:.2e}"


def test_every_config_of_the_space(tmp_path, every_config):
    """All knob combinations on one awkward shape (batch 3, an output count 16 does not divide)."""
    path = str(tmp_path / "dense.onnx")
    _gemm(path, 3, 96, 12, True, True)
    graph = import_model(path)
    group = group_compute(graph, 0, list(graph.nodes))
    template = schedule_template(parse_target("llvm"), group)
    assert template is not None and template.name == "cpu.dense.rfactor"
    assert template.size() > 4, f"a space of {template.size()} configs leaves the tuner nothing to search"
    x = np.random.default_rng(2).standard_normal((3, 96)).astype(np.float32)
    every_config(template, group, graph.params, x, _reference(path, x), "dense")


@pytest.mark.parametrize("k, want", [(1280, [16, 32, 64]), (100, [10, 20, 25, 50]), (67, [1])])
def test_partial_sum_widths(k, want, tmp_path):
    """Vector partial sums divide k exactly (no guard, no read past a row): multiples of the vector
    width when one divides k, else other divisors, else scalar sums (kb = 1)."""
    path = str(tmp_path / "dense.onnx")
    _gemm(path, 1, k, 8, True, False)
    graph = import_model(path)
    template = schedule_template(parse_target("llvm -mcpu=skylake-avx512"),
                                 group_compute(graph, 0, list(graph.nodes)))
    assert template.space["kb"] == want, f"k={k}: partial sum widths {template.space['kb']}, want {want}"

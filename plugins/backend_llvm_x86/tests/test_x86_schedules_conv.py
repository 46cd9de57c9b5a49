"""The register-blocked conv2d schedule: same numbers as onnxruntime for the shapes real models use."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, import_model, schedule_template
from nnvm.cpu.schedule_conv2d import schedule_conv2d
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.target import parse_target

# (in channels, out channels, height = width, kernel, stride, padding, groups, relu epilogue)
CASES = [
    (3, 8, 16, 3, 2, 1, 1, True),
    (16, 32, 28, 3, 1, 1, 1, True),   # 3x3 stride 1
    (16, 24, 28, 1, 2, 0, 1, True),   # 1x1 stride 2 (a ResNet downsample)
    (3, 16, 32, 7, 2, 3, 1, True),    # 7x7 stride 2 (a ResNet stem)
    (32, 64, 7, 3, 1, 1, 1, False),   # the conv itself is the group's output
    (8, 12, 17, 3, 1, 1, 1, True),    # a width the vector does not divide: declined, generic
    (16, 16, 14, 3, 1, 1, 16, True),  # depthwise: the depthwise template
    (8, 12, 9, 3, 2, 1, 2, True),     # grouped (2 groups): declined, generic
]


def _model(path, c, o, hw, k, s, p, g, relu):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((o, c // g, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=[p] * 4, strides=[s, s],
                              group=g)]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "conv", [x], [y], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "c{}_o{}_hw{}_k{}_s{}_p{}_g{}_{}".format(*c))
def test_conv_group_matches_onnxruntime(case, tmp_path):
    path = str(tmp_path / "conv.onnx")
    _model(path, *case)
    x = np.random.default_rng(1).standard_normal((1, case[0], case[2], case[2])).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # NCHW kept (no blocked layout), so the group reaches this file's template
    got = nnvm.compile(path, target="llvm", disabled_passes=("alter_op_layout",)).run(x)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"conv {case}: max relative error {err:.2e}"


def _conv_group(path):
    graph = import_model(path)
    relu = [n for n in graph.nodes]
    return group_compute(graph, 0, relu)


def test_schedule_takes_plain_conv_and_declines_depthwise(tmp_path):
    target = parse_target("llvm")
    plain, depthwise = str(tmp_path / "plain.onnx"), str(tmp_path / "dw.onnx")
    _model(plain, 16, 32, 28, 3, 1, 1, 1, True)
    _model(depthwise, 16, 16, 14, 3, 1, 1, 16, True)
    assert schedule_conv2d(_conv_group(plain), target) is not None
    assert schedule_conv2d(_conv_group(depthwise), target) is None


def test_vector_lanes_follow_target_features():
    assert vector_lanes(parse_target("llvm -mcpu=x86-64 -mattr=+avx2")) == 8
    assert vector_lanes(parse_target("llvm -mcpu=skylake-avx512")) == 16


def test_every_config_of_the_conv_template(tmp_path, every_config):
    """Every candidate of every knob of ``cpu.conv2d_nchw.direct`` (one knob changed from the fallback at
    a time: the full product takes minutes to compile) on a stride-2, padded conv with batch 2."""
    path = str(tmp_path / "conv.onnx")
    _model(path, 4, 12, 16, 3, 2, 1, 1, True)
    graph = import_model(path, shapes={"x": (2, 4, 16, 16)})
    group = group_compute(graph, 0, list(graph.nodes))
    template = schedule_template(parse_target("llvm"), group)
    assert template is not None and template.name == "cpu.conv2d_nchw.direct"
    assert template.size() > 8, f"a space of {template.size()} configs leaves the tuner nothing to search"
    x = np.random.default_rng(2).standard_normal((2, 4, 16, 16)).astype(np.float32)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # a batch-1 model
    want = np.concatenate([session.run(None, {"x": x[n:n + 1]})[0] for n in range(2)])
    every_config(template, group, graph.params, x, want, "conv", configs=template.one_knob_variants())

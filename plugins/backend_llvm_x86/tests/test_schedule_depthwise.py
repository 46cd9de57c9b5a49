"""The depthwise conv2d template: every config computes what onnxruntime computes, awkward shapes too."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, import_model, schedule_template
from nnvm.target import parse_target

# (batch, in channels, out channels, height = width, kernel, stride, padding, relu epilogue[, dilation])
CASES = [
    (1, 32, 32, 28, 3, 1, 1, True),   # MobileNetV2, stride 1
    (1, 24, 24, 15, 3, 2, 1, True),   # stride 2 on an odd size
    (2, 8, 8, 9, 5, 1, 2, False),     # batch 2, 5x5, the conv is the group's output
    (1, 4, 8, 10, 3, 1, 0, True),     # channel multiplier 2, no padding
    (1, 16, 16, 7, 3, 1, 1, True),    # a 7x7 plane: one tile
    (1, 8, 8, 12, 3, 1, 2, True, 2),  # dilation 2
]


def _conv(path, n, c, o, hw, k, s, p, relu, dilation=1):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((o, 1, k, k)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c" if relu else "y"], pads=[p] * 4, strides=[s, s],
                              group=c, dilations=[dilation, dilation])]
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])
    graph = helper.make_graph(nodes, "dw", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _reference(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _group(path):
    graph = import_model(path)
    return graph, group_compute(graph, 0, list(graph.nodes))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}_c{}_o{}_hw{}_k{}_s{}_p{}_relu{}".format(*c) + (
    f"_d{c[8]}" if len(c) > 8 else ""))
def test_depthwise_group_matches_onnxruntime(case, tmp_path):
    path = str(tmp_path / "dw.onnx")
    _conv(path, *case)
    _, group = _group(path)
    template = schedule_template(parse_target("llvm"), group)
    assert template is not None and template.name == "cpu.depthwise_conv2d_nchw.direct"
    n, c, _, hw = case[:4]
    x = np.random.default_rng(1).standard_normal((n, c, hw, hw)).astype(np.float32)
    want = _reference(path, x)
    # NCHW kept (no blocked layout), so the group reaches this file's template
    got = nnvm.compile(path, target="llvm", disabled_passes=("alter_op_layout",)).run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"depthwise {case}: max relative error {err:.2e}"


def test_every_config_of_the_space(tmp_path, every_config):
    """All knob combinations on one awkward shape: stride 2, an odd plane, batch 2."""
    path = str(tmp_path / "dw.onnx")
    _conv(path, 2, 6, 6, 13, 3, 2, 1, True)
    graph, group = _group(path)
    template = schedule_template(parse_target("llvm"), group)
    assert template.size() > 2, f"a space of {template.size()} configs leaves the tuner nothing to search"
    x = np.random.default_rng(2).standard_normal((2, 6, 13, 13)).astype(np.float32)
    every_config(template, group, graph.params, x, _reference(path, x), "depthwise")


@pytest.mark.parametrize("mattr", ["+avx512f", "-avx512f", "-avx2,-avx"])
@pytest.mark.parametrize("width,stride", [(14, 2), (28, 2), (13, 1), (7, 1), (56, 2)])
def test_the_fallback_is_in_the_space_at_every_vector_width(tmp_path, mattr, width, stride):
    """With AVX2's 8 lanes a 14-wide stride-2 plane's fallback width (2) was under the space's smallest
    (4): compiling MobileNetV2 and ShuffleNet in NCHW failed on an AVX2 host."""
    path = str(tmp_path / "dw.onnx")
    _conv(path, 1, 8, 8, width * stride, 3, stride, 1, False)
    _, group = _group(path)
    template = schedule_template(parse_target(f"llvm -mcpu=x86-64-v3 -mattr={mattr}"), group)
    for knob, value in template.fallback.items():
        assert value in template.space[knob], (knob, value, template.space[knob])

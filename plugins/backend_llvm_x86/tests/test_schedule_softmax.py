"""The row-statistics templates (``cpu.softmax.rows``, ``cpu.layer_norm.rows``): attention's scores and
a transformer's LayerNorm along the last axis, rows that a vector divides and rows that it does not
(ViT's 197 tokens, 7, 33), a causal mask of -inf, log_softmax, and every config of the space, against
onnxruntime; a softmax along another axis, or a LayerNorm over two axes, is not their business."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, import_model, schedule_template
from nnvm.target import parse_target


def _softmax(path, shape, op="Softmax", axis=-1):
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], axis=axis)], "sm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _input(shape, causal=False):
    x = (3 * np.random.default_rng(1).standard_normal(shape)).astype(np.float32)
    if causal:  # GPT-2's mask: the future of every row is -inf (never a whole row)
        rows, cols = shape[-2:]
        x[..., np.triu(np.ones((rows, cols), bool), 1)] = -np.inf
    return x


def _reference(path, x):
    return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _template(path, target="llvm"):
    graph = import_model(path)
    group = group_compute(graph, 0, list(graph.nodes))
    return graph, group, schedule_template(parse_target(target), group)


@pytest.mark.parametrize("shape, op, causal", [
    ((1, 3, 197, 197), "Softmax", False),   # ViT-tiny's scores: 12 vectors and a guarded one a row
    ((1, 4, 128, 128), "Softmax", True),    # GPT-2's causal scores, whole vectors
    ((2, 7, 7), "Softmax", False),          # a row shorter than a vector
    ((5, 33), "LogSoftmax", False),         # 2-D, 33 = 2 vectors + 1
    ((3,), "Softmax", False),               # 1-D, under 4: scalar statistics
])
def test_softmax_matches_onnxruntime(tmp_path, shape, op, causal):
    path = str(tmp_path / "sm.onnx")
    _softmax(path, shape, op)
    assert _template(path)[2].name == "cpu.softmax.rows"
    x = _input(shape, causal)
    want = _reference(path, x)
    got = nnvm.compile(path, target="llvm").run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{op} {shape}: max relative error {err:.2e} against onnxruntime"


def test_every_config_of_the_space(tmp_path, every_config):
    """All partial-result widths on a row no vector divides (37: guarded last vectors, and scalar)."""
    path = str(tmp_path / "sm.onnx")
    _softmax(path, (2, 5, 37))
    graph, group, template = _template(path, "llvm -mcpu=skylake-avx512")
    assert template.space["kb"] == [1, 4, 8, 16], template.space
    x = _input((2, 5, 37))
    every_config(template, group, graph.params, x, _reference(path, x), "softmax")


def test_other_axis_is_declined(tmp_path):
    """Softmax along a middle axis reads strided rows: the generic schedule serves it, still exact."""
    path = str(tmp_path / "sm.onnx")
    _softmax(path, (2, 9, 5), axis=1)
    assert _template(path)[2] is None
    x = _input((2, 9, 5))
    got = nnvm.compile(path, target="llvm").run(x)[0]
    assert np.abs(got - _reference(path, x)).max() < 1e-6


def _layer_norm(path, shape, axis=-1):
    rng = np.random.default_rng(0)
    norm = shape[axis:] if axis != -1 else shape[-1:]
    inits = [numpy_helper.from_array(rng.standard_normal(norm).astype(np.float32), n) for n in ("g", "b")]
    graph = helper.make_graph([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=axis,
                                                epsilon=1e-5)], "ln",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)


@pytest.mark.parametrize("shape, axis, name", [
    ((1, 197, 192), -1, "cpu.layer_norm.rows"),  # ViT-tiny: 12 whole vectors a row
    ((2, 5, 37), -1, "cpu.layer_norm.rows"),     # a guarded last vector
    ((3, 6), -1, "cpu.layer_norm.rows"),         # rows shorter than a vector
    ((2, 4, 24), 1, None),                       # over the last two axes: the generic schedule
])
def test_layer_norm_matches_onnxruntime(tmp_path, shape, axis, name):
    path = str(tmp_path / "ln.onnx")
    _layer_norm(path, shape, axis)
    template = _template(path)[2]
    assert (template and template.name) == name
    x = _input(shape) + 5  # an offset mean: the variance is of deviations, not of raw squares
    want = _reference(path, x)
    got = nnvm.compile(path, target="llvm").run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"LayerNorm {shape}: max relative error {err:.2e} against onnxruntime"

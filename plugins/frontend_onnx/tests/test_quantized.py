"""Quantized models against onnxruntime's int8 execution of the same file.

The models are onnxruntime's own quantizer's output (``nnvm_testing.frontend_onnx.quantized``): QDQ and
QOperator ResNet-18, and a small network that has every pattern ``qdq.py`` rewrites (Conv with ReLU,
residual Add, MaxPool, GlobalAveragePool, MatMul, Gemm). Each test also checks that the integer path
was taken (``qconv2d`` in the graph, no float ``conv2d``), so a silent fall back to float fails.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm_frontend_onnx.importer import load_onnx
from nnvm_testing.frontend_onnx.quantized import calibration_inputs, quantize_file, quantized_model_path

NNVM_PLUGINS = "onnx,llvm-x86"


def _onnxruntime(path: str, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


def _ops(path: str) -> Counter:
    return Counter(n.op for n in load_onnx(path).nodes)


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_quantized_resnet18_matches_onnxruntime(fmt):
    path = quantized_model_path("resnet18", fmt)
    ops = _ops(path)
    assert ops["qconv2d"] == 20 and ops["qdense"] == 1 and not ops["conv2d"], f"{fmt}: {dict(ops)}"
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    for seed in (1, 2):
        feeds = calibration_inputs(path, count=1, seed=seed)[0]
        (want,) = _onnxruntime(path, feeds)
        (got,) = mod.run(**feeds)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err <= 1e-2, f"{fmt} ResNet-18, seed {seed}: max relative error {err:.2e}"
        assert got.argmax() == want.argmax(), f"{fmt} ResNet-18, seed {seed}: top-1 differs"


def _small_float_model(path: str) -> None:
    """conv-relu, maxpool, conv, residual add, relu, global pool, a MatMul and a Gemm: 2x8x12x12 input."""
    rng = np.random.default_rng(0)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], group=2),
        helper.make_node("Add", ["c2", "p1"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "m"], ["mm"]),
        helper.make_node("Gemm", ["mm", "fc", "fcb"], ["y"], transB=1),
    ]
    inits = [w("w1", 16, 8, 3, 3), w("b1", 16), w("w2", 16, 8, 3, 3), w("b2", 16), w("m", 16, 24),
             w("fc", 10, 24), w("fcb", 10)]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [2, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.fixture(scope="module")
def small_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("quantized")
    src = str(root / "small.onnx")
    _small_float_model(src)
    out = {}
    for fmt in ("qdq", "qop"):
        out[fmt] = str(root / f"small-{fmt}.onnx")
        quantize_file(src, out[fmt], fmt, calibration_inputs(src))
    return out


@pytest.mark.parametrize("fmt", ["qdq", "qop"])
def test_every_rewritten_pattern_matches_onnxruntime(small_models, fmt):
    path = small_models[fmt]
    ops = _ops(path)
    assert ops["qconv2d"] == 2 and ops["qdense"] == 2 and not ops["conv2d"] and not ops["matmul"], dict(ops)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    feeds = calibration_inputs(path, count=1, seed=5)[0]
    (want,) = _onnxruntime(path, feeds)
    (got,) = mod.run(**feeds)
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err <= 1e-2, f"{fmt}: max relative error {err:.2e}"


def _qdq_conv(path: str, relu_zero_point: int, float_bias: bool) -> None:
    """DQ(x) -> Conv(DQ(w), bias) -> Relu -> Q -> DQ by hand: a Relu whose Q's zero point is not the
    type's minimum, or a float bias, is not a pattern ``qdq.py`` rewrites; it must stay correct."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (4, 3, 3, 3)).astype(np.int8)
    inits = [
        numpy_helper.from_array(np.array(0.05, np.float32), "xs"),
        numpy_helper.from_array(np.array(128, np.uint8), "xz"),
        numpy_helper.from_array(w, "wq"), numpy_helper.from_array(np.full(4, 0.01, np.float32), "ws"),
        numpy_helper.from_array(np.zeros(4, np.int8), "wz"),
        numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
        numpy_helper.from_array(np.array(relu_zero_point, np.uint8), "yz"),
    ]
    if float_bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"))
    else:
        inits += [numpy_helper.from_array(rng.integers(-500, 500, 4).astype(np.int32), "bq"),
                  numpy_helper.from_array(np.full(4, 0.05 * 0.01, np.float32), "bs")]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
        helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wd"], axis=0),
    ]
    if not float_bias:
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs"], ["b"], axis=0))
    nodes += [
        helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("QuantizeLinear", ["r", "ys", "yz"], ["rq"]),
        helper.make_node("DequantizeLinear", ["rq", "ys", "yz"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                [1, 3, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.mark.parametrize("relu_zero_point, float_bias, integer", [(0, False, True), (10, False, False),
                                                                  (0, True, False)])
def test_qdq_conv_rewritten_only_when_exact(tmp_path, relu_zero_point, float_bias, integer):
    path = str(tmp_path / "conv.onnx")
    _qdq_conv(path, relu_zero_point, float_bias)
    ops = _ops(path)
    assert bool(ops["qconv2d"]) == integer and bool(ops["conv2d"]) != integer, dict(ops)
    feeds = {"x": np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32) * 3}
    (want,) = _onnxruntime(path, feeds)
    (got,) = nnvm.compile(path, target="llvm").run(**feeds)
    steps = np.abs(got - want) / 0.2
    assert steps.max() <= 1 + 1e-6, f"off by {steps.max():.2f} quantization steps"
    assert (steps > 1e-6).mean() < 0.05, f"{(steps > 1e-6).mean():.0%} of the outputs are a step off"

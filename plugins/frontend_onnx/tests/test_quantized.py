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
from nnvm_testing.frontend_onnx.quantized import (
    calibration_inputs,
    dynamic_quantized_model_path,
    quantize_file,
    quantized_model_path,
    text_inputs,
)
from nnvm_testing.venvs import pytest_venv

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


# -- dynamic quantization (quantize_dynamic on a transformer) -------------------------------------------


def _with_outputs(path: str, names: list, out: str) -> None:
    """``path`` with ``names`` added to its graph outputs (intermediate values to compare)."""
    model = onnx.load(path)
    del model.graph.output[1:]
    for name in names:
        model.graph.output.append(helper.make_empty_tensor_value_info(name))
    onnx.save(model, out)


def test_dynamically_quantized_bert_matches_onnxruntime(tmp_path):
    """Hugging Face BERT (2 layers, 64 wide, 16 tokens) quantized by ``quantize_dynamic``: every
    ``MatMulInteger`` is a ``qdense`` reading its ``DynamicQuantizeLinear``'s zero point at run time (no
    float fallback), and the output is within 1e-2 of onnxruntime's (relative to its largest). In integer
    space it is exact: the model's first DynamicQuantizeLinear -> MatMulInteger, fed onnxruntime's own
    activation (the LayerNorm before it may differ from ours in an ulp, which may move the range), gives
    onnxruntime's bytes, scale, zero point and int32 product."""
    src = pytest_venv(dynamic_quantized_model_path, "bert", 1, 16, layers=2, width=64, heads=2)
    model = onnx.load(src)
    kinds = Counter(n.op_type for n in model.graph.node)
    assert kinds["MatMulInteger"] == 12 and kinds["DynamicQuantizeLinear"] == 8, dict(kinds)
    graph = load_onnx(src)
    dense = [n for n in graph.nodes if n.op == "qdense"]
    assert len(dense) == 12 and all(len(n.inputs) == 3 for n in dense), [n.inputs for n in dense]
    assert not any(n.op == "matmul" and n.inputs[1] in graph.params for n in graph.nodes), \
        "a MatMulInteger ran in float"
    mod = nnvm.compile(src, target="llvm")
    first_dq = next(n for n in model.graph.node if n.op_type == "DynamicQuantizeLinear")
    first_mm = next(n for n in model.graph.node if n.op_type == "MatMulInteger" and
                    n.input[0] == first_dq.output[0])
    probe, part = str(tmp_path / "probe.onnx"), str(tmp_path / "part.onnx")
    _with_outputs(src, [first_dq.input[0]], probe)
    onnx.utils.extract_model(src, part, [first_dq.input[0]], [*first_dq.output, first_mm.output[0]])
    part_mod = nnvm.compile(part, target="llvm")
    for seed in (0, 1):
        feeds = text_inputs(src, seed=seed)
        want, activation = _onnxruntime(probe, feeds)
        (got,) = mod.run(**feeds)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err <= 1e-2, f"seed {seed}: max relative error {err:.2e}"
        part_feeds = {first_dq.input[0]: activation}
        names = ["y", "y_scale", "y_zero_point", "MatMulInteger"]
        for name, w, g in zip(names, _onnxruntime(part, part_feeds), part_mod.run(**part_feeds)):
            assert g.dtype == w.dtype and np.array_equal(g, w), (
                f"seed {seed}: {name} differs from onnxruntime's in {int((g != w).sum())} places")


def test_dynamically_quantized_bert_with_symbolic_batch_and_tokens():
    """The same small BERT exported with symbolic ``batch`` and ``seq`` (torch's tracer) and quantized by
    ``quantize_dynamic``, compiled once: every MatMulInteger is still an exact int32 ``qdense`` over the
    [batch, seq, K] activation (not a float matmul, whose float32 sums stop being exact past 2^24), and
    the outputs match onnxruntime's at several shapes."""
    src = pytest_venv(dynamic_quantized_model_path, "bert", 1, 16, layers=2, width=64, heads=2, dynamic=True,
                      exporter="torchscript")
    mod = nnvm.compile(src, target="llvm")  # the model's dim_params are kept
    ops = Counter(n.op for n in mod.graph.nodes)
    assert ops["qdense"] + ops["qdense_packed"] == 12, dict(ops)
    assert ops["dense_packed"] + ops["matmul"] == 4, f"attention's 4 products only: {dict(ops)}"
    rng = np.random.default_rng(3)
    for batch, seq in ((1, 16), (1, 5), (3, 9)):
        feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                 "attention_mask": np.ones((batch, seq), np.int64)}
        (want,) = _onnxruntime(src, feeds)
        (got,) = mod.run(**feeds)
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err <= 1e-2, f"batch {batch}, {seq} tokens: max relative error {err:.2e}"


def _dynamic_quantize_linear(path: str, shape: tuple) -> None:
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zp"])
    graph = helper.make_graph([node], "dql", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, shape),
                               helper.make_tensor_value_info("scale", TensorProto.FLOAT, []),
                               helper.make_tensor_value_info("zp", TensorProto.UINT8, [])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def test_dynamic_quantize_linear_matches_onnxruntime(tmp_path):
    """DynamicQuantizeLinear exactly as onnxruntime computes it: ranges on both sides of 0, all positive
    (the zero point 0), all negative (255), an all-zero tensor (onnxruntime's scale 1, where ONNX's own
    function body divides by 0), and values on exact halves of a step (rounded to even)."""
    path = str(tmp_path / "dql.onnx")
    _dynamic_quantize_linear(path, (3, 40))
    mod = nnvm.compile(path, target="llvm")
    rng = np.random.default_rng(6)
    halves = np.arange(-60, 60).reshape(3, 40).astype(np.float32) * np.float32(0.5)
    halves[0, 0], halves[2, -1] = -127.5 * 0.5, 127.5 * 0.5  # a range of 127.5 makes the step 0.5
    cases = {"mixed": rng.standard_normal((3, 40)) * 4, "positive": rng.uniform(0.5, 3, (3, 40)),
             "negative": -rng.uniform(0.5, 3, (3, 40)), "zeros": np.zeros((3, 40)), "halves": halves}
    for what, x in cases.items():
        feeds = {"x": x.astype(np.float32)}
        for name, w, g in zip(["y", "scale", "zero point"], _onnxruntime(path, feeds), mod.run(**feeds)):
            assert g.dtype == w.dtype and np.array_equal(g, w), f"{what}: {name} {g} against {w}"

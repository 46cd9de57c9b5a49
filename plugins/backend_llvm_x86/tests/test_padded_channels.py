"""Convolution outputs whose channel count is not a whole number of vectors (SqueezeNet's 1000 classes,
ShuffleNet's 60) run in full-width blocks with a partial last block: zero weights in the padding, the
padding cropped where the tensor leaves the blocked layout. Every case against onnxruntime, with
followers that put non-zeros into the padding (bias, sigmoid, a residual add) before the crop."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cpu.layout import output_block


def _save(path, nodes, inits, in_shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    graph = helper.make_graph(nodes, "padded", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _conv(rng, inits, name, src, o, c, k=1, group=1, stride=1):
    inits[f"{name}_w"] = rng.standard_normal((o, c // group, k, k)).astype(np.float32) * 0.2
    inits[f"{name}_b"] = rng.standard_normal(o).astype(np.float32)
    return helper.make_node("Conv", [src, f"{name}_w", f"{name}_b"], [name], group=group, pads=[k // 2] * 4,
                            strides=[stride] * 2)


def _check(path, in_shape):
    x = np.random.default_rng(5).standard_normal(in_shape).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    got = mod.run(x)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{path}: max relative error {err:.2e} against onnxruntime"
    return mod


def _padded_transforms(mod):
    return [n for n in mod.graph.nodes if n.op == "layout_transform" and n.attrs.get("shape")]


@pytest.mark.parametrize("batch", [1, 2])
def test_squeezenet_classifier_in_padded_blocks(tmp_path, batch):
    """conv 1x1 -> 1000 channels + relu -> global average pool -> softmax, as SqueezeNet ends."""
    rng = np.random.default_rng(0)
    inits = {}
    nodes = [_conv(rng, inits, "c", "x", 1000, 32), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"])]
    path = str(tmp_path / "squeeze.onnx")
    _save(path, nodes, inits, (batch, 32, 5, 5))
    mod = _check(path, (batch, 32, 5, 5))
    convs = [n for n in mod.graph.nodes if n.op == "conv2d_nchwc"]
    assert len(convs) == 1 and mod.graph.types[convs[0].outputs[0]].shape[1:] == (63, 5, 5, 16)
    assert _padded_transforms(mod)


def test_padding_never_reaches_a_consumer(tmp_path):
    """60 channels (padded to 64) -> sigmoid (0.5 in the padding) + residual add -> a 3x3 conv
    and a depthwise conv that read them cropped; 1000 channels -> a conv reading them in blocks of 8;
    a 3x3 Winograd-sized conv with 60 outputs; an odd 7x5 plane."""
    rng = np.random.default_rng(1)
    inits = {}
    nodes = [_conv(rng, inits, "a", "x", 60, 16), helper.make_node("Sigmoid", ["a"], ["s"]),
             _conv(rng, inits, "b", "s", 60, 60, k=3), helper.make_node("Add", ["b", "s"], ["r"]),
             _conv(rng, inits, "d", "r", 60, 60, k=3, group=60),
             _conv(rng, inits, "e", "d", 1000, 60), helper.make_node("Relu", ["e"], ["er"]),
             _conv(rng, inits, "f", "er", 24, 1000), helper.make_node("Sigmoid", ["f"], ["y"])]
    path = str(tmp_path / "consumers.onnx")
    _save(path, nodes, inits, (1, 16, 7, 5))
    mod = _check(path, (1, 16, 7, 5))
    assert len(_padded_transforms(mod)) >= 2


def test_output_block_pads_only_when_cheap():
    assert output_block(64, 16) == 16 and output_block(24, 16) == 8   # whole blocks: unchanged
    assert output_block(1000, 16) == 16 and output_block(60, 16) == 16  # 1008 and 64 channels
    assert output_block(20, 16) is None and output_block(3, 16) is None  # too much padding: NCHW
    assert output_block(72, 16) == 8                                      # 8 divides, 11% padding

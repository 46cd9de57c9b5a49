"""Convolution outputs whose channel count is not a whole number of vectors (SqueezeNet's 1000 classes,
ShuffleNet's 60) run in full-width blocks with a partial last block: zero weights in the padding, the
padding cropped where the tensor leaves the blocked layout. Every case against onnxruntime, with
followers that put non-zeros into the padding (bias, sigmoid, a residual add) before the crop.

Tensors whose channel count half a vector divides (24, 40, 72 with AVX-512's 16 lanes) are stored in whole
vectors too (``nnvm.cpu.layout_choice.padded_block``, ``cpu_switches["padded_blocks"]``): the convolution
writing them runs full-width, plain convolutions read them in sub-blocks of 8 (the padded lanes never read),
other readers through a transform; sigmoid followers put 0.5 into the padding before each kind of reader, and
every such case runs with the switch on and off."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cpu.layout_choice import output_block, padded_block


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


def _check(path, in_shape, target="llvm", run=True):
    """The module compiled for ``target``, its output checked against onnxruntime where ``run``."""
    mod = nnvm.compile(path, target=target, opt_level=3, tuning_log=False)
    if not run:
        return mod
    x = np.random.default_rng(5).standard_normal(in_shape).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = mod.run(x)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{path}: max relative error {err:.2e} against onnxruntime"
    return mod


def _padded_transforms(mod):
    return [n for n in mod.graph.nodes if n.op == "layout_transform" and n.attrs.get("shape")]


@pytest.mark.parametrize("batch", [1, 2])
def test_squeezenet_classifier_in_padded_blocks(tmp_path, isa_target, batch):
    """conv 1x1 -> 1000 classes + relu -> global average pool -> softmax, as SqueezeNet ends. 1000 is
    62.5 vectors of 16; where 8 lanes make it whole vectors, 1004 classes keep the half-vector tail."""
    lanes = isa_target.lanes
    classes = 1000 if 1000 % lanes else 1000 + lanes // 2
    rng = np.random.default_rng(0)
    inits = {}
    nodes = [_conv(rng, inits, "c", "x", classes, 32), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]), helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Softmax", ["f"], ["y"])]
    path = str(tmp_path / "squeeze.onnx")
    _save(path, nodes, inits, (batch, 32, 5, 5))
    mod = _check(path, (batch, 32, 5, 5), isa_target.build, isa_target.run is not None)
    convs = [n for n in mod.graph.nodes if n.op == "conv2d_nchwc"]
    blocks = -(-classes // lanes)  # 63 of 16 or 126 of 8, the last half padding
    assert len(convs) == 1 and mod.graph.types[convs[0].outputs[0]].shape[1:] == (blocks, 5, 5, lanes)
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


def _blocks(mod):
    """The data and output shapes of every conv2d_nchwc, by the name of its ONNX weight."""
    types = mod.graph.types
    return {n.inputs[1].split("_w")[0]: (types[n.inputs[0]].shape, types[n.outputs[0]].shape)
            for n in mod.graph.nodes if n.op == "conv2d_nchwc"}


@pytest.mark.parametrize("switch", ["0", "1"])
@pytest.mark.parametrize("batch", [1, 8])
def test_inverted_residual_on_24_channels(tmp_path, cpu_switch, isa_target, switch, batch):
    """MobileNetV2's second stage: expand 16 -> 96, depthwise stride 2, project to 24; expand 24 -> 144,
    depthwise, project to 24 + residual add; then a 24-channel reader of every other kind: a sigmoid
    (non-zeros in the padding) into a plain 3x3 (Winograd-sized), a depthwise and a grouped conv, a
    max pool and a 1x1 conv to 40 channels, stride 2. Channel counts are for 16 lanes and scale with
    the width's (AVX2: 8 -> 48, 12 -> 72, ...), so 24 stays one and a half vectors."""
    cpu_switch("padded_blocks", switch)
    lanes = isa_target.lanes

    def ch(n):
        return n * lanes // 16

    rng = np.random.default_rng(batch)
    inits = {}
    relu6 = [np.float32(0), np.float32(6)]
    inits["lo"], inits["hi"] = np.array(relu6[0]), np.array(relu6[1])
    nodes = [
        _conv(rng, inits, "e1", "x", ch(96), ch(16)), helper.make_node("Clip", ["e1", "lo", "hi"], ["e1r"]),
        _conv(rng, inits, "d1", "e1r", ch(96), ch(96), k=3, group=ch(96), stride=2),
        helper.make_node("Clip", ["d1", "lo", "hi"], ["d1r"]),
        _conv(rng, inits, "p1", "d1r", ch(24), ch(96)),
        _conv(rng, inits, "e2", "p1", ch(144), ch(24)), helper.make_node("Clip", ["e2", "lo", "hi"], ["e2r"]),
        _conv(rng, inits, "d2", "e2r", ch(144), ch(144), k=3, group=ch(144)),
        helper.make_node("Clip", ["d2", "lo", "hi"], ["d2r"]),
        _conv(rng, inits, "p2", "d2r", ch(24), ch(144)), helper.make_node("Add", ["p2", "p1"], ["r"]),
        helper.make_node("Sigmoid", ["r"], ["s"]),
        _conv(rng, inits, "w3", "s", ch(24), ch(24), k=3),
        _conv(rng, inits, "dw", "s", ch(24), ch(24), k=3, group=ch(24)),
        _conv(rng, inits, "g", "s", ch(24), ch(24), group=3), helper.make_node("MaxPool", ["s"], ["mp"],
                                                                              kernel_shape=[1, 1]),
        helper.make_node("Add", ["w3", "dw"], ["a1"]), helper.make_node("Add", ["a1", "g"], ["a2"]),
        helper.make_node("Add", ["a2", "mp"], ["a3"]),
        _conv(rng, inits, "o", "a3", ch(40), ch(24), stride=2), helper.make_node("Sigmoid", ["o"], ["os"]),
        _conv(rng, inits, "y", "os", ch(20), ch(40), k=3)]
    path = str(tmp_path / "inverted.onnx")
    _save(path, nodes, inits, (batch, ch(16), 18, 14))
    mod = _check(path, (batch, ch(16), 18, 14), isa_target.build, isa_target.run is not None)
    shapes = _blocks(mod)
    p1_out, e2_in = shapes["p1"][1], shapes["e2"][0]
    padded, halves = (2, lanes), (3, lanes // 2)
    if switch == "1":  # 24 channels in 2 blocks of 16 (8 padded), read as such by the expand conv
        assert p1_out[1:2] + p1_out[4:] == padded and e2_in[1:2] + e2_in[4:] == padded
        winograd = [n for n in mod.graph.nodes if n.op == "conv2d_winograd_nchwc"]
        assert len(winograd) == 1 and mod.graph.types[winograd[0].outputs[0]].shape[1::3] == padded
    else:
        assert p1_out[1:2] + p1_out[4:] == halves and e2_in[1:2] + e2_in[4:] == halves


@pytest.mark.parametrize("channels", [3, 20, 24, 40, 72, 1000])
def test_odd_channel_counts_in_and_out(tmp_path, cpu_switch, channels):
    """A conv to ``channels`` + sigmoid, then a 1x1 and a 3x3 stride-2 conv reading them, both to
    ``channels`` again; the switch on."""
    cpu_switch("padded_blocks", "1")
    rng = np.random.default_rng(channels)
    inits = {}
    nodes = [_conv(rng, inits, "a", "x", channels, 8), helper.make_node("Sigmoid", ["a"], ["s"]),
             _conv(rng, inits, "b", "s", channels, channels),
             _conv(rng, inits, "c", "s", channels, channels, k=3, stride=2),
             helper.make_node("Relu", ["b"], ["br"]),
             helper.make_node("MaxPool", ["br"], ["bp"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Add", ["bp", "c"], ["y"])]
    path = str(tmp_path / f"odd{channels}.onnx")
    _save(path, nodes, inits, (2, 8, 10, 10))
    _check(path, (2, 8, 10, 10))


def test_which_channel_counts_pad(cpu_switch):
    cpu_switch("padded_blocks", "1")
    assert padded_block(24, 16) and padded_block(40, 16) and padded_block(72, 16)
    assert not padded_block(8, 16) and not padded_block(32, 16) and not padded_block(20, 16)
    assert padded_block(1000, 16)      # 62.5 vectors: 63, so a conv reading them needs no transform
    assert padded_block(12, 8) and not padded_block(4, 8)  # AVX2: 4-lane halves
    cpu_switch("padded_blocks", "0")
    assert not padded_block(24, 16)


@pytest.mark.parametrize("channels", [12, 20])
def test_avx2_pads_half_vectors_of_four(tmp_path, cpu_switch, channels):
    """With AVX2 (8 lanes) 12 and 20 channels are half-vector multiples: written in 8-lane blocks with a
    padded last block, read in sub-blocks of 4; against onnxruntime, through a sigmoid."""
    cpu_switch("padded_blocks", "1")
    rng = np.random.default_rng(channels + 1)
    inits = {}
    nodes = [_conv(rng, inits, "a", "x", channels, 8), helper.make_node("Sigmoid", ["a"], ["s"]),
             _conv(rng, inits, "b", "s", 16, channels), helper.make_node("Add", ["b", "x2"], ["y"])]
    inits["x2"] = rng.standard_normal((1, 16, 1, 1)).astype(np.float32)
    path = str(tmp_path / f"avx2_{channels}.onnx")
    _save(path, nodes, inits, (1, 8, 9, 9))
    x = np.random.default_rng(5).standard_normal((1, 8, 9, 9)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = nnvm.compile(path, target="llvm -mcpu=haswell", tuning_log=False)
    got = mod.run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"max relative error {err:.2e} against onnxruntime"
    a_out, b_in = _blocks(mod)["a"][1], _blocks(mod)["b"][0]
    assert a_out[1::3] == (-(-channels // 8), 8) and b_in[1::3] == (-(-channels // 8), 8)

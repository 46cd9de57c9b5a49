"""``cpu.depthwise_conv2d_nchwc.tiles``: depthwise 3x3 convolutions in NCHW[x]c (MobileNetV2's and
ShuffleNet's shapes, odd planes, channels that are not a multiple of 16, stride 2, batch 1 and 3, bias,
batch norm and ReLU6 epilogues) against onnxruntime, and every knob value against numpy."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.depthwise_nchwc import NAME, depthwise_nchwc_template
from nnvm.cpu.templates import schedule_template
from nnvm.ops.blocked_layout import from_primal

# (batch, channels, height = width, stride, epilogue)
CASES = [
    (1, 32, 28, 1, "bias_relu6"),    # MobileNetV2's first depthwise layer, a smaller plane
    (1, 96, 30, 2, "bias_relu6"),    # its stride-2 expansion (96 channels: 6 blocks)
    (3, 144, 14, 1, "bn_relu6"),     # batch 3, batch norm folded into the epilogue
    (3, 144, 14, 2, "bias_relu6"),
    (1, 960, 7, 1, "bias_relu6"),    # the 7x7 plane of the last blocks
    (1, 576, 14, 2, "bias_relu6"),   # stride 2 to a 7x7 plane: whole rows
    (1, 24, 13, 1, "bias_relu6"),    # 24 channels: blocks of 8; an odd plane
    (3, 40, 13, 2, "bias"),          # stride 2 on an odd plane, bias only
    (1, 136, 14, 2, "bias"),         # ShuffleNet (g=4): 136 channels, blocks of 8
    (2, 16, 7, 1, "none"),           # the convolution is the group's output
]


def _save(path, n, c, hw, stride, epilogue, seed=0, kernel=3, pads=(1, 1, 1, 1), dilation=1):
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((c, 1, kernel, kernel)).astype(np.float32), "w")]
    conv_in = ["x", "w"]
    if epilogue.startswith("bias"):
        inits.append(numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"))
        conv_in.append("b")
    nodes = [helper.make_node("Conv", conv_in, ["c" if epilogue != "none" else "y"], pads=list(pads),
                              strides=[stride, stride], group=c, dilations=[dilation, dilation])]
    last = "c"
    if epilogue.startswith("bn"):
        for name, value in (("scale", rng.uniform(0.5, 1.5, c)), ("shift", rng.standard_normal(c)),
                            ("mean", rng.standard_normal(c)), ("var", rng.uniform(0.5, 2.0, c))):
            inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        nodes.append(helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["bn"]))
        last = "bn"
    if epilogue.endswith("relu6"):
        inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                  numpy_helper.from_array(np.array(6, np.float32), "hi")]
        nodes.append(helper.make_node("Clip", [last, "lo", "hi"], ["y"]))
    elif epilogue != "none":
        nodes.append(helper.make_node("Identity", [last], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [n, c, hw, hw])
    graph = helper.make_graph(nodes, "dw", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}_c{}_hw{}_s{}_{}".format(*c))
def test_depthwise_nchwc_matches_onnxruntime(case, tmp_path, group_of):
    n, c, hw = case[:3]
    path = _save(str(tmp_path / "dw.onnx"), *case)
    _check_tiles_against_onnxruntime(path, (n, c, hw, hw), case, group_of, 1)


def _check_tiles_against_onnxruntime(path: str, shape: tuple, case, group_of, seed: int) -> None:
    """The model's depthwise group gets the tiles template, and the compiled model matches onnxruntime."""
    graph, tgt, *_ = optimized_graph(path, "llvm")
    template = schedule_template(tgt, group_of(graph, "conv2d_nchwc"))
    assert template is not None and template.name == NAME, "the depthwise group should get the tiles template"
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"depthwise {case}: max relative error {err:.2e}"


# (batch, channels, height = width, stride, epilogue, kernel, pads (top, left, bottom, right), dilation)
OTHER_WINDOWS = [
    (1, 32, 14, 1, "bias_relu6", 5, (2, 2, 2, 2), 1),  # 5x5 (MnasNet, EfficientNet)
    (3, 48, 15, 2, "bias_relu6", 5, (2, 2, 2, 2), 1),  # 5x5 at stride 2 on an odd plane
    (1, 16, 12, 1, "bias", 3, (0, 0, 0, 0), 1),        # no padding: no padded window
    (1, 16, 11, 2, "bias_relu6", 3, (0, 0, 1, 1), 1),  # TF-style asymmetric "same" padding
    (2, 16, 12, 1, "bias_relu6", 3, (2, 2, 2, 2), 2),  # dilation 2
]


@pytest.mark.parametrize("case", OTHER_WINDOWS, ids=lambda c: "n{}_c{}_hw{}_s{}_{}_k{}_p{}_d{}".format(
    *c[:6], "".join(map(str, c[6])), c[7]))
def test_other_windows_match_onnxruntime(case, tmp_path, group_of):
    n, c, hw, stride, epilogue, kernel, pads, dilation = case
    path = _save(str(tmp_path / "dw.onnx"), n, c, hw, stride, epilogue, kernel=kernel, pads=pads,
                 dilation=dilation)
    _check_tiles_against_onnxruntime(path, (n, c, hw, hw), case, group_of, 2)


def _numpy_depthwise(x, w, b, stride):
    n, c, hw, _ = x.shape
    out = (hw + 2 - 3) // stride + 1
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    want = np.zeros((n, c, out, out)) + b.reshape(1, c, 1, 1)
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + stride * (out - 1) + 1:stride, j:j + stride * (out - 1) + 1:stride]
            want += patch * w[:, 0, i, j].reshape(1, c, 1, 1)
    return np.clip(want, 0, 6)


@pytest.mark.parametrize("stride", [1, 2])
def test_every_knob_value_gives_numpy_numbers(tmp_path, stride, group_of, every_config):
    """Each knob's values (one config per value, the rest at the fallback) on batch 3, a 13x13 plane and
    24 channels (blocks of 8), against numpy in float64."""
    n, c, hw = 3, 24, 13
    path = _save(str(tmp_path / "dw.onnx"), n, c, hw, stride, "bias_relu6", seed=5)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_nchwc")
    template = depthwise_nchwc_template(tgt, group)
    assert template is not None and template.size() >= 8
    assert template.fallback["ow_block"] > 1, "a prime width gets a guarded tile, not one pixel a tile"
    model = onnx.load(path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    x = np.random.default_rng(6).standard_normal((n, c, hw, hw)).astype(np.float32)
    want = _numpy_depthwise(x, inits["w"], inits["b"], stride)
    layout = f"NCHW{group.outputs[0].shape[4].value}c"
    every_config(template, group, graph.params, np.ascontiguousarray(from_primal(x, "NCHW", layout)),
                 from_primal(want, "NCHW", layout), "depthwise", configs=template.one_knob_variants())


def test_switch_hands_depthwise_back_to_the_direct_template(tmp_path, cpu_switch, group_of):
    """``cpu_switches={"depthwise_tiles": "0"}``: the template declines and conv2d_nchwc's own one takes the
    group."""
    path = _save(str(tmp_path / "dw.onnx"), 1, 32, 14, 1, "bias_relu6")
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_nchwc")
    cpu_switch("depthwise_tiles", "0")
    assert depthwise_nchwc_template(tgt, group) is None
    assert schedule_template(tgt, group).name == "cpu.depthwise_conv2d_nchwc.direct"


def test_plain_convolutions_are_declined(tmp_path, group_of):
    """A groups=1 (1x1) convolution stays with conv2d_nchwc's template."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((32, 32, 1, 1)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    path = str(tmp_path / "conv.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_nchwc")
    assert depthwise_nchwc_template(tgt, group) is None
    assert schedule_template(tgt, group).name == "cpu.conv2d_nchwc.direct"


def _with_l3(monkeypatch, tgt, l3: int):
    """``tgt``'s backend answering ``cpu_signature`` with a last-level cache of ``l3`` bytes."""
    import dataclasses

    from nnvm.autotune.signature import CPUSignature

    backend = tgt.backend
    real = backend.cpu_signature

    def signature(target):
        found = real(target) or CPUSignature("x86_64", 32 * 8, True, frozenset())
        return dataclasses.replace(found, l3=l3)

    monkeypatch.setattr(backend, "cpu_signature", signature)


@pytest.mark.parametrize("target, registers", [("llvm -mcpu=haswell", 16), ("llvm -mcpu=skylake-avx512", 32)],
                         ids=["avx2", "avx512"])
@pytest.mark.parametrize("layer, streaming_tile", [((144, 56, 1), {"tile_rows": 1}),
                                                   ((96, 112, 2), {"tile_rows": 4, "ow_block": 2})],
                         ids=["c144_hw56_s1", "c96_hw112_s2"])
def test_streaming_layers_get_other_tiles_on_16_registers(tmp_path, monkeypatch, cpu_switch, group_of, target,
                                                          registers, layer, streaming_tile):
    """MobileNetV2's 144 channels on 56 x 56 (14.4 MB in, 14.4 out) and 96 channels 112 -> 56 at batch 8,
    past half a 32 MB last-level cache: one-row tiles at stride 1 and tall ones at stride 2 with 16
    registers; a 32-register machine keeps the 2-D tile, the config it had before
    (``cpu_switches={"depthwise_stream": "0"}``); batch 1 (in cache) keeps it everywhere."""
    fallbacks = {}
    for batch in (8, 1):
        path = _save(str(tmp_path / f"dw{batch}.onnx"), batch, *layer, "bias_relu6")
        graph, tgt, *_ = optimized_graph(path, target)
        _with_l3(monkeypatch, tgt, 32 << 20)
        group = group_of(graph, "conv2d_nchwc")
        for switch in ("1", "0"):
            cpu_switch("depthwise_stream", switch)
            fallbacks[batch, switch] = depthwise_nchwc_template(tgt, group).fallback
    before = fallbacks[8, "0"]
    assert before["tile_rows"] > 1
    if registers == 16:
        assert fallbacks[8, "1"] == {**before, **streaming_tile}
        assert fallbacks[8, "1"] != before
    else:
        assert fallbacks[8, "1"] == before
    assert fallbacks[1, "1"] == fallbacks[1, "0"]


def test_unknown_last_level_cache_keeps_the_2d_tile(tmp_path, group_of, host):
    """Another CPU than the host (caches unknown): no streaming rule."""
    from nnvm.cpu.cost_model import streams_from_memory

    path = _save(str(tmp_path / "dw.onnx"), 8, 144, 56, 1, "bias_relu6")
    other = "broadwell" if host.cpu == "haswell" else "haswell"
    graph, tgt, *_ = optimized_graph(path, f"llvm -mcpu={other}")
    assert not streams_from_memory(tgt, 1 << 40)
    assert depthwise_nchwc_template(tgt, group_of(graph, "conv2d_nchwc")).fallback["tile_rows"] > 1


@pytest.mark.parametrize("case", [(8, 48, 28, 1, "bias_relu6"), (3, 40, 14, 1, "bn_relu6"),
                                  (8, 32, 28, 2, "bias_relu6"), (3, 24, 16, 2, "bias")],
                         ids=lambda c: "n{}_c{}_hw{}_s{}_{}".format(*c))
def test_one_row_tiles_match_onnxruntime(case, tmp_path, monkeypatch, group_of):
    """The streaming rule forced on small layers (any size streams): the host's fallback (one-row tiles at
    stride 1, 4 x 2 at stride 2 on an AVX2 host) against onnxruntime, batch 8 and 3."""
    monkeypatch.setattr("nnvm.cpu.cost_model.STREAM_SHARE", 1e-9)
    n, c, hw = case[:3]
    path = _save(str(tmp_path / "dw.onnx"), *case)
    _check_tiles_against_onnxruntime(path, (n, c, hw, hw), case, group_of, 3)

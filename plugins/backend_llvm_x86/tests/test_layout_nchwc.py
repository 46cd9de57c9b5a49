"""conv2d in NCHW[x]c on x86: the layout choice, the schedule template's configs, and whole blocks of a
ResNet / MobileNet against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.layout_choice import channel_block
from nnvm.cpu.schedule_nchwc import conv2d_nchwc_template
from nnvm.ops.blocked_layout import from_primal


def _save(path, nodes, inits, in_shape, outputs=("y",)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(in_shape))
    ys = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    weights = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "block", [x], ys, weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _bn(rng, prefix, c, inits):
    inits[f"{prefix}_g"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    inits[f"{prefix}_b"] = rng.standard_normal(c).astype(np.float32)
    inits[f"{prefix}_m"] = rng.standard_normal(c).astype(np.float32) * 0.1
    inits[f"{prefix}_v"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    return [f"{prefix}_g", f"{prefix}_b", f"{prefix}_m", f"{prefix}_v"]


def resnet_stem_and_block(path, c=32, hw=20):
    """conv7x7/2 + bn + relu -> maxpool -> [conv3x3 + bn + relu -> conv3x3 + bn + residual + relu]
    -> global pool -> flatten -> dense: a ResNet in miniature."""
    rng = np.random.default_rng(0)
    inits = {"w0": rng.standard_normal((c, 3, 7, 7)).astype(np.float32) * 0.1,
             "w1": rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.1,
             "w2": rng.standard_normal((c, c, 3, 3)).astype(np.float32) * 0.1,
             "fc": rng.standard_normal((c, 10)).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[3] * 4, strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c0"] + _bn(rng, "bn0", c, inits), ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("MaxPool", ["r0"], ["p0"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4),
        helper.make_node("Conv", ["p0", "w1"], ["c1"], pads=[1] * 4),
        helper.make_node("BatchNormalization", ["c1"] + _bn(rng, "bn1", c, inits), ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1] * 4),
        helper.make_node("BatchNormalization", ["c2"] + _bn(rng, "bn2", c, inits), ["n2"]),
        helper.make_node("Add", ["n2", "p0"], ["a2"]),
        helper.make_node("Relu", ["a2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["y"]),
    ]
    _save(path, nodes, inits, (1, 3, hw * 2, hw * 2))


def mobilenet_block(path, c=16, expand=48, hw=14):
    """1x1 expand + bn + relu6 -> depthwise 3x3 (stride 1) + bn + relu6 -> 1x1 project + bn + residual,
    then a stride-2 depthwise: a MobileNetV2 inverted residual."""
    rng = np.random.default_rng(1)
    inits = {"we": rng.standard_normal((expand, c, 1, 1)).astype(np.float32) * 0.2,
             "wd": rng.standard_normal((expand, 1, 3, 3)).astype(np.float32) * 0.2,
             "wp": rng.standard_normal((c, expand, 1, 1)).astype(np.float32) * 0.2,
             "wd2": rng.standard_normal((c, 1, 3, 3)).astype(np.float32) * 0.2,
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "we"], ["ce"]),
        helper.make_node("BatchNormalization", ["ce"] + _bn(rng, "bne", expand, inits), ["ne"]),
        helper.make_node("Clip", ["ne", "lo", "hi"], ["re"]),
        helper.make_node("Conv", ["re", "wd"], ["cd"], pads=[1] * 4, group=expand),
        helper.make_node("BatchNormalization", ["cd"] + _bn(rng, "bnd", expand, inits), ["nd"]),
        helper.make_node("Clip", ["nd", "lo", "hi"], ["rd"]),
        helper.make_node("Conv", ["rd", "wp"], ["cp"]),
        helper.make_node("BatchNormalization", ["cp"] + _bn(rng, "bnp", c, inits), ["np_"]),
        helper.make_node("Add", ["np_", "x"], ["a"]),
        helper.make_node("Conv", ["a", "wd2"], ["y"], pads=[1] * 4, strides=[2, 2], group=c),
    ]
    _save(path, nodes, inits, (1, c, hw, hw))


def _check(path, in_shape, monkeypatch=None):
    x = np.random.default_rng(2).standard_normal(in_shape).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    got = mod.run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"{path}: max relative error {err:.2e} against onnxruntime"
    return mod


def test_resnet_block_in_nchwc_matches_onnxruntime(tmp_path):
    path = str(tmp_path / "resnet.onnx")
    resnet_stem_and_block(path, c=16, hw=8)
    mod = _check(path, (1, 3, 16, 16))
    stats = mod.stats()
    groups = stats["fused_groups"]
    ops = {n.op for n in mod.graph.nodes}
    assert "conv2d_nchwc" in ops and "conv2d" not in ops
    assert "max_pool2d_nchwc" in ops
    # The stem reads NCHW input directly; one transform back, fused into the global pool.
    transforms = [g for g in groups if any(n.endswith("_transform") for n in g)]
    assert len(transforms) == 1 and len(transforms[0]) == 2, transforms


def test_mobilenet_block_in_nchwc_matches_onnxruntime(tmp_path):
    path = str(tmp_path / "mobilenet.onnx")
    mobilenet_block(path)
    mod = _check(path, (1, 16, 14, 14))
    assert sum(n.op == "conv2d_nchwc" for n in mod.graph.nodes) == 4


def test_layout_off_by_name_and_by_switch(tmp_path, cpu_switch):
    path = str(tmp_path / "resnet.onnx")
    resnet_stem_and_block(path, c=16, hw=8)
    graph, *_ = optimized_graph(path, "llvm", disabled_passes=("alter_op_layout",))
    assert "conv2d_nchwc" not in {n.op for n in graph.nodes}
    cpu_switch("layout", "0")
    graph, *_ = optimized_graph(path, "llvm")
    assert "conv2d_nchwc" not in {n.op for n in graph.nodes}
    graph, *_ = optimized_graph(path, "llvm", opt_level=2)
    assert "conv2d_nchwc" not in {n.op for n in graph.nodes}


def test_channel_block_follows_vector_width():
    assert channel_block(64, 16) == 16 and channel_block(24, 16) == 8 and channel_block(3, 16) is None
    assert channel_block(24, 8) == 8 and channel_block(12, 8) == 4 and channel_block(6, 4) is None


def test_thousand_channels_get_a_block_of_eight():
    """A classifier's 1000 output channels (SqueezeNet's last 1x1 conv) are not a multiple of 16, but
    half the AVX-512 width divides them: NCHW8c, not plain NCHW."""
    assert channel_block(1000, 16) == 8 and channel_block(1000, 8) == 8 and channel_block(1000, 4) == 4


@pytest.mark.parametrize("depthwise", [False, True])
def test_every_knob_value_gives_numpy_numbers(tmp_path, cpu_switch, depthwise, group_of, every_config):
    """Each knob's values (one config per value, the rest at the fallback) against a numpy conv."""
    cpu_switch("winograd", "0")  # the direct schedule, not Winograd, for this 3x3
    rng = np.random.default_rng(3)
    c, hw = (16 if depthwise else 32), 12
    w = rng.standard_normal((c, 1 if depthwise else c, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4, group=c if depthwise else 1),
             helper.make_node("Relu", ["c"], ["y"])]
    path = str(tmp_path / "conv.onnx")
    _save(path, nodes, {"w": w}, (1, c, hw, hw))
    graph, tgt, *_ = optimized_graph(path, "llvm")
    group = group_of(graph, "conv2d_nchwc")
    template = conv2d_nchwc_template(tgt, group)
    assert template is not None and template.name.endswith("conv2d_nchwc.direct")
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))).astype(np.float64)
    want = np.zeros((1, c, hw, hw))
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + hw, j:j + hw]
            if depthwise:
                want += patch * w[:, 0, i, j].reshape(1, c, 1, 1)
            else:
                want += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    want = np.maximum(want, 0)
    layout = f"NCHW{group.outputs[0].shape[4].value}c"
    every_config(template, group, graph.params, np.ascontiguousarray(from_primal(x, "NCHW", layout)),
                 from_primal(want, "NCHW", layout), "conv2d_nchwc", configs=template.one_knob_variants())

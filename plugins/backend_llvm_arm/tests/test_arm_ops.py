"""Operators compiled for aarch64 and armv7, run under qemu-user, checked against numpy.

One ONNX model holds every operator as a separate output, so each target costs one compile, one export
and one emulator start; each test then checks one output against its numpy formula. Shapes are small
but keep the schedules' paths: a width of 12 (three NEON vectors, the register-blocked conv2d), a
stride-2 conv, a depthwise conv, a dense layer over 1152 inputs.
"""

from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import nnvm

SHAPE = (1, 8, 12, 12)


def _weights():
    rng = np.random.default_rng(7)
    f = np.float32
    return {
        "x": rng.standard_normal(SHAPE).astype(f),
        "w_conv": (rng.standard_normal((16, 8, 3, 3)) * 0.2).astype(f),
        "b_conv": rng.standard_normal(16).astype(f),
        "w_s2": (rng.standard_normal((8, 8, 3, 3)) * 0.2).astype(f),
        "w_dw": rng.standard_normal((8, 1, 3, 3)).astype(f),
        "w_fc": (rng.standard_normal((10, 8 * 12 * 12)) * 0.05).astype(f),
        "b_fc": rng.standard_normal(10).astype(f),
        "lo": np.array(0.0, f), "hi": np.array(6.0, f), "half": np.array(-0.5, f),
    }


OUTPUTS = {  # name -> shape
    "conv_relu": (1, 16, 12, 12), "conv_stride2": (1, 8, 6, 6), "depthwise_relu6": (1, 8, 12, 12),
    "dense": (1, 10), "softmax": (1, 10), "max_pool": (1, 8, 6, 6), "avg_pool": (1, 8, 12, 12),
    "global_avg_pool": (1, 8, 1, 1), "elementwise": SHAPE, "concat": (1, 24, 12, 12),
}


def ops_model(w: dict):
    """Every operator as its own output."""
    n = helper.make_node
    nodes = [
        n("Conv", ["x", "w_conv", "b_conv"], ["c1"], pads=[1, 1, 1, 1]),
        n("Relu", ["c1"], ["conv_relu"]),
        n("Conv", ["x", "w_s2"], ["conv_stride2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        n("Conv", ["x", "w_dw"], ["dw"], pads=[1, 1, 1, 1], group=8),
        n("Clip", ["dw", "lo", "hi"], ["depthwise_relu6"]),
        n("Flatten", ["x"], ["flat"]),
        n("Gemm", ["flat", "w_fc", "b_fc"], ["dense"], transB=1),
        n("Softmax", ["dense"], ["softmax"], axis=1),
        n("MaxPool", ["x"], ["max_pool"], kernel_shape=[2, 2], strides=[2, 2]),
        n("AveragePool", ["x"], ["avg_pool"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0),
        n("GlobalAveragePool", ["x"], ["global_avg_pool"]),
        n("Sigmoid", ["x"], ["sig"]), n("Tanh", ["x"], ["th"]), n("Mul", ["sig", "th"], ["st"]),
        n("Mul", ["x", "half"], ["xh"]), n("Exp", ["xh"], ["ex"]), n("Add", ["st", "ex"], ["elementwise"]),
        n("Concat", ["conv_relu", "depthwise_relu6"], ["concat"], axis=1),
    ]
    outputs = OUTPUTS
    inits = [numpy_helper.from_array(v, k) for k, v in w.items() if k != "x"]
    graph = helper.make_graph(
        nodes, "arm_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in outputs.items()], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def conv_ref(x, w, stride=1, pad=0, groups=1):
    """Direct convolution in float64, NCHW/OIHW, as ONNX's Conv defines it."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    oc, icg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (x.shape[2] + 2 * pad - kh) // stride + 1
    ow = (x.shape[3] + 2 * pad - kw) // stride + 1
    out = np.zeros((x.shape[0], oc, oh, ow))
    ocg = oc // groups
    for g in range(groups):
        xs = xp[:, g * icg:(g + 1) * icg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                taps = w[g * ocg:(g + 1) * ocg, :, i, j]
                out[:, g * ocg:(g + 1) * ocg] += np.einsum("ncij,oc->noij", patch, taps)
    return out


def references(w: dict) -> dict:
    x = w["x"].astype(np.float64)
    conv_relu = np.maximum(conv_ref(x, w["w_conv"], pad=1) + w["b_conv"].reshape(1, -1, 1, 1), 0)
    dw = np.clip(conv_ref(x, w["w_dw"], pad=1, groups=8), 0, 6)
    dense = x.reshape(1, -1) @ w["w_fc"].T.astype(np.float64) + w["b_fc"]
    e = np.exp(dense - dense.max(axis=1, keepdims=True))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ones = np.pad(np.ones_like(x), ((0, 0), (0, 0), (1, 1), (1, 1)))
    window_sum = sum(xp[:, :, i:i + 12, j:j + 12] for i in range(3) for j in range(3))
    window_count = sum(ones[:, :, i:i + 12, j:j + 12] for i in range(3) for j in range(3))
    return {
        "conv_relu": conv_relu,
        "conv_stride2": conv_ref(x, w["w_s2"], stride=2, pad=1),
        "depthwise_relu6": dw,
        "dense": dense,
        "softmax": e / e.sum(axis=1, keepdims=True),
        "max_pool": x.reshape(1, 8, 6, 2, 6, 2).max(axis=(3, 5)),
        "avg_pool": window_sum / window_count,
        "global_avg_pool": x.mean(axis=(2, 3), keepdims=True),
        "elementwise": 1 / (1 + np.exp(-x)) * np.tanh(x) + np.exp(-0.5 * x),
        "concat": np.concatenate([conv_relu, dw], axis=1),
    }


def test_operators_match_numpy(arm_target, close):
    """Every operator's output for one target; all mismatches are reported together. (One test per
    target, not per operator, so parallel test workers never compile and emulate the same model twice.)"""
    w = _weights()
    mod = nnvm.compile(ops_model(w), target=arm_target)
    outs = dict(zip(OUTPUTS, mod.run(w["x"])))
    failures = []
    for op, want in references(w).items():
        try:
            close(f"{op} on {arm_target}", outs[op], want, rtol=1e-5)
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


def test_neon_schedules_and_vector_fmas(arm_target, monkeypatch):
    """conv2d, depthwise conv2d and dense get the register-blocked templates (at NEON's 4 lanes), softmax
    its row template (all from the core's CPU layer, key ``cpu``), and the generated code
    multiplies-and-adds whole 128-bit vectors. Their outputs are checked by the test above."""
    import nnvm.compiler

    chosen = []
    ask = nnvm.compiler.schedule_template

    def spy(target, group):
        template = ask(target, group)
        chosen.append(getattr(template, "name", None))
        return template

    monkeypatch.setattr(nnvm.compiler, "schedule_template", spy)
    asm = nnvm.compile(ops_model(_weights()), target=arm_target).library.assembly()
    for name in ("cpu.conv2d_nchw.direct", "cpu.depthwise_conv2d_nchw.direct", "cpu.dense.rfactor",
                 "cpu.softmax.rows"):
        assert name in chosen, f"{arm_target}: no group got the {name} template (templates: {chosen})"
    # The conv kernels' machine code: every function (and outlined parallel body) named *_conv2d*.
    functions = re.split(r"\n\s*\.type\s+", asm)  # each piece starts "name,@function" ("%function" on arm)
    conv = "\n".join(f for f in functions if re.match(r"[\w.$]*conv2d[\w.$]*,\s*[@%]function", f))
    assert conv, f"{arm_target}: no conv2d kernel in the assembly"
    pattern = r"fmla\s+v\d+\.4s" if arm_target == "aarch64" else r"v(mla|fma)\.f32\s+q\d+"
    found = re.findall(pattern, conv)
    assert len(found) >= 8, (f"{arm_target}: expected NEON vector FMAs ({pattern}) in the conv kernels, "
                             f"found {len(found)}")

"""The passes on quantized graphs: blocked layouts through requantize and an int8 residual, fusion of a
residual into its convolution, the blocked int8 kernels' computes against numpy.

The layout pass is driven by a test ``choose`` (what the CPU layer answers where ``dot_u8s8`` has 16
lanes), so no backend plugin is needed; references are numpy integer convolutions and numpy's float32
requantization (onnxruntime's formula), never our own other output.
"""

from __future__ import annotations

import numpy as np

from nnvm.cpu.schedule_qconv import (
    DOT_ZERO_POINT_CORRECTION,
    QCONV2D_NCHWC,
    QCONV2D_WEIGHT_PACK,
    zero_point_correction,
)
from nnvm.errors import Error
from nnvm.graph.evaluate import evaluate_graph
from nnvm.graph.ir import Graph, Node, TensorType
from nnvm.passes import builtin
from nnvm.passes.alter_op_layout import AlteredNode, alter_op_layout

LANES = 16


def int_conv(x, w, pad):
    """int64 NCHW/OIHW convolution, stride 1."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, _, kh, kw = w.shape
    oh, ow = x.shape[2] - kh + 1, x.shape[3] - kw + 1
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], w[:, :, i, j].astype(np.int64))
    return out


def requant(acc, scale, bias, zp, lo=0, hi=255):
    v = (acc + bias.reshape(1, -1, 1, 1)).astype(np.float32) * scale.reshape(1, -1, 1, 1)
    return (np.rint(np.clip(v, np.float32(lo - zp), np.float32(hi - zp))) + zp).astype(np.uint8)


def blocked_qconv(node, in_types):
    """The CPU layer in miniature: every 8-bit conv as qconv2d_nchwc over 16-channel blocks."""
    if node.op != "qconv2d":
        return None
    attrs = dict(node.attrs)
    c, (o, _, kh, kw) = in_types[0].shape[1], in_types[1].shape
    new = {"strides": (1, 1), "padding": tuple(attrs.get("padding", (0, 0, 0, 0))), "dilation": (1, 1),
           "kernel": (kh, kw), "channels": o, "lanes": LANES,
           "data_zero_point": attrs.get("data_zero_point", 0)}
    return AlteredNode("qconv2d_nchwc", new, (("NCHW", f"NCHW{c}c"), None), (("NCHW", f"NCHW{o}c"),),
                       prepare=(None, ("qconv2d_weight_pack", {"lanes": LANES, "in_block": c})),
                       constant_inputs=(1,), extra=zero_point_correction(new["data_zero_point"]))


def residual_block(rng):
    """x -> qconv 3x3 (zp 3) -> requantize -> qconv 1x1 -> requantize, + the first requantize's output
    (dequantize both, add, quantize): a quantized ResNet block."""
    p = {"w1": rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8),
         "s1": rng.uniform(1e-4, 1e-3, 16).astype(np.float32),
         "b1": rng.integers(-900, 900, 16).astype(np.int32),
         "w2": rng.integers(-127, 128, (16, 16, 1, 1)).astype(np.int8),
         "s2": rng.uniform(1e-3, 1e-2, 16).astype(np.float32),
         "b2": rng.integers(-900, 900, 16).astype(np.int32)}
    rq1 = {"zero_point": 2, "out_dtype": "uint8", "out_min": 2}
    nodes = [
        Node("qconv2d", "c1", ("x", "w1"), ("c1",), {"padding": (1, 1, 1, 1), "data_zero_point": 3}),
        Node("requantize", "r1", ("c1", "s1", "b1"), ("r1",), rq1),
        Node("qconv2d", "c2", ("r1", "w2"), ("c2",), {"data_zero_point": 2}),
        Node("requantize", "r2", ("c2", "s2", "b2"), ("r2",), {"zero_point": 5, "out_dtype": "uint8"}),
        Node("dequantize", "d1", ("r1",), ("d1",), {"scale": 0.05, "zero_point": 2}),
        Node("dequantize", "d2", ("r2",), ("d2",), {"scale": 0.08, "zero_point": 5}),
        Node("add", "add", ("d1", "d2"), ("sum",), {}),  # the shortcut first, as in MobileNetV2's x + f(x)
        Node("quantize", "q", ("sum",), ("y",), {"scale": 0.1, "zero_point": 4, "out_dtype": "uint8"}),
    ]
    graph = Graph(nodes, ("x",), ("y",), p, {"x": TensorType((1, 16, 6, 6), "uint8")})
    return builtin.infer_types(graph)


def reference(x, p):
    r1 = requant(int_conv(x.astype(np.int64) - 3, p["w1"], 1), p["s1"], p["b1"], 2, lo=2)
    r2 = requant(int_conv(r1.astype(np.int64) - 2, p["w2"], 0), p["s2"], p["b2"], 5)
    s = (r1.astype(np.int32) - 2).astype(np.float32) * np.float32(0.05) \
        + (r2.astype(np.int32) - 5).astype(np.float32) * np.float32(0.08)
    return (np.clip(np.rint(np.clip(s / np.float32(0.1), -4, 251)) + 4, 0, 255)).astype(np.uint8)


def test_requantize_and_residual_follow_the_blocked_layout():
    """No layout transform between the convolutions: requantize's per-channel operands become blocked
    ones at the data's rank (folded), the dequantize/add/quantize run blocked; the numbers stay numpy's,
    the data zero point's correction an input computed from the packed weight at compile time."""
    rng = np.random.default_rng(0)
    graph = residual_block(rng)
    after = alter_op_layout(graph, choose=blocked_qconv)
    ops = [n.op for n in after.nodes]
    assert ops.count("qconv2d_nchwc") == 2 and "qconv2d" not in ops
    acts = [(n.inputs[0], n.attrs["dst_layout"]) for n in after.nodes
            if n.op == "layout_transform" and not n.inputs[0].startswith(("w", "s", "b"))]
    assert acts == [("x", "NCHW16c"), ("y_NCHW16c", "NCHW")], acts
    for n in after.nodes:
        if n.op == "requantize":
            assert len(after.types[n.inputs[0]].shape) == 5 and len(after.types[n.inputs[1]].shape) == 5
    corrections = [n for n in after.nodes if n.op == "dot_zero_point_correction"]
    assert [n.attrs["zero_point"] for n in corrections] == [3, 2]
    x = rng.integers(0, 256, (1, 16, 6, 6)).astype(np.uint8)
    x[..., ::2] = 255
    want = reference(x, graph.params)
    folded = builtin.eliminate_dead_code(builtin.fold_constants(after))
    assert "dot_zero_point_correction" not in [n.op for n in folded.nodes], "not folded at compile time"
    for name, g in (("before", graph), ("after", after), ("folded", folded)):
        (got,) = evaluate_graph(g, {"x": x})
        assert np.array_equal(got, want), f"{name}: {int((got != want).sum())} values differ from numpy"


def test_blocked_qconv_compute_with_its_correction_matches_numpy(ops):
    """qconv2d_nchwc's compute (the loop program the kernels lower) with a data zero point, reading the
    correction input: numpy's integer convolution of the centred data."""
    for opdef in (QCONV2D_NCHWC, QCONV2D_WEIGHT_PACK, DOT_ZERO_POINT_CORRECTION):  # the CPU layer's
        try:
            ops.get(opdef.name)
        except Error:
            ops.registry.register(opdef, "nnvm-cpu-schedules")
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (1, 16, 5, 5)).astype(np.uint8)
    w = rng.integers(-128, 128, (16, 16, 3, 3)).astype(np.int8)
    (packed,) = ops.evaluate("qconv2d_weight_pack", [w], {"lanes": LANES, "in_block": 16})
    (correction,) = ops.evaluate("dot_zero_point_correction", [packed], {"zero_point": 9})
    attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "kernel": (3, 3), "channels": 16,
             "lanes": LANES, "data_zero_point": 9}
    data = x.transpose(0, 2, 3, 1)[:, None]  # NCHW16c with one block
    (got,) = ops.run("qconv2d_nchwc", [data, packed, correction], attrs)
    want = int_conv(x.astype(np.int64) - 9, w, 1).transpose(0, 2, 3, 1)[:, None]
    assert np.array_equal(got, want), f"max |diff| {np.abs(got - want).max()}"


def test_a_residual_add_joins_its_convolution_and_takes_the_shortcuts_dequantize():
    """Fusion: the add joins the convolution's group although its first operand is the shortcut, and the
    shortcut's lone dequantize comes along (the kernel reads its bytes); a lone float relu does not."""
    rng = np.random.default_rng(2)
    graph = residual_block(rng)
    fused = builtin.fuse_ops(graph)
    group = next(g for g in fused.groups if "c2" in g)
    assert {"c2", "r2", "d1", "d2", "add", "q"} <= set(group), fused.groups
    float_graph = Graph(
        [Node("relu", "shortcut", ("a",), ("s",), {}),
         Node("conv2d", "conv", ("b", "w"), ("c",), {}),
         Node("add", "add", ("s", "c"), ("y",), {})],
        ("a", "b"), ("y",), {"w": np.ones((4, 4, 1, 1), np.float32)},
        {"a": TensorType((1, 4, 3, 3), "float32"), "b": TensorType((1, 4, 3, 3), "float32")})
    groups = builtin.fuse_ops(builtin.infer_types(float_graph)).groups
    assert ("conv", "add") in groups and ("shortcut",) in groups, groups


def test_a_downsample_shortcut_hands_its_dequantize_to_the_add():
    """A shortcut made by a convolution of its own (ResNet's downsample): the add joins one convolution's
    group and the other's dequantize, the last of its group, moves to it, so that kernel writes uint8
    (its requantize's bytes) and the residual kernel reads them, not a float32 copy four times the size."""
    rng = np.random.default_rng(3)
    block = residual_block(rng)
    w3 = rng.integers(-127, 128, (16, 16, 1, 1)).astype(np.int8)
    s3 = rng.uniform(1e-3, 1e-2, 16).astype(np.float32)
    nodes = [n for n in block.nodes if n.name != "d1"]
    down = [Node("qconv2d", "c3", ("x", "w3"), ("c3",), {"data_zero_point": 3}),
            Node("requantize", "r3", ("c3", "s3"), ("r3",), {"zero_point": 1, "out_dtype": "uint8"}),
            Node("dequantize", "d1", ("r3",), ("d1",), {"scale": 0.05, "zero_point": 1})]
    graph = builtin.infer_types(Graph(down + nodes, ("x",), ("y",), {**block.params, "w3": w3, "s3": s3},
                                      {"x": TensorType((1, 16, 6, 6), "uint8")}))
    fused = builtin.fuse_ops(graph)
    group = next(g for g in fused.groups if "add" in g)
    assert {"d1", "d2", "q"} <= set(group), fused.groups
    last = {g[-1] for g in fused.groups if g is not group}
    assert last == {"r1", "r2", "r3"} - set(group), f"a group writes float32 between kernels: {fused.groups}"
    assert sorted(n for g in fused.groups for n in g) == sorted(n.name for n in graph.nodes)

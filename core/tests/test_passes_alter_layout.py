"""alter_op_layout and the blocked-layout operators: the graph after, and the same numbers as numpy.

The pass is driven by a test ``choose`` (what a backend's ``nnvm_alter_op_layout`` answers), so these
tests need no backend plugin. References are direct numpy convolutions, not our own other output.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.errors import Error
from nnvm.graph.evaluate import evaluate_graph
from nnvm.graph.ir import Graph, Node, TensorType
from nnvm.ops.blocked_layout import from_primal, to_primal, transformed_shape
from nnvm.ops.registry import get_op
from nnvm.passes import builtin
from nnvm.passes.alter_op_layout import AlteredNode, alter_op_layout, cancel_layout_transforms

BLOCK = 4


def numpy_conv(x, w, stride=1, pad=0, groups=1):
    """Direct NCHW/OIHW convolution, the textbook loop over kernel taps."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow))
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                rows = slice(i, i + stride * (oh - 1) + 1, stride)
                cols = slice(j, j + stride * (ow - 1) + 1, stride)
                patch = x[:, g * cg:(g + 1) * cg, rows, cols]
                taps = w[g * og:(g + 1) * og, :, i, j]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, taps)
    return out


def block_conv(node, in_types):
    """A backend in miniature: every conv2d in NCHW4c (plain NCHW data when channels do not divide)."""
    if node.op != "conv2d":
        return None
    data, weight = in_types
    groups = dict(node.attrs).get("groups", 1)
    c, o = data.shape[1], weight.shape[0]
    if o % BLOCK:
        return None
    data_layout = f"NCHW{BLOCK}c" if c % BLOCK == 0 else "NCHW"
    ic = BLOCK if c % BLOCK == 0 else 1
    weight_layout = f"OIHW1i{BLOCK}o" if groups > 1 else f"OIHW{ic}i{BLOCK}o"
    return AlteredNode("conv2d_nchwc", dict(node.attrs), (("NCHW", data_layout), ("OIHW", weight_layout)),
                       (("NCHW", f"NCHW{BLOCK}c"),))


def resnet_block(rng, outputs=("y", "r2")):
    """x -> conv3x3 -> bias -> relu -> depthwise conv -> bn scale/shift -> + residual -> relu -> max pool
    -> global pool: the chain a ResNet or MobileNet stage is made of, with a 3-channel input."""
    p = {
        "w0": rng.standard_normal((8, 3, 3, 3)).astype(np.float32),
        "b0": rng.standard_normal(8).astype(np.float32),
        "w1": rng.standard_normal((8, 1, 3, 3)).astype(np.float32),
        "s1": rng.standard_normal((1, 8, 1, 1)).astype(np.float32),
        "t1": rng.standard_normal((8, 1, 1)).astype(np.float32),
        "w2": rng.standard_normal((8, 8, 1, 1)).astype(np.float32),
        "half": np.array(0.5, np.float32),
    }
    nodes = [
        Node("conv2d", "c0", ("x", "w0"), ("c0",), {"padding": (1, 1, 1, 1)}),
        Node("bias_add", "b0", ("c0", "b0"), ("b0o",), {}),
        Node("relu", "r0", ("b0o",), ("r0",), {}),
        Node("conv2d", "c1", ("r0", "w1"), ("c1",), {"padding": (1, 1, 1, 1), "groups": 8}),
        Node("multiply", "m1", ("c1", "s1"), ("m1",), {}),
        Node("add", "a1", ("m1", "t1"), ("a1",), {}),
        Node("conv2d", "c2", ("a1", "w2"), ("c2",), {}),
        Node("add", "res", ("c2", "r0"), ("res",), {}),
        Node("multiply", "scale", ("res", "half"), ("sc",), {}),
        Node("relu", "r2", ("sc",), ("r2",), {}),
        Node("max_pool2d", "pool", ("r2",), ("pool",), {"pool_size": (2, 2), "strides": (2, 2)}),
        Node("global_avg_pool2d", "gap", ("pool",), ("y",), {}),
    ]
    graph = Graph(nodes, ("x",), outputs, p, {"x": TensorType((1, 3, 8, 8), "float32")})
    return builtin.infer_types(graph)


def reference(x, p):
    r0 = np.maximum(numpy_conv(x, p["w0"], pad=1) + p["b0"].reshape(1, -1, 1, 1), 0)
    a1 = numpy_conv(r0, p["w1"], pad=1, groups=8) * p["s1"] + p["t1"]
    r2 = np.maximum((numpy_conv(a1, p["w2"]) + r0) * 0.5, 0)
    pool = r2.reshape(1, 8, 4, 2, 4, 2).max(axis=(3, 5))
    return [pool.mean(axis=(2, 3), keepdims=True), r2]


def test_chain_stays_blocked_between_convolutions():
    graph = resnet_block(np.random.default_rng(0))
    after = alter_op_layout(graph, choose=block_conv)
    ops = [n.op for n in after.nodes]
    assert ops.count("conv2d_nchwc") == 3 and "conv2d" not in ops
    activation_transforms = [n for n in after.nodes if n.op == "layout_transform"
                             and n.inputs[0] not in after.params and n.inputs[0] not in graph.params
                             and not n.inputs[0].startswith(("w", "b0", "s1", "t1"))]
    # One transform back to NCHW, where the blocked chain meets the pool (and the graph output r2).
    # The 3-channel input is read as plain NCHW, so no transform at the model input.
    assert len(activation_transforms) == 1, [(n.name, n.attrs) for n in activation_transforms]
    assert activation_transforms[0].attrs["dst_layout"] == "NCHW"
    assert after.outputs == graph.outputs
    assert "max_pool2d" in ops, "r2 is needed in NCHW anyway (a graph output): pool there"
    assert graph.nodes[0].op == "conv2d", "the pass mutated its input"


def test_max_pool_follows_a_blocked_input():
    graph = resnet_block(np.random.default_rng(0), outputs=("y",))
    after = alter_op_layout(graph, choose=block_conv)
    ops = [n.op for n in after.nodes]
    assert "max_pool2d_nchwc" in ops and "max_pool2d" not in ops
    transforms = [n for n in after.nodes if n.op == "layout_transform" and n.attrs["dst_layout"] == "NCHW"]
    assert [n.inputs[0] for n in transforms] == ["pool_NCHW4c"], "only the global pool reads NCHW"
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (got,) = evaluate_graph(builtin.fold_constants(after), {"x": x})
    want = reference(x, graph.params)[0]
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5


def test_numbers_equal_numpy_before_and_after():
    rng = np.random.default_rng(1)
    graph = resnet_block(rng)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = reference(x, graph.params)
    after = alter_op_layout(graph, choose=block_conv)
    folded = builtin.eliminate_dead_code(builtin.fold_constants(after))
    for name, g in (("before", graph), ("after", after), ("folded", folded)):
        got = evaluate_graph(g, {"x": x})
        for k, (a, b) in enumerate(zip(got, want)):
            err = np.abs(a - b).max() / np.abs(b).max()
            assert err < 1e-5, f"{name}: output {k} max relative error {err:.2e}"


def test_weight_transforms_fold_to_pretransformed_weights():
    graph = resnet_block(np.random.default_rng(2))
    folded = builtin.eliminate_dead_code(builtin.fold_constants(alter_op_layout(graph, choose=block_conv)))
    assert not [n for n in folded.nodes
                if n.op in ("layout_transform", "reshape") and n.inputs[0] in folded.params]
    shapes = {k: v.shape for k, v in folded.params.items()}
    assert (2, 1, 3, 3, 3, 4) not in shapes.values()  # w0 is read by plain NCHW data: OIHW1i4o
    assert (2, 3, 3, 3, 1, 4) in shapes.values()
    assert (2, 1, 3, 3, 1, 4) in shapes.values()  # depthwise w1 as OIHW1i4o
    assert (2, 2, 1, 1, 4, 4) in shapes.values()  # w2 as OIHW4i4o
    weights = sum(v.size for v in folded.params.values())
    before = sum(v.size for v in graph.params.values())
    assert weights == before, "pre-transformed weights hold the same numbers, no more"


def test_transform_followed_by_its_inverse_disappears():
    x = TensorType((1, 8, 4, 4), "float32")
    nodes = [
        Node("layout_transform", "t0", ("x",), ("xb",), {"src_layout": "NCHW", "dst_layout": "NCHW4c"}),
        Node("layout_transform", "t1", ("xb",), ("xn",), {"src_layout": "NCHW4c", "dst_layout": "NCHW"}),
        Node("relu", "r", ("xn",), ("y",), {}),
    ]
    graph = builtin.infer_types(Graph(nodes, ("x",), ("y",), {}, {"x": x}))
    after = cancel_layout_transforms(graph)
    assert [n.op for n in after.nodes] == ["relu"] and after.nodes[0].inputs == ("x",)
    assert len(graph.nodes) == 3


def test_no_choice_leaves_graph_alone():
    graph = resnet_block(np.random.default_rng(3))
    assert alter_op_layout(graph, choose=lambda node, types: None) is graph


@pytest.mark.parametrize("src,dst,shape", [
    ("NCHW", "NCHW4c", (2, 8, 3, 5)),
    ("NCHW8c", "NCHW4c", (1, 2, 3, 3, 8)),
    ("NCHW4c", "NCHW", (1, 3, 2, 2, 4)),
    ("OIHW", "OIHW4i8o", (16, 8, 3, 3)),
    ("NCHW", "NHWC", (1, 3, 4, 5)),
])
def test_layout_transform_matches_numpy(ops, src, dst, shape):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    want = from_primal(to_primal(x, src), "".join(c for c in src if c.isupper()), dst)
    # An independent check of the index convention on one element: NCHW -> NCHW4c puts channel c at
    # [c // 4, ..., c % 4].
    if (src, dst) == ("NCHW", "NCHW4c"):
        assert want[1, 1, 2, 3, 2] == x[1, 6, 2, 3]
    ops.check("layout_transform", [x], {"src_layout": src, "dst_layout": dst}, want, rtol=0, atol=0)


def test_layout_transform_pads_and_crops_partial_blocks(ops):
    """With ``shape``, 6 channels go into two blocks of 4 (the last two lanes zero) and come back."""
    x = np.arange(36, dtype=np.float32).reshape(1, 6, 2, 3) + 1
    blocked = np.zeros((1, 2, 2, 3, 4), np.float32)
    for c in range(6):
        blocked[:, c // 4, :, :, c % 4] = x[:, c]
    ops.check("layout_transform", [x], {"src_layout": "NCHW", "dst_layout": "NCHW4c",
                                        "shape": (1, 2, 2, 3, 4)}, blocked, rtol=0, atol=0)
    garbage = blocked.copy()
    garbage[:, 1, :, :, 2:] = 7.0  # what a follower may leave in the padding: cropped away
    ops.check("layout_transform", [garbage], {"src_layout": "NCHW4c", "dst_layout": "NCHW",
                                              "shape": (1, 6, 2, 3)}, x, rtol=0, atol=0)
    # 12 channels stored as 2 blocks of 8 (4 padding lanes) -> 3 blocks of 4, padding dropped.
    x12 = np.arange(24, dtype=np.float32).reshape(1, 12, 1, 2)
    eight = np.full((1, 2, 1, 2, 8), 9.0, np.float32)
    for c in range(12):
        eight[:, c // 8, :, :, c % 8] = x12[:, c]
    four = np.ascontiguousarray(x12.reshape(1, 3, 4, 1, 2).transpose(0, 1, 3, 4, 2))
    ops.check("layout_transform", [eight], {"src_layout": "NCHW8c", "dst_layout": "NCHW4c",
                                            "shape": (1, 3, 1, 2, 4)}, four, rtol=0, atol=0)
    with pytest.raises(Error, match="not a NCHW4c shape"):
        get_op("layout_transform").infer_type([TensorType((1, 6, 2, 3), "float32")],
                                               {"src_layout": "NCHW", "dst_layout": "NCHW4c",
                                                "shape": (1, 2, 2, 3, 8)})


def test_layout_errors_name_the_problem():
    with pytest.raises(Error, match="cannot be split"):
        transformed_shape((1, 6, 2, 2), "NCHW", "NCHW4c")
    with pytest.raises(Error, match="primal axes"):
        transformed_shape((1, 6, 2, 2), "NCHW", "NCDW")
    with pytest.raises(Error, match="not a layout"):
        transformed_shape((1, 6, 2, 2), "NC-HW", "NCHW")


def test_max_pool2d_nchwc_matches_numpy(ops):
    x = np.random.default_rng(6).standard_normal((1, 8, 5, 5)).astype(np.float32)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.stack([padded[:, :, 2 * i:2 * i + 3, :] for i in range(3)], axis=2)
    want = np.stack([want[..., 2 * j:2 * j + 3] for j in range(3)], axis=3).max(axis=(4, 5))
    attrs = {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}
    ops.check("max_pool2d_nchwc", [np.ascontiguousarray(from_primal(x, "NCHW", "NCHW4c"))], attrs,
              from_primal(want, "NCHW", "NCHW4c"), rtol=0, atol=0)


@pytest.mark.parametrize("c,o,stride,pad,groups,blocked", [
    (8, 4, 1, 1, 1, True), (3, 4, 2, 1, 1, False), (8, 8, 2, 1, 8, True), (4, 8, 1, 0, 1, True)])
def test_conv2d_nchwc_matches_numpy_conv(ops, c, o, stride, pad, groups, blocked):
    rng = np.random.default_rng(c + o + stride)
    x = rng.standard_normal((1, c, 4, 4)).astype(np.float32)
    w = rng.standard_normal((o, c // groups, 3, 3)).astype(np.float32)
    want = numpy_conv(x, w, stride, pad, groups)
    ic = BLOCK if blocked else 1
    xb = from_primal(x, "NCHW", f"NCHW{ic}c") if blocked else x
    wb = from_primal(w, "OIHW", f"OIHW{1 if groups > 1 else ic}i{BLOCK}o")
    attrs = {"strides": (stride, stride), "padding": (pad,) * 4, "groups": groups}
    ops.check("conv2d_nchwc", [np.ascontiguousarray(xb), np.ascontiguousarray(wb)], attrs,
              from_primal(want.astype(np.float32), "NCHW", f"NCHW{BLOCK}c"), rtol=1e-4, atol=1e-4)


def test_depthwise_conv2d_nchwc_on_plain_nchw_data(ops):
    """Depthwise over rank-4 NCHW data (blocks of 1 in and out) computes, not only type-checks."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 6, 5, 5)).astype(np.float32)
    w = rng.standard_normal((6, 1, 3, 3)).astype(np.float32)
    want = numpy_conv(x, w, 1, 1, 6)
    wb = np.ascontiguousarray(from_primal(w, "OIHW", "OIHW1i1o"))
    attrs = {"strides": (1, 1), "padding": (1,) * 4, "groups": 6}
    ops.check("conv2d_nchwc", [x, wb], attrs, from_primal(want.astype(np.float32), "NCHW", "NCHW1c"),
              rtol=1e-4, atol=1e-4)


# Lavin and Gray's G for F(2x2, 3x3) and F(4x4, 3x3), typed from the paper (not from nnvm.ops.blocked_layout).
LAVIN_G = {2: np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
           4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                        [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}


@pytest.mark.parametrize("tile,hw", [(2, (3, 2)), (4, (7, 5))])
def test_winograd_matches_numpy_conv(ops, tile, hw):
    """F(m x m, 3x3) against a direct numpy convolution, odd sizes (a partial last tile) included."""
    rng = np.random.default_rng(hw[0])
    x = rng.standard_normal((1, 4, *hw)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    want = numpy_conv(x, w, 1, 1)
    (by_eval,) = ops.evaluate("conv2d_winograd_nchwc", [from_primal(x, "NCHW", "NCHW4c"), ops.evaluate(
        "winograd_weight_transform", [from_primal(w, "OIHW", "OIHW4i4o")], {"tile": tile})[0]],
        {"padding": (1, 1, 1, 1)})
    assert np.abs(to_primal(by_eval, "NCHW4c") - want).max() / np.abs(want).max() < 1e-5
    wb = np.ascontiguousarray(from_primal(w, "OIHW", "OIHW4i4o"))
    g = LAVIN_G[tile]
    u = np.einsum("eh,oihwab,nw->enoiab", g, wb, g).astype(np.float32)
    ops.check("winograd_weight_transform", [wb], {"tile": tile}, u, rtol=1e-5, atol=1e-5)
    xb = np.ascontiguousarray(from_primal(x, "NCHW", "NCHW4c"))
    ops.check("conv2d_winograd_nchwc", [xb, u], {"padding": (1, 1, 1, 1)},
              from_primal(want.astype(np.float32), "NCHW", "NCHW4c"), rtol=1e-4, atol=1e-4)


def test_prepared_weight_is_folded_winograd():
    """A backend answer with ``prepare``: the weight is re-laid-out, then Winograd-transformed, and both
    steps fold into one stored weight; the numbers stay those of a direct numpy convolution."""

    def winograd(node, in_types):
        if node.op != "conv2d":
            return None
        return AlteredNode("conv2d_winograd_nchwc", {"padding": (1, 1, 1, 1)},
                           (("NCHW", "NCHW4c"), ("OIHW", "OIHW4i4o")), (("NCHW", "NCHW4c"),),
                           prepare=(None, ("winograd_weight_transform", {})))

    rng = np.random.default_rng(9)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [Node("conv2d", "c", ("x", "w"), ("c",), {"padding": (1, 1, 1, 1)}),
             Node("relu", "r", ("c",), ("y",), {})]
    x_type = {"x": TensorType((1, 4, 6, 6), "float32")}
    graph = builtin.infer_types(Graph(nodes, ("x",), ("y",), {"w": w}, x_type))
    folded = builtin.eliminate_dead_code(builtin.fold_constants(alter_op_layout(graph, choose=winograd)))
    assert [n.op for n in folded.nodes] == ["layout_transform", "conv2d_winograd_nchwc", "relu",
                                             "layout_transform"]
    assert [v.shape for v in folded.params.values()] == [(4, 4, 1, 1, 4, 4)]
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    (got,) = evaluate_graph(folded, {"x": x})
    want = np.maximum(numpy_conv(x, w, 1, 1), 0)
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-5

"""Convolution, dense, matmul, normalizations, softmax and LRN against onnxruntime and numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

RNG = np.random.default_rng(5)


def _f(*shape, low=-1.0, high=1.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


CONV_CASES = [
    # (data shape, weight shape, attrs)
    ((1, 3, 6, 6), (4, 3, 3, 3), {}),
    ((2, 2, 5, 6), (3, 2, 3, 2), {"padding": (1, 0, 2, 1), "strides": (2, 1)}),
    ((1, 2, 7, 7), (2, 2, 3, 3), {"dilation": (2, 2), "padding": (2, 2, 2, 2)}),
    ((1, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": (1, 1, 1, 1)}),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"groups": 4, "padding": (1, 1, 1, 1), "strides": (2, 2)}),  # depthwise
    ((1, 3, 4, 4), (6, 1, 1, 1), {"groups": 3}),  # channel multiplier 2
    ((1, 2, 5, 5), (2, 2, 1, 1), {"strides": (2, 2)}),
]


def _onnx_conv_attrs(weight_shape, attrs):
    pt, pl, pb, pr = attrs.get("padding", (0, 0, 0, 0))
    return {"kernel_shape": list(weight_shape[2:]), "pads": [pt, pl, pb, pr],
            "strides": list(attrs.get("strides", (1, 1))), "dilations": list(attrs.get("dilation", (1, 1))),
            "group": attrs.get("groups", 1)}


@pytest.mark.parametrize("dshape,wshape,attrs", CONV_CASES, ids=[str(c[2]) for c in CONV_CASES])
def test_conv2d_against_onnxruntime(ops, onnx_ref, dshape, wshape, attrs):
    x, w = _f(*dshape), _f(*wshape)
    want = onnx_ref("Conv", [x, w], _onnx_conv_attrs(wshape, attrs))
    ops.check("conv2d", [x, w], attrs, want, rtol=1e-4, atol=1e-5)


def test_conv2d_stages_are_recognizable(ops):
    x, w = _f(1, 4, 5, 5), _f(4, 1, 3, 3)
    _, _, outs = ops.lower("conv2d", [x, w], {"groups": 4, "padding": (1, 1, 1, 1)})
    conv = outs[0].op
    assert conv.tag == "conv2d" and conv.attrs["workload"]["depthwise"] and conv.attrs["groups"] == 4
    pad = [t.op for t in conv.input_tensors if t.op.name == "pad"]
    assert pad and pad[0].tag == "injective"
    _, _, outs = ops.lower("conv2d", [x, _f(4, 4, 3, 3)])
    assert all(t.op.name != "pad" for t in outs[0].op.input_tensors)  # no padding, no pad stage


def test_conv2d_without_inlining_the_pad_stage(ops, onnx_ref):
    x, w = _f(1, 2, 4, 4), _f(2, 2, 3, 3)
    want = onnx_ref("Conv", [x, w], _onnx_conv_attrs(w.shape, {"padding": (1, 1, 1, 1)}))
    ops.check("conv2d", [x, w], {"padding": (1, 1, 1, 1)}, want, rtol=1e-4, atol=1e-5, schedule="root")


def test_conv2d_errors(ops):
    with pytest.raises(nnvm.Error, match=r"conv2d: the weight expects 4 input channels "
                                         r"\(2 per group x 2 groups\) but the data has 6"):
        ops.infer("conv2d", [_f(1, 6, 5, 5), _f(4, 2, 3, 3)], {"groups": 2})
    with pytest.raises(nnvm.Error, match="conv2d: groups=4 must divide both the 6 input channels"):
        ops.infer("conv2d", [_f(1, 6, 5, 5), _f(4, 2, 3, 3)], {"groups": 4})
    with pytest.raises(nnvm.Error, match=r"conv2d expects a 4-D NCHW data, got shape \(6, 5, 5\)"):
        ops.infer("conv2d", [_f(6, 5, 5), _f(4, 6, 3, 3)])
    with pytest.raises(nnvm.Error, match="conv2d: the 7x7 kernel"):
        ops.infer("conv2d", [_f(1, 1, 5, 5), _f(1, 1, 7, 7)])
    with pytest.raises(nnvm.Error, match="conv2d: strides must have 2 values"):
        ops.infer("conv2d", [_f(1, 1, 5, 5), _f(1, 1, 3, 3)], {"strides": (1,)})


def test_dense_against_numpy(ops):
    x, w = _f(3, 5), _f(4, 5)
    ops.check("dense", [x, w], None, x.astype(np.float64) @ w.T.astype(np.float64), rtol=1e-5, atol=1e-6)
    with pytest.raises(nnvm.Error, match="dense: the data has K=5 but the weight"):
        ops.infer("dense", [x, _f(4, 6)])


MATMUL_SHAPES = [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (3, 4, 2)), ((4,), (4, 3)),
                 ((2, 3, 4), (4,)), ((4,), (4,)), ((1, 2, 3), (2, 3, 2))]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
def test_matmul_against_numpy(ops, sa, sb):
    a, b = _f(*sa), _f(*sb)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    ops.check("matmul", [a, b], None, want, rtol=1e-5, atol=1e-6)


def test_matmul_errors(ops):
    with pytest.raises(nnvm.Error, match=r"matmul: the contracted sizes differ: \(2, 3\) @ \(4, 2\)"):
        ops.infer("matmul", [_f(2, 3), _f(4, 2)])
    with pytest.raises(nnvm.Error, match="matmul: shapes"):
        ops.infer("matmul", [_f(2, 2, 3), _f(3, 3, 2)])


def test_batch_norm_against_onnxruntime(ops, onnx_ref):
    x = _f(2, 3, 4, 2)
    gamma, beta, mean = _f(3), _f(3), _f(3)
    var = _f(3, low=0.5, high=2.0)
    want = onnx_ref("BatchNormalization", [x, gamma, beta, mean, var], {"epsilon": 1e-3})
    ops.check("batch_norm", [x, gamma, beta, mean, var], {"epsilon": 1e-3}, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(nnvm.Error, match=r"batch_norm: moving_var must have shape \(3,\)"):
        ops.infer("batch_norm", [x, gamma, beta, mean, _f(4)])


def test_batch_norm_on_the_last_axis(ops):
    x = _f(2, 5, 3)
    g, b, m = _f(3), _f(3), _f(3)
    v = _f(3, low=0.5, high=2)
    want = (x - m) / np.sqrt(v + 1e-5) * g + b
    ops.check("batch_norm", [x, g, b, m, v], {"axis": -1}, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name,onnx_op", [("softmax", "Softmax"), ("log_softmax", "LogSoftmax")])
@pytest.mark.parametrize("shape,axis", [((2, 5), -1), ((2, 3, 4), 1), ((3, 4), 0), ((6,), 0)])
def test_softmax_against_onnxruntime(ops, onnx_ref, name, onnx_op, shape, axis):
    x = _f(*shape, low=-20, high=20)
    want = onnx_ref(onnx_op, [x], {"axis": axis})
    ops.check(name, [x], {"axis": axis}, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn_against_onnxruntime(ops, onnx_ref, size):
    x = _f(1, 6, 3, 3, low=-3, high=3)
    attrs = {"size": size, "alpha": 0.2, "beta": 0.6, "bias": 1.5}
    want = onnx_ref("LRN", [x], attrs)
    ops.check("lrn", [x], attrs, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [2, 4])
def test_lrn_even_size_follows_the_onnx_formula(ops, size):
    """onnxruntime only takes odd sizes; the ONNX spec's window is [c - (size-1)//2, c + ceil((size-1)/2)]."""
    x = _f(2, 5, 2, 3, low=-3, high=3).astype(np.float64)
    want = np.empty_like(x)
    for c in range(5):
        lo, hi = max(0, c - (size - 1) // 2), min(4, c + size // 2)
        sq = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        want[:, c] = x[:, c] / (1.0 + 1e-4 / size * sq) ** 0.75
    ops.check("lrn", [x.astype(np.float32)], {"size": size}, want.astype(np.float32), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((2, 3, 4), -1), ((2, 3, 4), 1), ((3, 5), 0)])
def test_layer_norm_against_onnxruntime(ops, onnx_ref, shape, axis):
    x = _f(*shape, low=-3, high=3)
    norm = shape[axis % len(shape):]
    gamma, beta = _f(*norm), _f(*norm)
    want = onnx_ref("LayerNormalization", [x, gamma, beta], {"axis": axis, "epsilon": 1e-4})
    ops.check("layer_norm", [x, gamma, beta], {"axis": axis, "epsilon": 1e-4}, want[0], rtol=1e-4, atol=1e-5)


def test_layer_norm_without_beta_and_with_a_broadcast_gamma(ops, onnx_ref):
    x = _f(2, 3, 4, low=-3, high=3)
    gamma = _f(4)
    want = onnx_ref("LayerNormalization", [x, gamma], {"axis": 1})
    ops.check("layer_norm", [x, gamma], {"axis": 1}, want[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(nnvm.Error, match=r"layer_norm: gamma must have shape \(4,\)"):
        ops.infer("layer_norm", [x, _f(3)])


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 2, 6)])
def test_instance_norm_against_onnxruntime(ops, onnx_ref, shape):
    x = _f(*shape, low=-3, high=3)
    gamma, beta = _f(shape[1]), _f(shape[1])
    want = onnx_ref("InstanceNormalization", [x, gamma, beta], {"epsilon": 1e-5})
    ops.check("instance_norm", [x, gamma, beta], None, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(nnvm.Error, match="instance_norm: beta must have shape"):
        ops.infer("instance_norm", [x, gamma, _f(7)])


GENERIC_CASES = [
    ("conv2d", "Conv", [(1, 4, 5, 5), (4, 2, 3, 3)],
     {"groups": 2, "padding": (1, 1, 1, 1), "strides": (2, 1)},
     {"group": 2, "pads": [1, 1, 1, 1], "strides": [2, 1]}),
    ("max_pool2d", "MaxPool", [(1, 2, 5, 5)],
     {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True},
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ("avg_pool2d", "AveragePool", [(1, 2, 5, 5)], {"pool_size": (3, 3), "padding": (1, 1, 1, 1)},
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("softmax", "Softmax", [(3, 5)], {"axis": 0}, {"axis": 0}),
    ("layer_norm", "LayerNormalization", [(2, 3, 4), (3, 4), (3, 4)], {"axis": 1}, {"axis": 1}),
    ("instance_norm", "InstanceNormalization", [(1, 2, 3, 4), (2,), (2,)], {}, {}),
    ("lrn", "LRN", [(1, 5, 2, 2)], {"size": 3}, {"size": 3}),
    ("global_avg_pool2d", "GlobalAveragePool", [(1, 3, 4, 4)], {}, {}),
]


@pytest.mark.parametrize("name,onnx_op,shapes,attrs,onnx_attrs", GENERIC_CASES,
                         ids=[c[0] for c in GENERIC_CASES])
def test_under_the_generic_schedule(ops, onnx_ref, name, onnx_op, shapes, attrs, onnx_attrs):
    """The schedule the compiler uses by default (fused, parallel, vectorized loops) keeps the numbers."""
    arrays = [_f(*s) for s in shapes]
    want = onnx_ref(onnx_op, arrays, onnx_attrs)
    ops.check(name, arrays, attrs, want[0], rtol=1e-4, atol=1e-5, schedule="generic")

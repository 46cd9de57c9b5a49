"""Pooling against onnxruntime: padding, strides, dilation, ceil_mode and count_include_pad."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

RNG = np.random.default_rng(9)

POOL_CASES = [
    # (data shape, attrs)
    ((1, 2, 5, 5), {"pool_size": (2, 2), "strides": (2, 2)}),
    ((1, 2, 5, 5), {"pool_size": (2, 2), "strides": (2, 2), "ceil_mode": True}),
    ((2, 1, 6, 7), {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    ((1, 2, 6, 7), {"pool_size": (3, 2), "strides": (2, 3), "padding": (1, 0, 2, 1), "ceil_mode": True}),
    ((1, 1, 7, 7), {"pool_size": (2, 2), "strides": (1, 1), "dilation": (2, 2), "padding": (1, 1, 1, 1)}),
    ((1, 1, 6, 6), {"pool_size": (3, 3), "strides": (3, 3), "padding": (1, 1, 1, 1), "ceil_mode": True}),
    ((1, 2, 4, 4), {"pool_size": (3, 3), "strides": (2, 2), "padding": (2, 2, 2, 2), "ceil_mode": True}),
    ((1, 1, 3, 3), {"pool_size": (3, 3)}),
]


def _onnx_attrs(attrs):
    out = {"kernel_shape": list(attrs["pool_size"]), "strides": list(attrs.get("strides", (1, 1))),
           "pads": list(attrs.get("padding", (0, 0, 0, 0))), "ceil_mode": int(attrs.get("ceil_mode", False))}
    if "dilation" in attrs:
        out["dilations"] = list(attrs["dilation"])
    return out


@pytest.mark.parametrize("shape,attrs", POOL_CASES, ids=[str(c[1]) for c in POOL_CASES])
def test_max_pool2d_against_onnxruntime(ops, onnx_ref, shape, attrs):
    x = RNG.uniform(-3, 3, shape).astype(np.float32)
    want = onnx_ref("MaxPool", [x], _onnx_attrs(attrs))
    ops.check("max_pool2d", [x], attrs, want[0])


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("shape,attrs", POOL_CASES, ids=[str(c[1]) for c in POOL_CASES])
def test_avg_pool2d_against_onnxruntime(ops, onnx_ref, shape, attrs, include):
    x = RNG.uniform(-3, 3, shape).astype(np.float32)
    want = onnx_ref("AveragePool", [x], {**_onnx_attrs(attrs), "count_include_pad": int(include)})
    ops.check("avg_pool2d", [x], {**attrs, "count_include_pad": include}, want[0], rtol=1e-5, atol=1e-6)


def test_max_pool2d_of_integers(ops):
    x = RNG.integers(-50, 50, (1, 2, 4, 4)).astype(np.int32)
    want = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
    ops.check("max_pool2d", [x], {"pool_size": (2, 2), "strides": (2, 2)}, want)


@pytest.mark.parametrize("name,onnx_op", [("global_avg_pool2d", "GlobalAveragePool"),
                                          ("global_max_pool2d", "GlobalMaxPool")])
def test_global_pools_against_onnxruntime(ops, onnx_ref, name, onnx_op):
    x = RNG.uniform(-3, 3, (2, 3, 4, 5)).astype(np.float32)
    ops.check(name, [x], None, onnx_ref(onnx_op, [x]), rtol=1e-5, atol=1e-6)


def test_pool_errors(ops):
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(nnvm.Error, match="max_pool2d: the 5x5 window"):
        ops.infer("max_pool2d", [x], {"pool_size": (5, 5)})
    with pytest.raises(nnvm.Error, match=r"avg_pool2d expects a 4-D NCHW data, got shape \(4, 4\)"):
        ops.infer("avg_pool2d", [x[0, 0]], {"pool_size": (2, 2)})
    with pytest.raises(nnvm.Error, match="padding .* must be smaller than the window"):
        ops.infer("max_pool2d", [x], {"pool_size": (2, 2), "padding": (2, 0, 0, 0)})
    with pytest.raises(nnvm.Error, match="missing required attribute 'pool_size'"):
        ops.get("max_pool2d").normalize_attrs({}, "pool1")

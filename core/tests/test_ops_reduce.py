"""Reductions against numpy (and onnxruntime for argmax's tie-breaking)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

RNG = np.random.default_rng(3)
X = RNG.uniform(-2, 2, (2, 3, 4)).astype(np.float32)

REDUCERS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}
AXES = [None, (0,), (1,), (-1,), (0, 2), (2, 0, 1), ()]


@pytest.mark.parametrize("name", list(REDUCERS))
@pytest.mark.parametrize("axis", AXES, ids=[str(a) for a in AXES])
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_against_numpy(ops, name, axis, keepdims):
    want = REDUCERS[name](X.astype(np.float64), axis=axis, keepdims=keepdims).astype(np.float32)
    ops.check(name, [X], {"axis": axis, "keepdims": keepdims}, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod", "mean"])
def test_integer_reduce(ops, name):
    x = RNG.integers(-5, 6, (3, 4)).astype(np.int32)
    want = REDUCERS[name](x, axis=(1,), keepdims=False)
    if name == "mean":
        want = np.trunc(x.sum(axis=1) / 4)
    ops.check(name, [x], {"axis": (1,)}, want.astype(np.int32))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, True, False), (1, False, False), (-1, True, True),
                                                 (2, False, True)])
def test_arg_reduce_against_onnxruntime(ops, onnx_ref, name, axis, keepdims, last):
    x = RNG.integers(0, 3, (2, 3, 4)).astype(np.float32)  # many ties
    onnx_op = "ArgMax" if name == "argmax" else "ArgMin"
    want = onnx_ref(onnx_op, [x], {"axis": axis, "keepdims": int(keepdims), "select_last_index": int(last)})
    ops.check(name, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, want)


def test_argmax_of_integers(ops):
    x = RNG.integers(-100, 100, (3, 5)).astype(np.int64)
    ops.check("argmax", [x], {"axis": 1, "keepdims": False}, np.argmax(x, axis=1))


def test_reduce_errors(ops):
    with pytest.raises(nnvm.Error, match="sum: axis 3 is out of range for a 3-D input"):
        ops.infer("sum", [X], {"axis": (3,)})
    with pytest.raises(nnvm.Error, match=r"sum: axis \(1, -2\) names an axis twice"):
        ops.infer("sum", [X], {"axis": (1, -2)})
    with pytest.raises(nnvm.Error, match="argmax: axis -4 is out of range"):
        ops.infer("argmax", [X], {"axis": -4})

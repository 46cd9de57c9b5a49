"""gather_elements, scatter_elements, cumsum and cumprod against numpy (interpreter and evaluate)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements_against_numpy(ops, axis):
    data = RNG.standard_normal((3, 4)).astype(np.float32)
    n = data.shape[axis]
    idx = RNG.integers(-n, n, size=(3, 4) if axis == 0 else (3, 2)).astype(np.int64)
    if axis == 0:
        idx = idx[:2]
    want = np.take_along_axis(data, np.where(idx < 0, idx + n, idx), axis=axis)
    ops.check("gather_elements", [data, idx], {"axis": axis}, want)


def _scatter_reference(data, idx, upd, axis, reduction):
    out = data.copy()
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    for pos in np.ndindex(*idx.shape):
        target = list(pos)
        target[axis] = idx[pos]
        target = tuple(target)
        u = upd[pos]
        out[target] = {"none": u, "add": out[target] + u, "mul": out[target] * u,
                       "max": max(out[target], u), "min": min(out[target], u)}[reduction]
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("axis", [0, 1])
def test_scatter_elements_against_a_sequential_loop(ops, reduction, axis):
    data = RNG.integers(-5, 5, size=(3, 4)).astype(np.int32)
    shape = (2, 4) if axis == 0 else (3, 2)
    idx = RNG.integers(-data.shape[axis], data.shape[axis], size=shape).astype(np.int64)
    upd = RNG.integers(-5, 5, size=shape).astype(np.int32)
    want = _scatter_reference(data, idx, upd, axis, reduction)
    ops.check("scatter_elements", [data, idx, upd], {"axis": axis, "reduction": reduction}, want)


def test_scatter_elements_repeated_indices_keep_the_last_update(ops):
    data = np.zeros((1, 5), np.float32)
    idx = np.array([[1, 3, 1]], np.int64)
    upd = np.array([[1.0, 2.0, 3.0]], np.float32)
    ops.check("scatter_elements", [data, idx, upd], {"axis": 1}, np.array([[0, 3, 0, 2, 0]], np.float32))


@pytest.mark.parametrize("name,fn,identity", [("cumsum", np.cumsum, 0), ("cumprod", np.cumprod, 1)])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_running_totals_against_numpy(ops, name, fn, identity, exclusive, reverse):
    x = RNG.integers(1, 4, size=(2, 5)).astype(np.int64)
    y = x[:, ::-1] if reverse else x
    want = fn(y, axis=1)
    if exclusive:
        want = np.concatenate([np.full((2, 1), identity), want[:, :-1]], axis=1)
    want = want[:, ::-1] if reverse else want
    ops.check(name, [x], {"axis": 1, "exclusive": exclusive, "reverse": reverse}, want)


def test_index_op_errors(ops):
    f = np.zeros((2, 3), np.float32)
    with pytest.raises(nnvm.Error, match="gather_elements: indices .* differ in rank"):
        ops.infer("gather_elements", [f, np.zeros((2,), np.int64)])
    with pytest.raises(nnvm.Error, match="scatter_elements: reduction 'sub'"):
        ops.infer("scatter_elements", [f, np.zeros((2, 3), np.int64), f], {"reduction": "sub"})

"""Binary broadcast operators, where, bias_add and prelu against numpy and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnvm

RNG = np.random.default_rng(11)


def _f(shape, low=-3.0, high=3.0):
    return RNG.uniform(low, high, shape).astype(np.float32)


def _i(shape, low=-9, high=9, dtype=np.int32):
    return RNG.integers(low, high, shape).astype(dtype)


def _b(shape):
    return RNG.random(shape) > 0.5


def _nonzero(a):
    return np.where(a == 0, 3, a).astype(a.dtype)


FLOAT_CASES = [
    ("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply), ("divide", np.divide),
    ("maximum", np.maximum), ("minimum", np.minimum), ("fmod", np.fmod),
    ("floor_mod", np.mod), ("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
    ("less_equal", np.less_equal), ("greater", np.greater), ("greater_equal", np.greater_equal),
]
SHAPE_PAIRS = [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((1,), (2, 1, 3)), ((), (2, 2))]


@pytest.mark.parametrize("name,ref", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=[f"{a}x{b}" for a, b in SHAPE_PAIRS])
def test_float_binary_against_numpy(ops, name, ref, shapes):
    a, b = _f(shapes[0]), _f(shapes[1])
    if name in ("fmod", "floor_mod", "divide"):
        b = np.where(np.abs(b) < 0.3, np.float32(1.25), b)
    if name in ("equal", "not_equal", "less_equal", "greater_equal") and a.size and b.size:
        b = np.broadcast_to(a, np.broadcast_shapes(a.shape, b.shape)).copy() if b.shape == a.shape else b
    with np.errstate(all="ignore"):
        want = ref(a.astype(np.float64), b.astype(np.float64))
    want = want if want.dtype == bool else want.astype(np.float32)
    ops.check(name, [a, b], None, want, rtol=1e-5, atol=1e-5)


def test_power_against_numpy(ops):
    a, b = _f((2, 3), 0.1, 3.0), _f((3,), -2.0, 2.0)
    ops.check("power", [a, b], None, np.power(a.astype(np.float64), b).astype(np.float32), rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_integer_division_truncates_toward_zero(ops, dtype):
    a = np.array([7, -7, 7, -7, 0, 6, -6, 5], dtype)
    b = np.array([2, 2, -2, -2, 3, 4, 4, -3], dtype)
    ops.check("divide", [a, b], None, (np.trunc(a / b)).astype(dtype))
    ops.check("fmod", [a, b], None, np.fmod(a, b))
    ops.check("floor_mod", [a, b], None, np.mod(a, b))


def test_integer_division_against_onnxruntime(onnx_ref, ops):
    a, b = _i((3, 4), -20, 20), _nonzero(_i((4,), -5, 5))
    ops.check("divide", [a, b], None, onnx_ref("Div", [a, b]))
    ops.check("fmod", [a, b], None, onnx_ref("Mod", [a, b], {"fmod": 1}))
    ops.check("floor_mod", [a, b], None, onnx_ref("Mod", [a, b], {"fmod": 0}))


def test_integer_power(ops):
    a = np.array([2, -3, 1, -1, 0, 5], np.int64)
    b = np.array([3, 2, -2, -3, 4, 0], np.int64)
    ops.check("power", [a, b], None, np.array([8, 9, 1, -1, 0, 1], np.int64))


def test_power_with_an_integer_exponent_keeps_the_base_dtype(ops):
    a, b = _f((4,), 0.5, 2.0), np.array([0, 1, 2, -1], np.int64)
    ops.check("power", [a, b], None, np.power(a, b.astype(np.float32)))


@pytest.mark.parametrize("name,ref", [("logical_and", np.logical_and), ("logical_or", np.logical_or),
                                      ("logical_xor", np.logical_xor), ("equal", np.equal)])
def test_logical(ops, name, ref):
    a, b = _b((2, 3)), _b((3,))
    ops.check(name, [a, b], None, ref(a, b))


@pytest.mark.parametrize("name,ref", [("add", np.add), ("maximum", np.maximum), ("less", np.less),
                                      ("multiply", np.multiply), ("subtract", np.subtract)])
def test_integer_binary(ops, name, ref):
    a, b = _i((2, 3), dtype=np.int64), _i((2, 1), dtype=np.int64)
    ops.check(name, [a, b], None, ref(a, b))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.lists(st.integers(1, 3), min_size=0, max_size=3), st.data())
def test_broadcasting_property(ops, shape, data):
    """Any pair of numpy-broadcastable shapes gives numpy's result."""
    other = [data.draw(st.sampled_from([1, d])) for d in shape]
    other = other[data.draw(st.integers(0, len(other))):]
    a, b = _f(tuple(shape)), _f(tuple(other))
    ops.check("add", [a, b], None, a + b)


def test_where(ops):
    c, x, y = _b((2, 1, 4)), _f((3, 4)), _f((2, 3, 1))
    ops.check("where", [c, x, y], None, np.where(c, x, y))


def test_bias_add(ops):
    x, bias = _f((2, 3, 4, 2)), _f((3,))
    ops.check("bias_add", [x, bias], None, x + bias[:, None, None])
    b2 = _f((2,))
    ops.check("bias_add", [x, b2], {"axis": -1}, x + b2)


def test_prelu_against_onnxruntime(ops, onnx_ref):
    x = _f((2, 3, 4, 4))
    for slope in (_f((3, 1, 1), 0, 1), _f((1,), 0, 1), _f((4,), 0, 1)):
        ops.check("prelu", [x, slope], None, onnx_ref("PRelu", [x, slope]))


def test_broadcast_errors(ops):
    with pytest.raises(nnvm.Error, match=r"add: shapes \(2, 3\), \(4,\) cannot be broadcast together"):
        ops.infer("add", [_f((2, 3)), _f((4,))])
    with pytest.raises(nnvm.Error, match="add needs inputs of one dtype, got float32, int32"):
        ops.infer("add", [_f((2,)), _i((2,))])
    with pytest.raises(nnvm.Error, match=r"bias_add: the bias must have shape \(3,\)"):
        ops.infer("bias_add", [_f((2, 3, 4)), _f((4,))])
    with pytest.raises(nnvm.Error, match="where expects a bool condition"):
        ops.infer("where", [_f((2,)), _f((2,)), _f((2,))])
    with pytest.raises(nnvm.Error, match="prelu: the slope"):
        ops.infer("prelu", [_f((2, 3)), _f((2, 3, 1))])

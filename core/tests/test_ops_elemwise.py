"""Unary elementwise operators against numpy (plain math) and onnxruntime (activations)."""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest

import nnvm

RNG = np.random.default_rng(7)
SHAPE = (2, 3, 4)


def _x(low=-3.0, high=3.0, shape=SHAPE, dtype=np.float32):
    return RNG.uniform(low, high, shape).astype(dtype)


NUMPY_CASES = [
    ("relu", _x(), lambda x: np.maximum(x, 0)),
    ("sigmoid", _x(), lambda x: 1 / (1 + np.exp(-x.astype(np.float64)))),
    ("tanh", _x(), np.tanh),
    ("exp", _x(), np.exp),
    ("log", _x(0.1, 5), np.log),
    ("sqrt", _x(0, 5), np.sqrt),
    ("rsqrt", _x(0.1, 5), lambda x: 1 / np.sqrt(x.astype(np.float64))),
    ("abs", _x(), np.abs),
    ("negative", _x(), np.negative),
    ("floor", _x(), np.floor),
    ("ceil", _x(), np.ceil),
    ("round", np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32), np.round),
    ("erf", _x(), np.vectorize(math.erf)),
    ("sign", np.array([-2.0, 0.0, 3.5, -0.0], np.float32), np.sign),
    ("reciprocal", _x(0.5, 4), lambda x: 1 / x.astype(np.float64)),
    ("sin", _x(), np.sin),
    ("cos", _x(), np.cos),
    ("identity", _x(), lambda x: x),
    ("copy", _x(), lambda x: x),
    ("dropout", _x(), lambda x: x),
    ("isnan", np.array([1.0, np.nan, -np.inf, 0.0], np.float32), np.isnan),
    ("logical_not", RNG.random(SHAPE) > 0.5, np.logical_not),
    # integer inputs take integer paths (select instead of float intrinsics)
    ("abs", RNG.integers(-9, 9, SHAPE).astype(np.int32), np.abs),
    ("sign", RNG.integers(-3, 3, SHAPE).astype(np.int64), np.sign),
    ("relu", RNG.integers(-9, 9, SHAPE).astype(np.int32), lambda x: np.maximum(x, 0)),
    ("negative", RNG.integers(-9, 9, SHAPE).astype(np.int8), np.negative),
    ("round", RNG.integers(-9, 9, SHAPE).astype(np.int32), lambda x: x),
]


@pytest.mark.parametrize("name,x,ref", NUMPY_CASES, ids=[f"{c[0]}-{c[1].dtype}" for c in NUMPY_CASES])
def test_unary_against_numpy(ops, name, x, ref):
    ops.check(name, [x], None, ref(x).astype(ops.infer(name, [x])[0].dtype))


ONNX_CASES = [
    ("leaky_relu", "LeakyRelu", {"alpha": 0.2}, {"alpha": 0.2}),
    ("elu", "Elu", {"alpha": 0.7}, {"alpha": 0.7}),
    ("selu", "Selu", {}, {}),
    ("selu", "Selu", {"alpha": 1.5, "gamma": 2.0}, {"alpha": 1.5, "gamma": 2.0}),
    ("hard_sigmoid", "HardSigmoid", {}, {}),
    ("hard_sigmoid", "HardSigmoid", {"alpha": 0.3, "beta": 0.4}, {"alpha": 0.3, "beta": 0.4}),
    ("hard_swish", "HardSwish", {}, {}),
    ("softplus", "Softplus", {}, {}),
    ("gelu", "Gelu", {}, {}),
    ("gelu", "Gelu", {"approximate": "tanh"}, {"approximate": "tanh"}),
    ("clip", "Clip", {"a_min": -1.0, "a_max": 0.5}, None),
    ("erf", "Erf", {}, {}),
    ("round", "Round", {}, {}),
]


@pytest.mark.parametrize("name,onnx_op,attrs,onnx_attrs", ONNX_CASES,
                         ids=[f"{c[0]}-{k}" for k, c in enumerate(ONNX_CASES)])
def test_activation_against_onnxruntime(ops, onnx_ref, name, onnx_op, attrs, onnx_attrs):
    x = _x(-6, 6, (2, 5, 3))
    x[0, 0, :] = [0.0, 2.5, -2.5]  # ties and the kink at zero
    if onnx_attrs is None:  # Clip takes its bounds as inputs
        bounds = [np.array(attrs["a_min"], np.float32), np.array(attrs["a_max"], np.float32)]
        want = onnx_ref(onnx_op, [x, *bounds])
    else:
        want = onnx_ref(onnx_op, [x], onnx_attrs)
    ops.check(name, [x], attrs, want, rtol=1e-5, atol=2e-6)


def test_softplus_is_stable_for_large_inputs(ops):
    x = np.array([-100.0, -20.0, 0.0, 20.0, 100.0], np.float32)
    ops.check("softplus", [x], None, np.logaddexp(0, x.astype(np.float64)).astype(np.float32))


@pytest.mark.parametrize("dtype,attrs,want", [
    ("int32", {"a_min": -2.5, "a_max": 3.0}, [-2, -2, 0, 3, 3]),
    ("int8", {"a_max": 1000.0}, [-5, -3, 0, 3, 5]),  # bounds beyond the dtype clamp nothing
    ("float32", {"a_min": 0.0}, [0, 0, 0, 3, 5]),
])
def test_clip_bounds(ops, dtype, attrs, want):
    x = np.array([-5, -3, 0, 3, 5], dtype)
    ops.check("clip", [x], attrs, np.array(want, dtype))


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("int32", "float32"), ("float32", "bool"),
                                     ("bool", "float32"), ("int64", "int8"), ("float32", "float16")])
def test_cast(ops, src, dst):
    x = np.array([-2.7, -1.0, 0.0, 0.4, 1.5, 3.9], np.float64)
    x = (x > 0) if src == "bool" else x.astype(src)
    ops.check("cast", [x], {"dtype": dst}, x.astype(dst))


def test_elementwise_on_a_scalar(ops):
    x = np.array(-1.5, np.float32)
    ops.check("relu", [x], None, np.array(0.0, np.float32))


def test_unary_dtype_errors(ops):
    with pytest.raises(nnvm.Error, match="exp expects a floating-point input, got int32"):
        ops.infer("exp", [np.zeros(3, np.int32)])
    with pytest.raises(nnvm.Error, match="logical_not expects a bool input"):
        ops.infer("logical_not", [np.zeros(3, np.float32)])
    with pytest.raises(nnvm.Error, match="unknown dtype 'float8'"):
        ops.infer("cast", [np.zeros(3, np.float32)], {"dtype": "float8"})
    with pytest.raises(nnvm.Error, match="approximate must be 'none' or 'tanh'"):
        ops.infer("gelu", [np.zeros(3, np.float32)], {"approximate": "fast"})


def test_every_unary_op_is_elementwise_and_documented(ops):
    from nnvm.ops import elemwise
    from nnvm.ops.registry import OpPattern

    for u in elemwise.UNARY:
        opdef = ops.get(u.name)
        assert opdef.pattern == OpPattern.ELEMWISE and opdef.doc and opdef.evaluate is not None, u.name


@pytest.mark.parametrize("name,attrs", [("relu", {}), ("sigmoid", {}), ("gelu", {}),
                                        ("clip", {"a_max": 0.5})])
def test_float16(ops, name, attrs):
    x = _x(-3, 3, (7,), np.float16)
    want = {"relu": lambda v: np.maximum(v, 0), "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "gelu": lambda v: 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2))),
            "clip": lambda v: np.minimum(v, 0.5)}[name](x.astype(np.float64))
    ops.check(name, [x], attrs, want.astype(np.float16), rtol=2e-3, atol=2e-3)


def test_standard_ops_register_through_the_plugin_hook(monkeypatch):
    """The standard set arrives through ``nnvm_register_ops`` like any plugin's, owned by nnvm-std-ops."""
    from nnvm.ops import standard

    # importlib, not `from nnvm import plugins`: the package's plugins() function has that name too
    plugins = importlib.import_module("nnvm.plugins")

    monkeypatch.setenv("NNVM_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reset()
    try:
        registry = plugins.op_registry()
        names = [op.name for op in standard.all_ops()]
        assert len(names) == len(set(names))
        for name in names:
            opdef = registry.get(name)
            assert registry.owner(name) == "nnvm-std-ops"
            assert opdef.compute is not None and opdef.evaluate is not None and opdef.doc, name
    finally:
        monkeypatch.undo()
        plugins.reset()

"""Operators scheduled for ``opencl`` (PoCL's CPU device), against numpy: the GPU-style schedules, the
printed OpenCL C (local memory, barriers, float4) and the runtime (device, cache, build errors)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.errors import Error, TargetError
from nnvm.gpu.block_schedules import schedule_conv2d, schedule_dense, schedule_generic
from nnvm.graph.ir import TensorType
from nnvm.ops.registry import get_op
from nnvm_backend_opencl import runtime
from nnvm_conformance.cases_nn import conv2d_reference  # the suite's numpy reference

TARGET = "opencl -device=cpu"


def op_output(name: str, inputs: list, attrs: dict, out_shape: tuple, dtype: str = "float32"):
    """The tensor-expression output of a standard operator on placeholders ``inputs``."""
    opdef = get_op(name)
    return opdef.compute(inputs, opdef.normalize_attrs(dict(attrs), name), [TensorType(out_shape, dtype)])[0]


def build(schedule, args):
    return nnvm.build(schedule, args, target=TARGET, name="f")


def assert_close(name: str, got, want, rtol=1e-5, atol=1e-5):
    got, want = np.asarray(got), np.asarray(want)
    err = np.abs(got.astype("float64") - want.astype("float64"))
    bad = err > atol + rtol * np.abs(want)
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.size} elements differ, first at "
                           f"{tuple(int(i) for i in np.argwhere(bad)[0])}; max abs error {err.max()}")


@pytest.fixture
def rng():
    return np.random.default_rng(7)


@pytest.mark.parametrize("shape,stride,pad,groups", [
    ((1, 16, 10, 10, 32, 3), 1, 1, 1),   # 3x3, tiles that do not divide 10 evenly in every axis
    ((2, 8, 9, 9, 16, 1), 2, 0, 1),      # 1x1 stride 2, batch 2
    ((1, 16, 8, 8, 16, 3), 1, 1, 16),    # depthwise
    ((1, 8, 6, 6, 8, 3), 1, 1, 2),       # grouped
])
def test_conv2d_relu_matches_numpy(shape, stride, pad, groups, rng):
    n, c, h, w, o, k = shape
    data = te.placeholder((n, c, h, w), name="data")
    weight = te.placeholder((o, c // groups, k, k), name="weight")
    oh = (h + 2 * pad - k) // stride + 1
    attrs = {"strides": (stride, stride), "padding": (pad,) * 4, "dilation": (1, 1), "groups": groups}
    conv = op_output("conv2d", [data, weight], attrs, (n, o, oh, oh))
    out = te.compute(conv.shape, lambda *i: te.max(conv[i], te.const(0.0, "float32")), name="relu")
    f = build(schedule_conv2d(out), [data, weight, out])
    if groups == c:
        assert "float conv2d[" in f.source() and "barrier(" not in f.source()  # a row per thread
    else:
        src = f.source()
        assert "__local float" in src and "barrier(CLK_LOCAL_MEM_FENCE);" in src
        assert "get_local_id(2)" in src and "get_group_id(2)" in src
    x = rng.standard_normal((n, c, h, w), dtype="float32")
    wt = rng.standard_normal((o, c // groups, k, k), dtype="float32")
    got = np.zeros((n, o, oh, oh), "float32")
    f(x, wt, got)
    want = np.maximum(conv2d_reference([x, wt], attrs)[0], 0)
    assert_close(f"conv2d {shape} s{stride} p{pad} g{groups}", got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(1, 100, 37), (5, 64, 70)])
def test_dense_tiled_in_local_memory_matches_numpy(m, k, n, rng):
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    out = op_output("dense", [data, weight], {}, (m, n))
    f = build(schedule_dense(out), [data, weight, out])
    assert "__local float" in f.source() and "barrier(" in f.source()
    x, w = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((n, k), dtype="float32")
    got = np.zeros((m, n), "float32")
    f(x, w, got)
    assert_close("dense", got, x.astype("float64") @ w.T.astype("float64"), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("m,k,n", [(5, 64, 70), (7, 100, 13)])
def test_tiles_that_do_not_divide_leave_idle_threads_at_barriers_and_stay_right(m, k, n, rng, monkeypatch):
    """Tail blocks with idle threads around barriers (a user's own schedule can make them; ours choose
    dividing tiles): the guards sit below the barriers, so every thread reaches them and the numbers
    match numpy on PoCL."""
    from nnvm.gpu import block_schedules

    monkeypatch.setattr(block_schedules, "_divisor_at_most", lambda size, cap: cap)  # 8 x 8 tiles, any size
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    out = op_output("dense", [data, weight], {}, (m, n))
    f = build(schedule_dense(out), [data, weight, out])
    src = f.source()
    assert "barrier(" in src and "local (8, 8, 1)" in src  # 8 x 8 threads whatever the shape
    x, w = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((n, k), dtype="float32")
    got = np.zeros((m, n), "float32")
    f(x, w, got)
    assert_close(f"dense {m}x{k}x{n}, 8 x 8 tiles", got, x.astype("float64") @ w.T.astype("float64"),
                 rtol=1e-4, atol=1e-4)


def test_softmax_and_global_pool_reduce_across_threads_in_local_memory(rng):
    x = te.placeholder((2, 1000), name="x")
    sm = op_output("softmax", [x], {"axis": -1}, (2, 1000))
    f = build(schedule_generic([sm]), [x, sm])
    assert "__local float" in f.source() and "barrier(" in f.source()
    xv = rng.standard_normal((2, 1000), dtype="float32")
    got = np.zeros((2, 1000), "float32")
    f(xv, got)
    e = np.exp(xv.astype("float64") - xv.max(axis=1, keepdims=True))
    assert_close("softmax", got, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)

    y = te.placeholder((1, 8, 16, 16), name="y")
    gp = op_output("global_avg_pool2d", [y], {}, (1, 8, 1, 1))
    g = build(schedule_generic([gp]), [y, gp])
    yv = rng.standard_normal((1, 8, 16, 16), dtype="float32")
    got = np.zeros((1, 8, 1, 1), "float32")
    g(yv, got)
    assert_close("global_avg_pool2d", got, yv.astype("float64").mean(axis=(2, 3), keepdims=True))


def test_max_pool_matches_numpy(rng):
    x = te.placeholder((1, 4, 9, 9), name="x")
    mp = op_output("max_pool2d", [x], {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)},
                   (1, 4, 5, 5))
    f = build(schedule_generic([mp]), [x, mp])
    xv = rng.standard_normal((1, 4, 9, 9), dtype="float32")
    got = np.zeros((1, 4, 5, 5), "float32")
    f(xv, got)
    xp = np.pad(xv, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    want = np.zeros((1, 4, 5, 5), "float32")
    for i in range(5):
        for j in range(5):
            want[:, :, i, j] = xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
    assert_close("max_pool2d", got, want)


def test_elementwise_uses_float4_loads_and_stores(rng):
    a = te.placeholder((3, 64), name="a")
    b = te.placeholder((3, 64), name="b")
    out = te.compute((3, 64), lambda i, j: te.sigmoid(a[i, j]) * b[i, j] - 1.0, name="out")
    f = build(schedule_generic([out]), [a, b, out])
    assert "vload4(" in f.source() and "vstore4(" in f.source()
    av, bv = rng.standard_normal((3, 64), dtype="float32"), rng.standard_normal((3, 64), dtype="float32")
    got = np.zeros((3, 64), "float32")
    f(av, bv, got)
    assert_close("sigmoid*b-1", got, 1 / (1 + np.exp(-av.astype("float64"))) * bv - 1, rtol=1e-5, atol=1e-6)


def test_integer_floor_division_and_bool_buffers(rng):
    a = te.placeholder((16,), dtype="int32", name="a")
    q = te.compute((16,), lambda i: te.floordiv(a[i], te.const(3, "int32")), name="q")
    r = te.compute((16,), lambda i: te.floormod(a[i], te.const(-4, "int32")), name="r")
    p = te.compute((16,), lambda i: a[i] > te.const(0, "int32"), name="p")
    f = build(schedule_generic([q, r, p]), [a, q, r, p])
    av = rng.integers(-50, 50, 16).astype("int32")
    qv, rv, pv = np.zeros(16, "int32"), np.zeros(16, "int32"), np.zeros(16, "bool")
    f(av, qv, rv, pv)
    np.testing.assert_array_equal(qv, av // 3)
    np.testing.assert_array_equal(rv, av % -4)
    np.testing.assert_array_equal(pv, av > 0)


def test_build_errors_name_the_failing_source_line():
    source = "__kernel void f(__global float* a) {\n  a[0] = undefined_value;\n}\n"
    with pytest.raises(Error, match=r"line 2: a\[0\] = undefined_value;"):
        runtime.build_program(source, "cpu")


def test_programs_are_cached_by_source_and_devices_by_kind():
    source = "__kernel void g(__global float* a) { a[get_global_id(0)] += 1.0f; }\n"
    assert runtime.build_program(source, "cpu") is runtime.build_program(source, "cpu")
    assert runtime.context("cpu") is runtime.context("cpu")


def test_target_options_are_checked():
    a = te.placeholder((4,), name="a")
    b = te.compute((4,), lambda i: a[i] + 1.0, name="b")
    with pytest.raises(TargetError, match="-device must be one of"):
        nnvm.build(schedule_generic([b]), [a, b], target="opencl -device=tpu")
    with pytest.raises(TargetError, match="unknown option"):
        nnvm.build(schedule_generic([b]), [a, b], target="opencl -mcpu=x")
    assert TARGET == "opencl -device=cpu"


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8"])
def test_dtypes_without_device_extensions(dtype, rng):
    """float16 is stored as half and computed in float (PoCL's CPU device has no cl_khr_fp16); doubles
    and small integers print with their own C types."""
    a = te.placeholder((4, 8), dtype=dtype, name="a")
    b = te.placeholder((4, 8), dtype=dtype, name="b")
    if dtype.startswith("float"):
        out = te.compute((4, 8), lambda i, j: te.exp(a[i, j]) * b[i, j] + te.maximum(a[i, j], b[i, j]),
                         name="out")
        av = rng.standard_normal((4, 8)).astype(dtype)
        bv = rng.standard_normal((4, 8)).astype(dtype)
        want = (np.exp(av.astype("float64")) * bv + np.maximum(av, bv)).astype(dtype)
    else:
        out = te.compute((4, 8), lambda i, j: a[i, j] * b[i, j] + te.max(a[i, j], b[i, j]), name="out")
        av = rng.integers(0, 11, (4, 8)).astype(dtype)
        bv = rng.integers(0, 11, (4, 8)).astype(dtype)
        want = av * bv + np.maximum(av, bv)
    f = build(schedule_generic([out]), [a, b, out])
    got = np.zeros((4, 8), dtype)
    f(av, bv, got)
    if dtype == "float16":
        assert "vload_half(" in f.source() and "vstore_half(" in f.source()
        assert_close(dtype, got, want, rtol=2e-3, atol=2e-3)
    else:
        assert_close(dtype, got, want, rtol=1e-12, atol=0)

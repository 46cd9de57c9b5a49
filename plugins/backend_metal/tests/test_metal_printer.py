"""The printed MSL: golden text for conv2d, dense and softmax (what Apple's compiler will see), each also
run on the CPU runner against numpy; Apple's limits and float64 as errors naming the kernel.

``NNVM_UPDATE_GOLDEN=1 pytest plugins/backend_metal/tests/test_metal_printer.py`` rewrites the golden
files after a deliberate printer change (review the diff).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.errors import Error
from nnvm.gpu.block_schedules import schedule_conv2d, schedule_dense, schedule_generic
from nnvm.gpu.kernels import lower_for_gpu
from nnvm.graph.ir import TensorType
from nnvm.ops.registry import get_op
from nnvm.tir import stmt as S
from nnvm_backend_metal.printer import MetalPrinter
from nnvm_conformance.cases_nn import conv2d_reference

GOLDEN = Path(__file__).with_name("golden")


def op_output(name: str, inputs: list, attrs: dict, out_shape: tuple, dtype: str = "float32"):
    opdef = get_op(name)
    return opdef.compute(inputs, opdef.normalize_attrs(dict(attrs), name), [TensorType(out_shape, dtype)])[0]


def check_golden(name: str, source: str) -> None:
    path = GOLDEN / f"{name}.metal"
    if os.environ.get("NNVM_UPDATE_GOLDEN"):
        path.write_text(source)
    assert path.exists(), f"no golden file {path}: run with NNVM_UPDATE_GOLDEN=1 once"
    assert source == path.read_text(), f"the MSL printed for {name} changed (golden file {path})"


def test_conv2d_golden_and_numbers():
    rng = np.random.default_rng(0)
    data = te.placeholder((1, 8, 10, 10), name="data")
    weight = te.placeholder((16, 8, 3, 3), name="weight")
    attrs = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1}
    out = op_output("conv2d", [data, weight], attrs, (1, 16, 10, 10))
    f = nnvm.build(schedule_conv2d(out), [data, weight, out], target="metal", name="conv2d")
    src = f.source()
    assert "threadgroup_barrier(mem_flags::mem_threadgroup);" in src and "[[buffer(2)]]" in src
    check_golden("conv2d", src)
    x = rng.standard_normal((1, 8, 10, 10)).astype("float32")
    w = rng.standard_normal((16, 8, 3, 3)).astype("float32")
    y = np.zeros((1, 16, 10, 10), "float32")
    f(x, w, y)
    want = conv2d_reference([x, w], attrs)[0]
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_dense_golden_and_numbers():
    rng = np.random.default_rng(1)
    a = te.placeholder((4, 64), name="a")
    b = te.placeholder((32, 64), name="b")
    out = op_output("dense", [a, b], {}, (4, 32))
    f = nnvm.build(schedule_dense(out), [a, b, out], target="metal", name="dense")
    check_golden("dense", f.source())
    x = rng.standard_normal((4, 64)).astype("float32")
    w = rng.standard_normal((32, 64)).astype("float32")
    y = np.zeros((4, 32), "float32")
    f(x, w, y)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-4)


def test_softmax_golden_and_numbers():
    rng = np.random.default_rng(2)
    a = te.placeholder((8, 100), name="a")
    out = op_output("softmax", [a], {"axis": -1}, (8, 100))
    f = nnvm.build(schedule_generic([out]), [a, out], target="metal", name="softmax")
    src = f.source()
    assert "(-as_type<float>(0x7f800000u))" in src  # -inf as a bit pattern: safe under fast math
    check_golden("softmax", src)
    x = rng.standard_normal((8, 100)).astype("float32") * 4
    y = np.zeros_like(x)
    f(x, y)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-7)


def _lowered(dtype: str = "float32", n: int = 64):
    a = te.placeholder((n,), name="a", dtype=dtype)
    out = te.compute((n,), lambda i: a[i] * te.const(2, dtype), name="twice")
    s = schedule_generic([out])
    return lower_for_gpu(nnvm.lower(s, [a, out], name="twice")).kernels[0]


def test_float64_is_an_error_naming_the_kernel():
    with pytest.raises(Error, match=r"kernel twice\w*: float64 is not supported: Metal has no double"):
        MetalPrinter().program([_lowered("float64")])


def test_limits_are_errors_naming_the_kernel():
    k = _lowered()
    many = replace(k, attrs={**k.attrs, "launch": {**k.attrs.get("launch", {}), "threadIdx.x": 2048}})
    with pytest.raises(Error, match=rf"kernel {k.name}: 2048 threads per threadgroup \(Metal allows at most "
                       r"1024\)"):
        MetalPrinter().program([many])
    params = [replace(k.params[0], name=f"p{i}") for i in range(32)]
    with pytest.raises(Error, match=rf"kernel {k.name}: 32 buffers \(Metal binds at most 31\)"):
        MetalPrinter().program([replace(k, params=params)])
    tile = S.Buffer("tile", (9000,), "float32", "shared")
    with pytest.raises(Error, match=rf"kernel {k.name}: 36000 bytes of threadgroup memory \(Metal allows "
                       r"at most 32768\)"):
        MetalPrinter().program([replace(k, body=S.Allocate(tile, k.body))])

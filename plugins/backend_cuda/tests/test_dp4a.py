"""``dp4a`` for 8-bit dense layers (issue 40): which architectures get it (NVRTC, explicit ``-arch``, PTX
read back), the exact sums for every signedness and zero point (numpy int64 reference; here through the
CPU runner, on a GPU natively), and a QDQ ResNet-18 on a real GPU against onnxruntime's int8."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder
from nnvm_backend_cuda.native import open_device
from nnvm_testing.frontend_onnx.quantized import check_within_one_step, quantized_model_path


def _qdense_module(target: str, m: int, k: int, n: int, xdt: str, wdt: str, xzp: int, wzp: int, seed=0):
    """A qdense with a constant weight, compiled for ``target``; (module, data, numpy's int64 result)."""
    rng = np.random.default_rng(seed)

    def q(shape, dtype):
        info = np.iinfo(dtype)
        return rng.integers(int(info.min), int(info.max) + 1, shape).astype(dtype)

    x, w = q((m, k), xdt), q((n, k), wdt)
    b = GraphBuilder(fold_constants=False)
    (y,) = b.node("qdense", [b.input("x", (m, k), xdt), b.param("w", w)],
                  {"data_zero_point": xzp, "weight_zero_point": wzp})
    b.output(y)
    want = (x.astype(np.int64) - xzp) @ (w.astype(np.int64) - wzp).T
    return nnvm.compile(b.build(), target=target), x, want


@pytest.mark.parametrize(("arch", "has"), [("sm_52", False), ("sm_60", False), ("sm_61", True),
                                           ("sm_80", True), ("sm_90", True)])
def test_dp4a_in_the_ptx_exactly_where_the_architecture_has_it(arch, has):
    mod, _, _ = _qdense_module(f"cuda -arch={arch}", 4, 64, 32, "uint8", "int8", 3, 0)
    ptx = mod.library.compiled.ptx.decode()
    assert ("dp4a.u32.s32" in ptx) == has, f"{arch}: dp4a {'missing from' if has else 'in'} the PTX"
    if not has:  # the int32 multiply-add: bytes widened and multiplied
        assert "nnvm_dp4a" not in mod.library.source()
        assert "mad.lo.s32" in ptx or "mul.lo.s32" in ptx, f"{arch}: no int32 multiply in the PTX"


@pytest.mark.parametrize(("xdt", "wdt", "xzp", "wzp", "ptx"), [
    ("uint8", "int8", 0, 0, "dp4a.u32.s32"),
    ("uint8", "int8", 131, 0, "dp4a.u32.s32"),  # onnxruntime's convention: u8 activations, s8 weights
    ("int8", "int8", -7, 5, "dp4a.s32.s32"),
    ("uint8", "uint8", 255, 128, "dp4a.u32.u32"),
    ("int8", "uint8", -128, 255, "dp4a.s32.u32"),
])
def test_qdense_with_dp4a_is_exact(xdt, wdt, xzp, wzp, ptx):
    mod, x, want = _qdense_module("cuda -arch=sm_80", 5, 96, 24, xdt, wdt, xzp, wzp, seed=1)
    assert ptx in mod.library.compiled.ptx.decode()
    got = mod.run(x)[0]
    assert got.dtype == np.int32
    bad = int((got != want).sum())
    assert not bad, f"qdense {xdt} x {wdt}, zero points {xzp}, {wzp}: {bad} of {got.size} sums differ"


def _device_arch():
    dev = open_device()
    return None if dev is None else dev.arch


@pytest.mark.gpu
@pytest.mark.skipif(open_device() is None, reason="no NVIDIA GPU and driver here")
@pytest.mark.parametrize(("xdt", "wdt", "xzp", "wzp"), [("uint8", "int8", 131, 0),
                                                        ("int8", "uint8", -3, 200)])
def test_real_gpu_dp4a_is_exact(xdt, wdt, xzp, wzp):
    mod, x, want = _qdense_module(f"cuda -arch={_device_arch()}", 33, 512, 200, xdt, wdt, xzp, wzp, seed=2)
    assert "dp4a" in mod.library.compiled.ptx.decode()
    got = mod.run(x)[0]
    assert int((got != want).sum()) == 0, f"{xdt} x {wdt} on {_device_arch()}: sums differ"


@pytest.mark.gpu
@pytest.mark.skipif(open_device() is None, reason="no NVIDIA GPU and driver here")
def test_real_gpu_qdq_resnet18_matches_onnxruntime_int8():
    path = quantized_model_path("resnet18", "qdq")
    mod = nnvm.compile(path, target=f"cuda -arch={_device_arch()}")
    check_within_one_step(path, mod, f"QDQ resnet18 on cuda {_device_arch()}")

"""Models compiled for ``cuda`` (run natively or on the CPU runner) against onnxruntime: three models of
shapes the conformance CNNs do not have (attention with layer norm, depthwise convolutions, a GRU),
and the stats and files a compile produces."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS


def _rel_err(got, want) -> float:
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


@pytest.mark.parametrize("name", sorted(SHAPE_MODELS))
def test_model_of_another_shape_matches_onnxruntime(name, tmp_path):
    path = str(tmp_path / f"{name}.onnx")
    onnx.save(SHAPE_MODELS[name](seed=0), path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal(inp.shape).astype("float32")
    want = sess.run(None, {inp.name: x})[0]
    mod = nnvm.compile(path, target="cuda")
    got = mod.run(x)[0]
    err = _rel_err(got, want)
    assert err < 1e-4, f"{name} on cuda: max relative error {err:.2e} against onnxruntime"


def test_compile_stats_json_shows_registers_and_spills_per_kernel(tmp_path):
    path = str(tmp_path / "dw.onnx")
    onnx.save(SHAPE_MODELS["depthwise_net"](seed=0), path)
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", path, "--target", "cuda -arch=sm_90",
                           "-o", str(tmp_path / "dw.nnvm"), "--stats", "--json"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["cuda_arch"] == "sm_90"
    kernels = stats["cuda_kernels"]
    assert kernels and all(u["registers"] > 0 for u in kernels.values())
    want = {"spill_stores", "spill_loads", "shared_bytes", "occupancy"}
    assert all(want <= set(u) for u in kernels.values())
    assert stats["cuda_spills"] == []


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_power_is_exact(dtype):
    # through pow((double)a, (double)b) truncated, 3 ** 1 gave 2 on an H200 (CUDA's pow is within 2 ulp)
    from onnx import TensorProto, helper

    elem = {"int32": TensorProto.INT32, "int64": TensorProto.INT64}[dtype]
    g = helper.make_graph([helper.make_node("Pow", ["a", "b"], ["y"])], "ipow",
                          [helper.make_tensor_value_info("a", elem, [9, 8]),
                           helper.make_tensor_value_info("b", elem, [9, 8])],
                          [helper.make_tensor_value_info("y", elem, [9, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    mod = nnvm.compile(model, target="cuda -arch=sm_90")
    assert "pow((double)" not in mod.library.source_text()
    a, b = np.meshgrid(np.arange(-4, 5), np.arange(-2, 6), indexing="ij")
    a, b = a.astype(dtype), b.astype(dtype)
    neg = np.where(np.abs(a) == 1, np.where(b % 2 == 0, 1, a), 0)  # trunc(a ** b) for b < 0
    want = np.where(b >= 0, np.power(a, np.maximum(b, 0)), neg).astype(dtype)
    got = mod.run(a, b)[0]
    np.testing.assert_array_equal(got, want)

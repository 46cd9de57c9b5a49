"""The command line: plugins, compile, run, and one clear sentence for every user mistake."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from nnvm_testing.frontend_onnx import models


def nnvm_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def _assert_user_error(proc, *needles):
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _tiny_model(path, ops=("Relu",)):
    nodes, prev = [], "x"
    for k, op in enumerate(ops):
        nodes.append(helper.make_node(op, [prev], [f"t{k}"], name=f"n{k}_{op}"))
        prev = f"t{k}"
    graph = helper.make_graph(nodes, "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 3])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def test_plugins_json_lists_frontend_and_backend():
    proc = nnvm_cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert sorted(r["distribution"] for r in info["frontend"]) == [
        "nnvm-frontend-coreml", "nnvm-frontend-keras", "nnvm-frontend-mxnet", "nnvm-frontend-onnx"]
    backends = {r["name"] for r in info["backend"]}
    assert {"llvm", "opencl", "aarch64", "armv7", "cuda", "metal", "webgpu"} <= backends
    assert {"conv2d", "dense", "relu"} <= {r["name"] for r in info["op"]}


def test_compile_then_run_artifact(tmp_path):
    path = models.cached_model_path("resnet18")
    out = tmp_path / "r18.so"
    proc = nnvm_cli("compile", path, "--target", "llvm", "-o", str(out), "--stats", "--json",
                    "--dump-ir", str(tmp_path / "ir"))
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    for key in ("kernels", "fused_groups", "weight_bytes", "activation_bytes_planned",
                "activation_bytes_naive", "activation_bytes_lower_bound", "compile_seconds"):
        assert key in stats
    dumps = sorted(os.listdir(tmp_path / "ir"))
    assert any("fuse_ops" in d for d in dumps) and "kernels.tir.txt" in dumps
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = nnvm_cli("run", str(out), "--input", f"data={tmp_path / 'x.npy'}",
                    "--output", str(tmp_path / "y.npz"))
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "y.npz")["output"]
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-4


def test_truncated_model_is_one_sentence(tmp_path):
    good = tmp_path / "m.onnx"
    _tiny_model(str(good))
    bad = tmp_path / "truncated.onnx"
    bad.write_bytes(good.read_bytes()[: len(good.read_bytes()) // 2])
    _assert_user_error(nnvm_cli("compile", str(bad), "--target", "llvm"), "truncated.onnx")


def test_missing_file_is_one_sentence(tmp_path):
    _assert_user_error(nnvm_cli("compile", str(tmp_path / "nope.onnx"), "--target", "llvm"), "nope.onnx")


def test_unsupported_operators_listed_at_once(tmp_path):
    path = tmp_path / "unsupported.onnx"
    _tiny_model(str(path), ops=("Relu", "StringNormalizer", "Relu", "DepthToSpaceX"))
    model = onnx.load(str(path))
    model.graph.node[3].op_type = "NonMaxSuppressionFoo"
    onnx.save(model, str(path))
    _assert_user_error(nnvm_cli("compile", str(path), "--target", "llvm"),
                       "StringNormalizer", "NonMaxSuppressionFoo", "n1_StringNormalizer")


def test_wrong_input_shape_and_dtype_at_run(tmp_path):
    path = tmp_path / "m.onnx"
    _tiny_model(str(path))
    np.save(tmp_path / "bad_shape.npy", np.zeros((3, 3), np.float32))
    bad = f"x={tmp_path / 'bad_shape.npy'}"
    _assert_user_error(nnvm_cli("run", str(path), "--input", bad), "'x'", "[2, 3]")
    np.save(tmp_path / "bad_dtype.npy", np.zeros((2, 3), np.float64))
    bad = f"x={tmp_path / 'bad_dtype.npy'}"
    _assert_user_error(nnvm_cli("run", str(path), "--input", bad), "'x'", "float32")


def test_unknown_target_is_one_sentence(tmp_path):
    path = tmp_path / "m.onnx"
    _tiny_model(str(path))
    _assert_user_error(nnvm_cli("compile", str(path), "--target", "tpu9000"), "tpu9000")

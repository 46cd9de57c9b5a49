"""Whole models compiled for ``opencl`` on PoCL's CPU device against onnxruntime, the exported file
run by ``nnvm.load`` in a fresh process, and ``--dump-ir`` showing local-memory tiling."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm_testing.frontend_onnx.models import cached_model_path

TARGET = "opencl -device=cpu"


def _small_cnn(path: str) -> str:
    """conv 3x3 + relu, conv 1x1, global average pool, dense, softmax: every GPU schedule once."""
    rng = np.random.default_rng(3)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype("float32"), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["d"], transB=1),
        helper.make_node("Softmax", ["d"], ["y"], axis=1),
    ]
    inits = [init("w1", (16, 3, 3, 3)), init("b1", (16,)), init("w2", (16, 16, 1, 1)), init("w3", (10, 16)),
             init("b3", (10,))]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [1, 3, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path


def _reference(path: str, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _rel_err(got, want) -> float:
    return float(np.abs(got.astype("float64") - want).max() / max(np.abs(want).max(), 1e-30))


def test_small_cnn_matches_onnxruntime_and_exports_to_one_file(tmp_path):
    path = _small_cnn(str(tmp_path / "small.onnx"))
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype("float32")
    mod = nnvm.compile(path, target=TARGET)
    want = _reference(path, x)
    assert _rel_err(mod.run(x)[0], want) < 1e-5
    out = tmp_path / "small.nnvm"
    mod.export(str(out))
    np.save(tmp_path / "x.npy", x)
    script = ("import sys, numpy as np, nnvm; m = nnvm.load(sys.argv[1]); "
              "np.save(sys.argv[3], m.run(np.load(sys.argv[2]))[0])")
    proc = subprocess.run([sys.executable, "-c", script, str(out), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert _rel_err(np.load(tmp_path / "y.npy"), want) < 1e-5


def test_weights_are_uploaded_once_and_a_run_copies_only_inputs_in_and_outputs_out(tmp_path):
    """The device keeps the weights and the activation arena: the second run moves the input's bytes to
    the device and the output's back, nothing else (the core's GPU library counts every copy)."""
    path = _small_cnn(str(tmp_path / "small.onnx"))
    mod = nnvm.compile(path, target=TARGET)
    lib = mod.library
    weights = mod.stats()["weight_bytes"]
    assert weights > 0 and lib.bytes_to_device >= weights  # uploaded when the module was made
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype("float32")
    want = _reference(path, x)
    first = mod.run(x)[0]
    before_in, before_out = lib.bytes_to_device, lib.bytes_from_device
    second = mod.run(x)[0]
    assert lib.bytes_to_device - before_in == x.nbytes
    assert lib.bytes_from_device - before_out == second.nbytes
    assert _rel_err(first, want) < 1e-5 and _rel_err(second, want) < 1e-5


def test_concurrent_runs_from_four_threads_match_serial_runs(tmp_path):
    """``mod.run`` from four threads at once on one module: each run takes its own device arena."""
    from concurrent.futures import ThreadPoolExecutor

    path = _small_cnn(str(tmp_path / "small.onnx"))
    mod = nnvm.compile(path, target=TARGET)
    rng = np.random.default_rng(2)
    xs = [rng.standard_normal((1, 3, 12, 12)).astype("float32") for _ in range(8)]
    serial = [mod.run(x)[0] for x in xs]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(lambda x: mod.run(x)[0], xs))
            for k, (g, s) in enumerate(zip(got, serial)):
                np.testing.assert_array_equal(g, s, err_msg=f"input {k}")
    for x, s in zip(xs, serial):
        assert _rel_err(s, _reference(path, x)) < 1e-5


def test_dump_ir_shows_local_memory_tiling_and_barriers(tmp_path):
    path = _small_cnn(str(tmp_path / "small.onnx"))
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", path, "--target", "opencl",
                           "-o", str(tmp_path / "m.nnvm"), "--dump-ir", str(tmp_path / "ir")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    with open(tmp_path / "ir" / "kernels.opencl.txt") as f:
        source = f.read()
    assert "_conv2d_k0 global (" in source  # the launch table heads the dump
    convs = [k[:k.index("\n}\n")] for k in source.split("__kernel void ")[1:] if "_conv2d" in k.split("(")[0]]
    assert len(convs) == 2, source
    barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
    for conv in convs:
        assert "__local float " in conv and "get_local_id(0)" in conv and "get_group_id(0)" in conv
        loop = conv[conv.index("for (long rc_outer"):]
        # all threads copy the chunk's tiles into local memory, wait, then compute from them
        copy, compute = loop.index("_shared["), loop.index("rc_inner")
        assert copy < compute and barrier in loop[copy:compute], conv
    # the 1x1 conv reduces 16 channels in two chunks: it also waits before overwriting a tile
    (two,) = [c for c in convs if "rc_outer < 2L" in c]
    loop = two[two.index("for (long rc_outer"):]
    assert loop.index(barrier) < loop.index("_shared[") < loop.rindex(barrier) < loop.index("rc_inner")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_model_matches_onnxruntime(name):
    path = cached_model_path(name)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype("float32")
    mod = nnvm.compile(path, target=TARGET)
    err = _rel_err(mod.run(x)[0], _reference(path, x))
    assert err < 1e-4, f"{name} on {TARGET}: relative error {err} against onnxruntime"


def test_pocl_kernel_cache_lives_under_nnvm_cache():
    from nnvm_backend_opencl import runtime  # noqa: F401  (sets the variable on import)

    assert os.environ["POCL_CACHE_DIR"]

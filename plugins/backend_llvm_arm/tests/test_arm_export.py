"""Exported Arm modules: ``nnvm.load`` and ``nnvm run`` on x86 (through qemu), the device runtime on its
own (no Python), its size, and target options. Numbers are checked against numpy."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.errors import TargetError
from nnvm.target import parse_target
from nnvm_backend_llvm import build_runner, runtime_sizes
from nnvm_backend_llvm_arm.plugin import ARM_TARGETS


def dense_relu(rng):
    """y = relu(x @ w.T + b) with x[2, 64]: a model small enough that the emulator starts in no time."""
    w = rng.standard_normal((24, 64)).astype(np.float32)
    b = rng.standard_normal(24).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "dense_relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 24])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, lambda x: np.maximum(x.astype(np.float64) @ w.T + b, 0)


@pytest.fixture
def exported(arm_target, tmp_path):
    """(path of an exported dense_relu module for the target, input, numpy reference output)."""
    rng = np.random.default_rng(3)
    model, ref = dense_relu(rng)
    x = rng.standard_normal((2, 64)).astype(np.float32)
    path = tmp_path / f"dense-{arm_target}.so"
    nnvm.compile(model, target=arm_target).export(path)
    return str(path), x, ref(x)


def test_load_runs_an_exported_arm_module(exported, arm_target, close, capfd):
    path, x, want = exported
    mod = nnvm.load(path)
    assert mod.input_names == ["x"]
    (y1,) = mod.run(x)
    (y2,) = mod.run(x=x)
    close(f"nnvm.load({arm_target} module).run", y1, want)
    close(f"nnvm.load({arm_target} module).run(x=...)", y2, want)
    if not ARM_TARGETS[arm_target].runs_natively():
        err = capfd.readouterr().err
        assert err.count(ARM_TARGETS[arm_target].qemu) == 1, f"the qemu note is printed once: {err!r}"
    with pytest.raises(nnvm.InputError, match="shape"):
        mod.run(np.zeros((3, 64), np.float32))


def test_cli_run_under_the_emulator(exported, arm_target, tmp_path, close):
    path, x, want = exported
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out.npz"
    cmd = [sys.executable, "-m", "nnvm.cli", "run", path, "--input", f"x={tmp_path / 'x.npy'}",
           "--output", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    if not ARM_TARGETS[arm_target].runs_natively():
        assert ARM_TARGETS[arm_target].qemu in proc.stderr, proc.stderr
    close(f"nnvm run on a {arm_target} module", np.load(out)["y"], want)


def test_device_runtime_needs_no_python(exported, arm_target, tmp_path, close):
    """What a board runs: nnvm-run (C) + the model file, on .npy files; mistakes are one line, status 1."""
    path, x, want = exported
    tc = ARM_TARGETS[arm_target]
    runner = [*tc.emulator(), build_runner(tc)]
    info = subprocess.run([*runner, path, "--info"], capture_output=True, text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert info.stdout.split("\n")[:2] == ["input x <f4 (2, 64)", "output y <f4 (2, 24)"]
    np.save(tmp_path / "x.npy", x)
    cmd = [*runner, path, str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npy"), "-r", "3"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "median" in done.stdout
    close(f"nnvm-run on {arm_target}", np.load(tmp_path / "y.npy"), want)
    np.save(tmp_path / "bad.npy", np.zeros((2, 65), np.float32))
    bad = subprocess.run([*runner, path, str(tmp_path / "bad.npy"), "-o", str(tmp_path / "y.npy")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "shape differs from the model's input" in bad.stderr, bad.stderr


def test_runtime_size_within_300_kib(arm_target):
    size = runtime_sizes(ARM_TARGETS[arm_target])["nnvm-run"]
    assert 0 < size <= 300 * 1024, f"{arm_target}: nnvm-run is {size} bytes, over 300 KiB"
    proc = subprocess.run([sys.executable, "-m", "nnvm_backend_llvm_arm", "size", "--target", arm_target],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"{arm_target}: nnvm-run {size / 1024:.1f} KiB (within"), proc.stdout


@pytest.mark.parametrize("target, message", [
    ("aarch64 -mcpu=not-a-cpu", "-mcpu value 'not-a-cpu'"),
    ("armv7 -mattr=neon", "should look like"),
    ("aarch64 -mfloat=hard", "unknown option -mfloat"),
    ("armv7 -mtriple=x86_64-linux-gnu", "not a armv7 triple"),
])
def test_target_mistakes_are_one_clear_error(target, message):
    with pytest.raises(TargetError, match=message):
        parse_target(target).backend.check_target(parse_target(target))


def test_targets_registered_and_neon_width():
    from nnvm.cpu.schedule_helpers import vector_lanes
    from nnvm.plugins import backends

    assert {"aarch64", "armv7"} <= set(backends())
    for kind in ("aarch64", "armv7", "aarch64 -mcpu=cortex-a53"):
        assert vector_lanes(parse_target(kind)) == 4, kind
    assert os.path.basename(ARM_TARGETS["armv7"].sysroot) == "arm-linux-gnueabihf"

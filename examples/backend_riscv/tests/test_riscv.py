"""The vendor example of docs/plugins.md: the ``riscv64`` target plugin, written on the LLVM layer's
public surface alone. Its conformance run under qemu (the suite's own tests, parametrized by its pytest
plugin from the module attributes below), an exported module run by ``nnvm runtime build --target
riscv64``'s ``nnvm-run`` under qemu against onnxruntime, and a module using V refused by a board
without it. Needs gcc-riscv64-linux-gnu and qemu-user (``make install``); without them the tests skip,
which fails under CI=true."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
import nnvm_backend_llvm
import nnvm_backend_riscv
from nnvm.target import parse_target
from nnvm_backend_riscv.plugin import RISCV64
from nnvm_conformance.suite import test_operator  # noqa: F401 - collected here

nnvm_conformance_targets = ["riscv64"]
nnvm_conformance_models = []
SOURCE = pathlib.Path(nnvm_backend_riscv.__file__).parent


@pytest.fixture(autouse=True)
def tools():
    missing = [t for t in (RISCV64.cc, RISCV64.qemu) if shutil.which(t) is None]
    if missing:
        pytest.skip(f"riscv64 needs {', '.join(missing)} (make install installs them)")


def test_the_plugin_is_small_and_uses_only_the_layers_public_names():
    lines = sum(len(p.read_text().splitlines()) for p in SOURCE.rglob("*.py"))
    assert lines <= 150, f"the riscv64 plugin has {lines} lines"
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nnvm_backend_llvm"):
                assert node.module == "nnvm_backend_llvm", f"{path.name} imports {node.module}"
                names = {a.name for a in node.names}
                assert names <= set(nnvm_backend_llvm.__all__), f"{path.name}: {names}"
            if isinstance(node, ast.ImportFrom | ast.Import):
                named = [a.name for a in node.names]
                modules = named if isinstance(node, ast.Import) else [node.module or ""]
                assert not any(m.startswith(("nnvm_backend_llvm_", "nnvm_backend_cuda")) for m in modules)
                assert not any(a.name.startswith("_") for a in node.names), f"{path.name}: a private name"
    target = parse_target("riscv64 -mattr=+v")
    assert target.keys == ("cpu",) and target.backend.vector_lanes(target) == 4
    assert target.backend.cpu_signature(target).features >= {"v"}


def small_cnn():
    """conv 3x3 + relu, global average pool, dense: the conv2d, pooling and dense templates."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32)
    wd = (rng.standard_normal((10, 8)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["p"]), helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "wd"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wd, "wd")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_nnvm_run_under_qemu_matches_onnxruntime_and_a_board_without_v_refuses(tmp_path):
    import onnxruntime as ort

    model = small_cnn()
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    (want,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})
    nnvm.compile(model, target="riscv64 -mattr=+v").export(tmp_path / "cnn.so")
    rt = tmp_path / "rt"
    built = subprocess.run([sys.executable, "-m", "nnvm.cli", "runtime", "build", "--target", "riscv64",
                            "-o", str(rt)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    np.save(tmp_path / "x.npy", x)
    run = [str(rt / "nnvm-run"), str(tmp_path / "cnn.so"), str(tmp_path / "x.npy"), "-o",
           str(tmp_path / "y.npy")]
    done = subprocess.run([*RISCV64.emulator(), *run], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "y.npy")
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-4, f"nnvm-run under qemu-riscv64 vs onnxruntime: relative error {err:.2e}"
    # the same module on an emulated board without V: one sentence, status 1, never SIGILL
    plain = [RISCV64.qemu, "-cpu", "rv64,v=false", "-L", RISCV64.sysroot, *run]
    refused = subprocess.run(plain, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "v, which this CPU lacks" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

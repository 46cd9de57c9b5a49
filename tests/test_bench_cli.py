"""``nnvm bench``: both latencies, the ratio and the match verdict against onnxruntime (no timing asserts)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from nnvm.cli import main


@pytest.fixture
def small_model(tmp_path) -> str:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])
    graph = helper.make_graph(nodes, "small", [x], [y], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path / "small.onnx"
    onnx.save(model, str(path))
    return str(path)


@pytest.fixture(autouse=True)
def _restore_threads(monkeypatch):
    monkeypatch.setenv("NNVM_NUM_THREADS", "1")  # bench sets it; monkeypatch restores it afterwards


def test_bench_prints_both_latencies_and_verdict(small_model, capsys):
    rc = main(["bench", small_model, "--target", "llvm", "--compare", "onnxruntime", "--repeat", "3",
               "--threads", "1", "--profile"])
    captured = capsys.readouterr()
    out = captured.out
    assert rc == 0, captured.err
    assert "nnvm " in out and " ms" in out
    assert "onnxruntime " in out
    assert "ratio" in out
    assert "outputs      match" in out
    assert "GFLOP/s" in out


def test_bench_json(small_model, capsys):
    rc = main(["bench", small_model, "--compare", "onnxruntime", "--repeat", "2", "--threads", "1", "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = json.loads(captured.out)
    assert result["match"] is True and result["max_rel_err"] < 1e-4
    assert result["nnvm_ms"] > 0 and result["onnxruntime_ms"] > 0


def test_bench_without_onnxruntime_is_one_sentence(small_model, capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime now raises ImportError
    rc = main(["bench", small_model, "--compare", "onnxruntime", "--repeat", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "onnxruntime" in err and err.count("\n") == 1


def test_bench_of_an_emulated_target_is_one_sentence(small_model, capsys):
    rc = main(["bench", small_model, "--target", "aarch64", "--repeat", "1"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "aarch64" in err and "emulator" in err and err.count("\n") == 1


def test_bench_of_a_gpu_target_times_the_device_module(small_model, capsys):
    """A GPU module keeps its launches on the device (no host kernel calls): found on the H200, where
    ``nnvm bench --target cuda`` died counting them. Here the CUDA kernels run on the CPU runner."""
    rc = main(["bench", small_model, "--target", "cuda -arch=sm_90", "--compare", "onnxruntime", "--repeat",
               "2", "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    result = json.loads(captured.out)
    assert result["match"] is True and result["nnvm_ms"] > 0 and result["kernels"] is None

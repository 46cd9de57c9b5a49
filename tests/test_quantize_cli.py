"""``nnvm quantize``: a QDQ file onnxruntime runs, and one sentence (exit 1) for each user mistake."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cli import main


def nnvm_cli(*args):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """Conv -> Relu -> GlobalAveragePool -> Flatten -> Gemm over a 1x3x8x8 input named ``image``."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.normal(0, 0.5, (5, 4)).astype(np.float32), "fw"),
             numpy_helper.from_array(rng.normal(0, 0.1, 5).astype(np.float32), "fb")]
    nodes = [helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("GlobalAveragePool", ["r"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cli",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], inits)
    path = tmp_path_factory.mktemp("model") / "net.onnx"
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    proto.ir_version = 8  # readable by onnxruntime
    onnx.save(proto, str(path))
    return str(path)


def _samples(folder, shapes, subfolders=False):
    folder.mkdir()
    rng = np.random.default_rng(1)
    for k, shape in enumerate(shapes):
        x = rng.standard_normal(shape).astype(np.float32)
        if subfolders:
            (folder / f"s{k}").mkdir()
            np.save(folder / f"s{k}" / "image.npy", x)
        else:
            np.save(folder / f"{k:03d}.npy", x)
    return str(folder)


@pytest.mark.parametrize("layout", ["files", "subfolders"])
def test_quantize_writes_a_qdq_file_onnxruntime_runs(model, tmp_path, layout):
    cal = _samples(tmp_path / "cal", [(1, 3, 8, 8)] * 4, subfolders=layout == "subfolders")
    out = tmp_path / "q.onnx"
    proc = nnvm_cli("quantize", model, "--calibration", cal, "-o", str(out), "--method", "percentile")
    assert proc.returncode == 0, proc.stderr
    assert "4 calibration inputs, percentile" in proc.stdout
    q = onnx.load(str(out))
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in q.graph.node}
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = ort.InferenceSession(model).run(None, {"image": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"image": x})[0]
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def test_per_tensor_flag(model, tmp_path):
    out = tmp_path / "q.onnx"
    proc = nnvm_cli("quantize", model, "--calibration", _samples(tmp_path / "cal", [(1, 3, 8, 8)] * 2),
                    "-o", str(out), "--no-per-channel")
    assert proc.returncode == 0, proc.stderr
    q = onnx.load(str(out))
    (w_dq,) = [n for n in q.graph.node if n.op_type == "DequantizeLinear" and n.input[0] == "w_quantized"]
    assert numpy_helper.to_array(next(t for t in q.graph.initializer if t.name == w_dq.input[1])).ndim == 0


def test_quantize_compiles_directly(model, tmp_path):
    """``-o`` naming a module: the quantized model compiled and exported, with the outputs of the QDQ file
    the same calibration writes, compiled, and within 2 % of onnxruntime running that file."""
    cal = _samples(tmp_path / "cal", [(1, 3, 8, 8)] * 4)
    proc = nnvm_cli("quantize", model, "--calibration", cal, "-o", str(tmp_path / "q.so"))
    assert proc.returncode == 0, proc.stderr
    assert "compiled it for llvm" in proc.stdout
    assert nnvm_cli("quantize", model, "--calibration", cal, "-o", str(tmp_path / "q.onnx")).returncode == 0
    x = np.random.default_rng(2).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = nnvm.load(str(tmp_path / "q.so")).run(image=x)[0]
    assert np.array_equal(got, nnvm.compile(str(tmp_path / "q.onnx")).run(image=x)[0])
    want = ort.InferenceSession(str(tmp_path / "q.onnx")).run(None, {"image": x})[0]
    assert np.abs(got - want).max() <= 0.02 * np.abs(want).max()


def test_user_mistakes(model, tmp_path, capsys):
    """In this process (``nnvm.cli.main``): a subprocess each would spend its time importing."""

    def one_sentence(*words, needles):
        assert main(list(words)) == 1
        lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert len(lines) == 1 and "Traceback" not in lines[0], lines
        for needle in needles:
            assert needle in lines[0], lines[0]

    out = str(tmp_path / "q.onnx")
    one_sentence("quantize", model, "--calibration", str(tmp_path / "nope"), "-o", out,
                 needles=["--calibration", "no such folder"])
    (tmp_path / "empty").mkdir()
    one_sentence("quantize", model, "--calibration", str(tmp_path / "empty"), "-o", out,
                 needles=["no .npy files"])
    cal = _samples(tmp_path / "bad", [(1, 3, 8, 8), (1, 3, 16, 16)])
    one_sentence("quantize", model, "--calibration", cal, "-o", out,
                 needles=["001.npy", "shape 1x3x16x16 where the model takes 1x3x8x8"])
    cal = _samples(tmp_path / "ok", [(1, 3, 8, 8)])
    one_sentence("quantize", model, "--calibration", cal, "-o", out, "--method", "kl",
                 needles=["unknown calibration method 'kl'"])
    one_sentence("quantize", model, "--calibration", cal, "-o", str(tmp_path / "no" / "q.onnx"),
                 needles=["cannot be written", "No such file or directory"])
    (tmp_path / "sub" / "s0").mkdir(parents=True)
    np.save(tmp_path / "sub" / "s0" / "img.npy", np.zeros((1, 3, 8, 8), np.float32))
    one_sentence("quantize", model, "--calibration", str(tmp_path / "sub"), "-o", out,
                 needles=["img.npy", "the model has no such input (its inputs: image)"])
    one_sentence("quantize", model, "--calibration", cal, "-o", out, "--target", "cuda",
                 needles=["--target cuda", "writes the QDQ ONNX model"])
    (tmp_path / "m-symbol.json").write_text("{}")
    one_sentence("quantize", str(tmp_path / "m-symbol.json"), "--calibration", cal, "-o", out,
                 needles=["convert it to ONNX first"])


def test_python_api_refuses_other_formats(tmp_path):
    with pytest.raises(nnvm.Error, match="this is a mxnet model: convert it to ONNX first"):
        nnvm.quantize(str(tmp_path / "net-symbol.json"), [np.zeros((1, 3, 8, 8), np.float32)])

"""What a user sees: plain ``nnvm`` commands do not import coremltools; a corrupt package, a missing
weight blob and unsupported operators are each one sentence (unsupported ones all listed at once)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

import nnvm
from nnvm.errors import ModelLoadError, UnsupportedOperatorError
from nnvm_frontend_coreml.reader import WeightFile, unpack_bits
from nnvm_testing.frontend_coreml.fuzz import nn_model, package

CLI = "import sys; from nnvm.cli import main; sys.argv = ['nnvm', *sys.argv[1:]]; sys.exit(main())"


@pytest.mark.parametrize("args", [["plugins"], ["--help"]])
def test_cli_does_not_import_coremltools(args):
    """The plugin is loaded by ``nnvm plugins``/``--help``; coremltools (seconds to import) must not be."""
    code = (
        f"import sys\nsys.argv = ['nnvm', *{args!r}]\n"
        + "try:\n    from nnvm.cli import main; main()\nexcept SystemExit:\n    pass\n"
        + "print('COREMLTOOLS' if any(m.split('.')[0] == 'coremltools' for m in sys.modules) else 'CLEAN')"
    )
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    assert out.stdout.strip().endswith("CLEAN"), out.stdout[-500:] + out.stderr[-500:]
    if args == ["plugins"]:
        assert "coreml" in out.stdout
    assert elapsed < 30


def test_plugins_lists_coreml():
    names = [getattr(f, "name", f) for f in nnvm.plugins()["frontend"]]
    assert any("coreml" in str(n) for n in names), names


def test_unsupported_layers_listed_at_once(tmp_path):
    spec = nn_model(["uniDirectionalLSTM", "activation", "gru", "uniDirectionalLSTM"])
    spec.neuralNetwork.layers[1].activation.ReLU.SetInParent()
    path = tmp_path / "bad.mlmodel"
    path.write_bytes(spec.SerializeToString())
    with pytest.raises(UnsupportedOperatorError) as info:
        nnvm.load_model(str(path))
    message = str(info.value)
    assert "uniDirectionalLSTM" in message and "gru" in message and "l0" in message and "l3" in message


def test_nn_model_in_memory_relu():
    spec = nn_model(["activation"])
    spec.neuralNetwork.layers[0].activation.ReLU.SetInParent()
    mod = nnvm.compile(spec, target="llvm")
    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    np.testing.assert_array_equal(mod.run(x)[0], np.maximum(x, 0))


def test_package_with_blob_weight(tmp_path):
    pkg = package(tmp_path, ("relu", "add"))
    mod = nnvm.compile(str(pkg), target="llvm")
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x)[0], np.maximum(x, 0) + [1.0, 2.0, 3.0], rtol=1e-6)


def test_unsupported_mil_ops_listed_at_once(tmp_path):
    pkg = package(tmp_path, ("gru", "relu", "lstm"))
    with pytest.raises(UnsupportedOperatorError) as info:
        nnvm.load_model(str(pkg))
    assert "gru" in str(info.value) and "lstm" in str(info.value)


def _one_sentence(exc) -> str:
    message = str(exc)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_missing_weight_blob(tmp_path):
    pkg = package(tmp_path, ("add",))
    (pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin").unlink()
    with pytest.raises(ModelLoadError) as info:
        nnvm.load_model(str(pkg))
    assert "weight file is missing" in _one_sentence(info.value)


def test_weight_blob_past_the_end(tmp_path):
    pkg = package(tmp_path, ("add",))
    path = pkg / "Data" / "com.apple.CoreML" / "weights" / "weight.bin"
    path.write_bytes(path.read_bytes()[:134])
    with pytest.raises(ModelLoadError) as info:
        nnvm.load_model(str(pkg))
    assert "runs past the end" in _one_sentence(info.value)


@pytest.mark.parametrize("damage", ["manifest", "model", "no_model"])
def test_corruptpackage(tmp_path, damage):
    pkg = package(tmp_path)
    if damage == "manifest":
        (pkg / "Manifest.json").write_text("{not json")
    elif damage == "model":
        (pkg / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"\xff\xff\xff garbage")
    else:
        shutil.rmtree(pkg / "Data")
    with pytest.raises(ModelLoadError) as info:
        nnvm.load_model(str(pkg))
    assert str(pkg) in _one_sentence(info.value)


def test_cli_corrupt_package_exits_1(tmp_path):
    pkg = package(tmp_path)
    (pkg / "Manifest.json").write_text("{not json")
    out = subprocess.run(
        [sys.executable, "-c", CLI, "compile", str(pkg), "--target", "llvm", "-o", str(tmp_path / "m.so")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1 and "Traceback" not in out.stderr and "Manifest.json" in out.stderr


def test_weight_file_sub_byte_and_records(tmp_path):
    assert unpack_bits(np.array([0b11100100], np.uint8), 2, 4).tolist() == [0, 1, 2, 3]
    assert unpack_bits(np.array([0xF7], np.uint8), 4, 2, signed=True).tolist() == [7, -1]
    path = tmp_path / "weight.bin"
    values = np.array([0.5, -2.0], np.float16)
    record = (np.array([0xDEADBEEF, 1], "<u4").tobytes() + np.array([4, 128], "<u8").tobytes()).ljust(
        64, b"\0"
    )
    path.write_bytes(bytes(64) + record + values.tobytes())
    assert WeightFile(path).blob(64).tolist() == [0.5, -2.0]
    with pytest.raises(ModelLoadError, match="magic"):
        WeightFile(path).blob(0)

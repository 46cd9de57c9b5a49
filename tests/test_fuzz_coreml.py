"""Hostile CoreML files through ``nnvm compile FILE --target llvm`` (issue 20): an ``.mlmodel``'s
protobuf bytes truncated, flipped and spliced, and ``.mlpackage`` folders with one thing broken (a
corrupt Manifest.json, a missing or truncated weight.bin, a blob record with a bad magic, dtype,
offset or size, an op naming a missing input, attributes and types of the wrong kind). Each gives a
module or exit 1 with one line on stderr, never a traceback, a crash or a hang.

The models are written with the protobuf classes alone (``nnvm_testing.frontend_coreml.fuzz``); both
bases are checked against numpy once. ``scripts/fuzz.py --only coreml-bytes,coreml-package`` runs the
same generators for longer.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import nnvm
from nnvm_testing.frontend_coreml.fuzz import base_models, mutate_package
from nnvm_testing.frontend_onnx.fuzz import check_cli, mutate_bytes

FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return base_models(str(tmp_path_factory.mktemp("fuzz-coreml")))


def _compile(path, tmp_path) -> int:
    return check_cli(["compile", str(path), "--target", "llvm", "-o", str(tmp_path / "m.so")])


def test_base_models_match_numpy(models):
    x = np.load(models["x_pkg"])
    (y,) = nnvm.compile(models["mlpackage"], target="llvm").run(x)
    np.testing.assert_allclose(y, np.maximum(x, 0) + [1.0, 2.0, 3.0], rtol=1e-6)
    conv = models["nn_spec"].neuralNetwork.layers[1].convolution
    w = np.array(conv.weights.floatValue, np.float32).reshape(3, 3)
    x = np.load(models["x_nn"])
    z = np.einsum("oc,nchw->nohw", w, np.maximum(x, 0)) + np.array(conv.bias.floatValue)[:, None, None]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    (y,) = nnvm.compile(models["mlmodel"], target="llvm").run(x)
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@seed(2040)
@FUZZ
@given(data=st.data())
def test_mlmodel_bytes_mutated(models, tmp_path, data):
    path = tmp_path / "m.mlmodel"
    path.write_bytes(mutate_bytes(data.draw, models["mlmodel_bytes"], models["other_bytes"]))
    _compile(path, tmp_path)


@seed(2041)
@settings(FUZZ, max_examples=60)
@given(data=st.data())
def test_mlpackage_mutated(models, tmp_path, data):
    _compile(mutate_package(data.draw, models, tmp_path / "m.mlpackage"), tmp_path)


def test_subprocess_no_hard_crash(models, tmp_path):
    """A few truncated model files and weight files through a real ``nnvm`` process."""
    import random

    from nnvm_testing.frontend_coreml.fuzz import WEIGHT_BIN, write_package

    rng = random.Random(40)
    cases = []
    for k in range(2):
        blob = models["mlmodel_bytes"]
        path = tmp_path / f"m{k}.mlmodel"
        path.write_bytes(blob[:rng.randrange(1, len(blob))])
        cases.append(path)
        pkg = write_package(tmp_path / f"p{k}.mlpackage", models["pkg_spec"])
        data = (pkg / WEIGHT_BIN).read_bytes()
        (pkg / WEIGHT_BIN).write_bytes(data[:rng.randrange(0, len(data))])
        cases.append(pkg)
    for path in cases:
        proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", str(path), "--target", "llvm",
                               "-o", str(tmp_path / "m.so")], capture_output=True, text=True, timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode == 1:
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr

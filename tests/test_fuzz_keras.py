"""Hostile Keras files through ``nnvm compile FILE --target llvm`` (issue 20): the bytes of a ``.keras``
zip and of a legacy ``.h5`` truncated, flipped and spliced, and structural mutations of the model
(fields of a wrong type, missing keys, unknown layer classes, inbound nodes pointing nowhere, cycles,
weights of a wrong shape or missing, zip members that are not HDF5). Each gives a module or exit 1
with one line on stderr, never a traceback, a crash or a hang.

The base model is written with h5py and zipfile (``nnvm_testing.frontend_keras.fuzz``), so no Keras
venv is needed; its output is checked against numpy once, so that the files really are Keras models
the frontend reads. Hypothesis runs with a fixed seed and a small budget; ``scripts/fuzz.py --only
keras-bytes,keras-fields`` runs the same generators for longer.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import nnvm
from nnvm_testing.frontend_keras.fuzz import base_config, base_models, mutate_config, write_h5, write_keras
from nnvm_testing.frontend_onnx.fuzz import check_cli, mutate_bytes

FUZZ = settings(max_examples=20, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return base_models(str(tmp_path_factory.mktemp("fuzz-keras")))


def _compile(path, tmp_path) -> int:
    return check_cli(["compile", str(path), "--target", "llvm", "-o", str(tmp_path / "m.so")])


def test_base_model_matches_numpy(models):
    """The fuzz base model is read as Keras would run it (conv 3x3 same + relu, conv 1x1, add, dense)."""
    x = np.load(models["x_npy"])
    w = models["weights"]

    def conv(x, k, b):
        kh, kw = k.shape[:2]
        xp = np.pad(x, ((0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2), (0, 0)))
        out = np.zeros((*x.shape[:3], k.shape[3]), np.float64)
        for i in range(kh):
            for j in range(kw):
                out += np.einsum("nhwc,co->nhwo", xp[:, i:i + x.shape[1], j:j + x.shape[2]], k[i, j])
        return out + b

    a = np.maximum(conv(x, *w["conv"]), 0) + conv(x, *w["conv1x1"])
    ref = a.reshape(1, -1) @ w["dense"][0] + w["dense"][1]
    for path in (models["keras"], models["h5"]):
        (y,) = nnvm.compile(path, target="llvm").run(x)
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@seed(2030)
@FUZZ
@given(data=st.data())
def test_keras_zip_bytes_mutated(models, tmp_path, data):
    blob = mutate_bytes(data.draw, models["keras_bytes"], models["other_keras_bytes"])
    path = tmp_path / "m.keras"
    path.write_bytes(blob)
    _compile(path, tmp_path)


@seed(2031)
@FUZZ
@given(data=st.data())
def test_keras_h5_bytes_mutated(models, tmp_path, data):
    blob = mutate_bytes(data.draw, models["h5_bytes"], models["other_h5_bytes"])
    path = tmp_path / "m.h5"
    path.write_bytes(blob)
    _compile(path, tmp_path)


@seed(2032)
@settings(FUZZ, max_examples=40)
@given(data=st.data())
def test_keras_structure_mutated(models, tmp_path, data):
    """One structural change, written both as ``.keras`` and (without the zip-only changes) ``.h5``."""
    config, weights, members = mutate_config(data.draw, models["config"], models["weights"])
    _compile(write_keras(str(tmp_path / "m.keras"), config, weights, members, layout=base_config()), tmp_path)
    if not members:
        _compile(write_h5(str(tmp_path / "m.h5"), config, weights, layout=base_config()), tmp_path)


def test_subprocess_no_hard_crash(models, tmp_path):
    """A few truncated and garbled files through a real ``nnvm`` process (a crash kills the process)."""
    import random

    rng = random.Random(30)
    for k, blob in enumerate([models["keras_bytes"], models["h5_bytes"]] * 2):
        cut = rng.randrange(1, len(blob))
        case = blob[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 16)))
        path = tmp_path / f"m{k}{'.keras' if k % 2 == 0 else '.h5'}"
        path.write_bytes(case)
        proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "compile", str(path), "--target", "llvm",
                               "-o", str(tmp_path / "m.so")], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ))
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode == 1:
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr

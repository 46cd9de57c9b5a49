"""Hostile and corrupted input through the command line (issue 20): ONNX models, ``.npy`` inputs and
tuning logs, mutated byte by byte and field by field, must each give a result or exit 1 with one line
on stderr, never a traceback (exit 2), a crash or a hang.

Everything goes through ``nnvm.cli.main`` in this process, exactly what ``nnvm compile``/``nnvm run``
run, except a few cases through a real ``nnvm`` subprocess, which would also catch a hard crash
(a segfault kills the process, not an exception). Hypothesis runs with a fixed seed and a small
budget; ``scripts/fuzz.py`` runs the same generators for as long as it is given.
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
from nnvm.autotune import log as tlog
from nnvm_testing.frontend_onnx.fuzz import (
    base_models,
    check_cli,
    mutate_bytes,
    mutate_model,
    npy_bytes,
    tuning_log_bytes,
)

FUZZ = settings(max_examples=25, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz-models")
    return base_models(str(folder))


@seed(2020)
@FUZZ
@given(data=st.data())
def test_onnx_bytes_mutated(models, tmp_path, data):
    """Truncated, flipped, spliced and padded bytes of an ONNX model through ``nnvm run``."""
    blob = mutate_bytes(data.draw, models["bytes"], models["other_bytes"])
    path = tmp_path / "model.onnx"
    path.write_bytes(blob)
    check_cli(["run", str(path), "--input", f"x={models['x_npy']}"])


@seed(2021)
@FUZZ
@given(data=st.data())
def test_onnx_structure_mutated(models, tmp_path, data):
    """Models with a field changed (opset, IR version, dims, data types, raw data, node inputs, external
    data locations) through ``nnvm run``."""
    path = mutate_model(data.draw, models["proto"], str(tmp_path))
    check_cli(["run", path, "--input", f"x={models['x_npy']}"])


@seed(2022)
@FUZZ
@given(data=st.data())
def test_npy_inputs_mutated(models, tmp_path, data):
    """Corrupted ``.npy`` inputs to ``nnvm run`` (the model itself is fine)."""
    path = tmp_path / "x.npy"
    path.write_bytes(npy_bytes(data.draw))
    check_cli(["run", models["path"], "--input", f"x={path}"])


@seed(2023)
@settings(max_examples=200, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tuning_logs_mutated(tmp_path, data):
    """A tuning log's bytes mutated: reading it gives records or one ``nnvm.Error`` sentence, and a torn
    last line never makes a log unreadable once more records are appended."""
    blob, torn_only = tuning_log_bytes(data.draw)
    path = tmp_path / "log.jsonl"
    path.write_bytes(blob)
    try:
        before = tlog.read(path)
    except nnvm.Error as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        assert not torn_only, f"a log whose only damage is a torn last line was refused: {exc}"
        return
    rec = tlog.Record("llvm", "t", "w", {"k": 1}, 1e-3)
    tlog.append(path, [rec])
    after = tlog.read(path)
    assert after[:len(before)] == before and after[-1].config == {"k": 1}


def _error_line(argv: list[str], capsys) -> str:
    from nnvm.cli import main

    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnvm: error: "), err
    return err[0]


def test_known_cases(models, tmp_path, capsys, monkeypatch):
    """The cases issue 20 names, each one sentence: a missing external data file, opset 999, an IR
    version from the future; and the limits: a shape whose size overflows 64 bits, activations beyond
    the available memory (``NNVM_MEMORY_LIMIT`` stands in for a small machine)."""
    import onnx
    from onnx.external_data_helper import convert_model_to_external_data

    x = ["--input", f"x={models['x_npy']}"]
    m = onnx.ModelProto()
    m.CopyFrom(models["proto"])
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    onnx.save(m, str(tmp_path / "ext.onnx"))
    os.remove(tmp_path / "weights.bin")
    line = _error_line(["run", str(tmp_path / "ext.onnx"), *x], capsys)
    assert "'weights.bin'" in line and "missing" in line

    m.CopyFrom(models["proto"])
    m.opset_import[0].version = 999
    onnx.save(m, str(tmp_path / "opset.onnx"))
    line = _error_line(["compile", str(tmp_path / "opset.onnx"), "--target", "llvm", "-o",
                        str(tmp_path / "o.so")], capsys)
    assert "opset 999 is not supported" in line and "opsets 1 to" in line

    m.CopyFrom(models["proto"])
    m.ir_version = 99
    onnx.save(m, str(tmp_path / "ir.onnx"))
    assert "IR version 99 is newer" in _error_line(["run", str(tmp_path / "ir.onnx"), *x], capsys)

    line = _error_line(["run", models["path"], "--shape", "x=4000000000x4000000000x4000000000x4", *x], capsys)
    assert "more than 64-bit sizes allow" in line and "input 'x'" in line
    monkeypatch.setenv("NNVM_MEMORY_LIMIT", "100")
    line = _error_line(["run", models["path"], *x], capsys)
    assert "activations would need" in line and "100 bytes of memory available" in line


def test_subprocess_no_hard_crash(models, tmp_path):
    """A few mutated models and inputs through a real ``nnvm`` process: exit 0 or 1, one line."""
    import random

    rng = random.Random(20)
    blob = models["bytes"]
    cases = []
    for _ in range(4):
        cut = rng.randrange(1, len(blob))
        cases.append(blob[:cut] + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 16))))
    for k, case in enumerate(cases):
        path = tmp_path / f"m{k}.onnx"
        path.write_bytes(case)
        proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "run", str(path), "--input",
                               f"x={models['x_npy']}"], capture_output=True, text=True, timeout=300,
                              env=dict(os.environ))
        assert proc.returncode in (0, 1), proc.stderr
        if proc.returncode == 1:
            assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    np.save(tmp_path / "bad.npy", np.zeros(3, np.float32))
    data = (tmp_path / "bad.npy").read_bytes()
    (tmp_path / "bad.npy").write_bytes(data[:-4])
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "run", models["path"], "--input",
                           f"x={tmp_path / 'bad.npy'}"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr

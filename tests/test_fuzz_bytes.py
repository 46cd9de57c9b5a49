"""Byte-level corruption of every format ``nnvm`` reads (issue 34): truncated, bit-flipped, zeroed and
overwritten copies of an ONNX model, an MXNet symbol and its ``.params``, Keras ``.h5`` and ``.keras``,
CoreML ``.mlmodel`` and ``.mlpackage`` files (NeuralNetwork and ML Program), exported modules (CPU and
the GPU zips) and ``.npy`` inputs, each through ``nnvm run`` in a child process. Each gives a result or
exit 1 with one sentence naming the file; never a traceback, a crash or a hang.

A few mutants per format with fixed seeds; ``scripts/fuzz.py --bytes --mutants 200`` runs many
(``bench/RESULTS.md`` records such a run).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import nnvm
from nnvm.errors import ModelLoadError, reading
from nnvm_testing.frontend_onnx.byte_fuzz import FORMATS, corrupt, fuzz_format

MUTANTS = 6
SEED = 34


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_corrupted_bytes(name, tmp_path):
    report = fuzz_format(name, tmp_path, MUTANTS, SEED)
    assert not report["failures"], "\n\n".join(f"{case}\n{problem}" for case, problem in report["failures"])
    assert report["exit 0"] + report["exit 1"] == MUTANTS


def test_mutations_damage_the_bytes():
    """Each kind of damage is drawn, and changes what it is given."""
    rng = random.Random(1)
    blob = bytes(range(256)) * 4
    seen = set()
    for _ in range(200):
        what, out = corrupt(rng, blob)
        seen |= {word for word in ("truncated", "flipped", "zeroed", "overwritten") if word in what}
        assert out != blob or "zeroed" in what
    assert seen == {"truncated", "flipped", "zeroed", "overwritten"}


def test_mxnet_base_model_matches_numpy(tmp_path):
    """The MXNet files the fuzz suite corrupts are the model numpy computes."""
    from nnvm_testing.frontend_mxnet.fuzz import base_model, reference

    m = base_model(str(tmp_path))
    x = np.load(m["x_npy"])
    (y,) = nnvm.compile(m["symbol"], target="llvm").run(x)
    np.testing.assert_allclose(y, reference(x), rtol=1e-4, atol=1e-4)


def test_reading_turns_a_library_error_into_the_files_error():
    with pytest.raises(ModelLoadError) as info:
        with reading("m.h5", "not a readable Keras .h5 file"):
            raise RuntimeError("Unable to synchronously check link existence (bad heap free list)\nmore")
    assert str(info.value) == ("m.h5: not a readable Keras .h5 file (Unable to synchronously check link "
                               "existence (bad heap free list))")
    with pytest.raises(ModelLoadError, match="^m.npy: cannot be read \\(a size in it is too large"):
        with reading("m.npy"):
            raise MemoryError()
    with pytest.raises(nnvm.InputError, match="^ours$"):  # an nnvm error already says where
        with reading("m.npy"):
            raise nnvm.InputError("ours")


def test_a_read_that_hangs_or_crashes_is_the_files_error(tmp_path):
    """``read_isolated``: what HDF5 does to some damaged ``.h5`` files (loop forever), and a crash."""
    import os
    import time

    from nnvm.frontend import read_isolated

    path = tmp_path / "m.h5"
    path.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="did not finish in 1 s"):
        read_isolated(str(path), lambda p: time.sleep(60), "not a readable Keras .h5 file", seconds=1)
    with pytest.raises(ModelLoadError, match="crashed with SIGABRT"):
        read_isolated(str(path), lambda p: os.abort(), "not readable")
    read_isolated(str(path), lambda p: 1 / 0, "not readable")  # exceptions are the real read's to raise


def test_a_case_that_kills_or_hangs_the_child_is_reported(tmp_path, monkeypatch):
    """The runner's own check: a child aborting on one case and hanging on the next reports those two
    cases (a signal, a timeout) and still runs the rest in a new child. The other cases return at once
    (the runner is under test, not the compiler), so the timeout only has to cover a child's start, even
    on a loaded machine."""
    from nnvm_testing.frontend_onnx import byte_fuzz

    cases = byte_fuzz.make_cases(FORMATS["onnx"](tmp_path), tmp_path / "cases", 3, SEED)
    sabotage = ("        import os, time\n        if k == 1: os.abort()\n        if k == 2: time.sleep(600)\n"
                "        main = lambda argv: 0\n")
    monkeypatch.setattr(byte_fuzz, "_CHILD", byte_fuzz._CHILD.replace("        rc = main(argv)\n",
                                                                      sabotage + "        rc = main(argv)\n"))
    results = byte_fuzz.run_cases(cases, timeout=8)
    assert [results[k]["rc"] for k in range(4)][1:3] == ["signal 6", "timeout"]
    assert results[0]["rc"] == 0 and results[3]["rc"] in (0, 1)


def test_names_from_a_damaged_file_stay_in_one_line():
    """What the long run found in ONNX files with flipped bits: an operator name protobuf returns as
    bytes (not UTF-8) beside str ones, and a node name holding a newline."""
    from nnvm.cli import one_line

    exc = nnvm.UnsupportedOperatorError("ONNX", {"CoNv": ["conv"], b"r\xe5shape": ["flat"]}, "m.onnx")
    assert "CoNv (nodes: conv); b'r\\xe5shape' (nodes: flat)" in str(exc)
    assert one_line("node conv\"\x04Conv*\n\x04pads") == "node conv\"\\x04Conv*\\n\\x04pads"

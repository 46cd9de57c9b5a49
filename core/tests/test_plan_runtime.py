"""The runtime's side of the plan: a module whose kernels cannot run in this process (code for another
CPU) is exported once and run by its library elsewhere, and says so on stderr once per module."""

from __future__ import annotations

import numpy as np

import nnvm.runtime.module
from nnvm.backend import KernelLibrary
from nnvm.runtime.module import Module


class _OutOfProcessLibrary(KernelLibrary):
    """Kernels for another CPU: ``run_exported`` stands in for the emulator (it negates the input)."""

    def __init__(self):
        self.exports = []

    def runs_in_process(self) -> bool:
        return False

    def emulation_note(self) -> str:
        return "running under a test emulator"

    def export(self, path: str, blobs: dict) -> None:
        self.exports.append(path)

    def run_exported(self, path: str, inputs: list, outputs: list) -> list:
        return [-inputs[0]]


def _plan() -> dict:
    desc = {"name": "x", "shape": [2], "dtype": "float32", "ref": {"arena": 0, "nbytes": 8}}
    return {"inputs": [desc], "outputs": [dict(desc, name="y")], "calls": [], "arena_bytes": 8}


def test_out_of_process_module_is_exported_and_noted_once(capsys, monkeypatch):
    monkeypatch.setattr(nnvm.runtime.module, "_NOTES_SHOWN", set())
    libraries = [_OutOfProcessLibrary(), _OutOfProcessLibrary()]
    x = np.array([1, -2], np.float32)
    for lib in libraries:
        mod = Module(_plan(), {}, lib, "fake", {})
        for _ in range(2):
            np.testing.assert_array_equal(mod.run(x)[0], -x)
    assert [len(lib.exports) for lib in libraries] == [1, 1]  # exported once per module
    assert capsys.readouterr().err.count("running under a test emulator") == 1  # one per process


def test_out_of_process_module_from_threads_exports_once(monkeypatch):
    """Several threads' first runs race to export the module: one export, every result its own."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(nnvm.runtime.module, "_NOTES_SHOWN", set())
    lib = _OutOfProcessLibrary()
    mod = Module(_plan(), {}, lib, "fake", {})
    xs = [np.array([k, -k], np.float32) for k in range(16)]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda x: mod.run(x)[0], xs))
    for x, out in zip(xs, outs):
        np.testing.assert_array_equal(out, -x)
    assert len(lib.exports) == 1

"""The exported module file's footer (``nnvm.runtime.artifact``): ``nnvm.load`` refuses a truncated,
corrupted, newer-format or foreign-target file with one sentence, before ``dlopen``; a good file loads
and matches numpy."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.runtime import artifact


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    rng = np.random.default_rng(7)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path_factory.mktemp("format") / "dense.so"
    nnvm.compile(model, target="llvm").export(path)
    x = rng.standard_normal((2, 16)).astype(np.float32)
    return path, x, x.astype(np.float64) @ w.T.astype(np.float64)


def test_footer_fields_and_roundtrip(exported, tmp_path):
    path, x, want = exported
    footer = artifact.check(str(path))
    assert footer["version"] == artifact.BOUND_FORMAT_VERSION and footer["target"] == "llvm"
    # the default target is this machine's CPU: its extensions are recorded, and this CPU has them all
    assert "sse4.2" in footer["features"] and not artifact.host_lacks(footer["probes"]), footer
    listed = len(artifact.feature_list(footer["probes"]))
    assert footer["machine"] == 62 and footer["payload_bytes"] == path.stat().st_size - 64 - listed
    mod = nnvm.load(path)
    np.testing.assert_allclose(mod.run(x)[0], want, rtol=1e-4, atol=1e-4)
    again = tmp_path / "again.so"  # a loaded module exported again keeps exactly one footer
    mod.export(again)
    assert again.stat().st_size == path.stat().st_size
    np.testing.assert_allclose(nnvm.load(again).run(x)[0], want, rtol=1e-4, atol=1e-4)


def _patched(path, tmp_path, edit) -> str:
    data = bytearray(path.read_bytes())
    edit(data)
    out = tmp_path / "bad.so"
    out.write_bytes(bytes(data))
    return str(out)


def _set_footer(offset, fmt, value):
    def edit(data):
        struct.pack_into(fmt, data, len(data) - 64 + offset, value)
    return edit


def _sparc(data):
    """A consistent, checksummed module for a CPU no backend builds for (ELF machine 2, SPARC)."""
    import zlib

    data[18] = 2
    _set_footer(24, "<H", 2)(data)
    _set_footer(32, "<32s", b"sparc64")(data)
    _set_footer(12, "<I", zlib.crc32(bytes(data[:-64])))(data)


@pytest.mark.parametrize("name, edit, message", [
    ("truncated", lambda d: d.__delitem__(slice(len(d) - 1000, None)), "no nnvm module footer"),
    ("cut to 100 bytes", lambda d: d.__delitem__(slice(100, None)), "too short"),
    ("flipped weight byte", lambda d: d.__setitem__(len(d) // 2, d[len(d) // 2] ^ 0x40), "checksum mismatch"),
    ("flipped ELF machine", lambda d: d.__setitem__(18, 183), "does not match the module footer"),
    ("newer format", _set_footer(8, "<I", artifact.FORMAT_VERSION + 1), "newer than this nnvm reads"),
    ("size field", _set_footer(16, "<Q", 12345), "truncated or corrupted"),
    ("SPARC module", _sparc, "sparc64 target .SPARC.*no installed nnvm backend"),
])
def test_bad_files_are_one_sentence(exported, tmp_path, name, edit, message):
    bad = _patched(exported[0], tmp_path, edit)
    with pytest.raises(nnvm.ModelLoadError, match=message) as info:
        nnvm.load(bad)
    text = str(info.value)
    assert text.startswith(bad) and "\n" not in text, f"{name}: {text!r}"


def test_cli_run_of_a_corrupted_file_exits_1(exported, tmp_path):
    import subprocess
    import sys

    bad = _patched(exported[0], tmp_path, lambda d: d.__setitem__(len(d) // 2, d[len(d) // 2] ^ 1))
    np.save(tmp_path / "x.npy", exported[1])
    cmd = [sys.executable, "-m", "nnvm.cli", "run", bad, "--input", f"x={tmp_path / 'x.npy'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "checksum mismatch" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def _lacked_features() -> list:
    """(name, probe) of an x86 extension this CPU lacks (an AVX-512 FP16 or AMX one on most hosts), and of
    one whose probe no loader of today can read (a newer nnvm's), which is refused on every host."""
    from nnvm_backend_llvm_x86.isa import FEATURE_PROBES

    lacked = [(n, p) for n, p in FEATURE_PROBES.items() if artifact.host_lacks({n: p})]
    return [*lacked[-1:], ("future-ext", "newkind:7")]


@pytest.mark.parametrize("index", [0, 1])
def test_module_for_a_cpu_with_more_extensions_is_refused_before_dlopen(exported, tmp_path, index):
    """Exported on an AVX-512 machine, loaded on an AVX2 one: one sentence naming what this CPU lacks,
    not SIGILL in the first kernel."""
    wanted = _lacked_features()
    if index >= len(wanted):
        pytest.fail("no x86 extension the footer records is missing here")
    name, probe = wanted[index]
    bad = tmp_path / "more.so"
    bad.write_bytes(exported[0].read_bytes())
    artifact.seal(str(bad), "llvm", {**artifact.check(str(exported[0]))["probes"], name: probe})
    with pytest.raises(nnvm.ModelLoadError, match=f"compiled for a CPU with {name}, which this CPU lacks"):
        nnvm.load(bad)


def test_the_footer_records_and_checks_features_of_any_architecture(exported, tmp_path, monkeypatch):
    """A RISC-V module's V (an AT_HWCAP bit) is recorded like x86's AVX-512 (a cpuinfo flag), and a host
    whose kernel does not report it refuses the module by name."""
    copy = tmp_path / "probes.so"
    copy.write_bytes(exported[0].read_bytes())
    artifact.seal(str(copy), "llvm", {"v": "hwcap:21", "avx2": "cpuinfo:avx2"})
    assert artifact.check(str(copy))["probes"] == {"v": "hwcap:21", "avx2": "cpuinfo:avx2"}
    monkeypatch.setattr(artifact, "_hwcaps", lambda: {16: 1 << 21})
    monkeypatch.setattr(artifact, "_cpuinfo_flags", lambda: frozenset({"avx2"}))
    assert artifact.host_lacks({"v": "hwcap:21", "avx2": "cpuinfo:avx2"}) == []
    monkeypatch.setattr(artifact, "_hwcaps", lambda: {16: 0})
    assert artifact.host_lacks({"v": "hwcap:21", "avx2": "cpuinfo:avx2", "x": "hwcap2:3"}) == ["v", "x"]


def test_in_process_run_of_code_for_missing_extensions_is_an_error(monkeypatch):
    """Compiling for a CPU with extensions this one lacks is a cross compile: running it in process
    is one sentence (never the JIT's SIGILL); exporting it still works."""
    from nnvm_backend_llvm_x86.isa import code_features

    monkeypatch.setattr(artifact, "_cpuinfo_flags", lambda: frozenset({"sse4_1", "sse4_2", "avx", "avx2",
                                                                       "fma", "f16c"}))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    mod = nnvm.compile(model, target="llvm -mcpu=skylake-avx512")
    assert "avx512f" in code_features(mod.library.target)
    with pytest.raises(nnvm.Error, match="use avx512f.*which this CPU lacks"):
        mod.run(np.ones((4, 16), np.float32))

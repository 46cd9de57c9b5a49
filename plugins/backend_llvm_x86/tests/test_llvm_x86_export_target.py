"""Exported shared libraries (kernels + blobs, loaded back by ctypes alone) and target options."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.errors import TargetError
from nnvm.target import parse_target
from nnvm_backend_llvm_x86.plugin import X86Backend


def _scaled_add():
    A = te.placeholder((100, 70), name="A")
    B = te.placeholder((70,), name="B")
    C = te.compute((100, 70), lambda i, j: A[i, j] * 2.0 + B[j], name="C")
    s = te.create_schedule(C.op)
    s[C].parallel(C.op.axis[0])
    _, ji = s[C].split(C.op.axis[1], factor=8)
    s[C].vectorize(ji)
    return s, [A, B, C]


_LOADER = textwrap.dedent("""
    import ctypes, hashlib, json, sys
    import numpy as np
    path, expected = sys.argv[1], json.loads(sys.argv[2])
    lib = ctypes.CDLL(path)
    for name, digest in expected.items():
        size = ctypes.c_uint64.in_dll(lib, f"nnvm_blob_{name}_size").value
        addr = ctypes.addressof(ctypes.c_uint8.in_dll(lib, f"nnvm_blob_{name}"))
        assert addr % 64 == 0, f"blob {name} at {addr:#x} is not 64-byte aligned"
        data = ctypes.string_at(addr, size)
        assert hashlib.sha256(data).hexdigest() == digest, f"blob {name} differs"
    kernel = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p)(ctypes.cast(lib.kernel, ctypes.c_void_p).value)
    a = np.arange(7000, dtype="float32").reshape(100, 70)
    b = np.linspace(-1, 1, 70).astype("float32")
    c = np.zeros((100, 70), "float32")
    ptrs = (ctypes.c_void_p * 3)(a.ctypes.data, b.ctypes.data, c.ctypes.data)
    assert kernel(ctypes.cast(ptrs, ctypes.c_void_p)) == 0
    assert np.allclose(c, a * 2 + b), "wrong kernel result"
    print("ok")
""")


def test_export_shared_library_with_blobs(tmp_path):
    s, args = _scaled_add()
    f = nnvm.build(s, args, target="llvm", name="kernel")
    rng = np.random.default_rng(0)
    blobs = {
        "graph": json.dumps({"nodes": ["x"]}).encode(),
        "params": rng.integers(0, 256, 3 << 20, dtype=np.uint8).tobytes(),
        "empty": b"",
    }
    path = tmp_path / "kernels.so"
    f.library.export(str(path), blobs)
    expected = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    proc = subprocess.run([sys.executable, "-c", _LOADER, str(path), json.dumps(expected)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout + proc.stderr
    # exporting again over a file that is loaded in this process replaces it safely
    from nnvm.runtime.module import SharedLibrary

    loaded = SharedLibrary(str(path))
    assert bytes(loaded.blob("graph")) == blobs["graph"]
    f.library.export(str(path), blobs)


def test_export_needs_a_c_compiler(tmp_path, monkeypatch):
    s, args = _scaled_add()
    f = nnvm.build(s, args, target="llvm")
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(nnvm.Error, match="C compiler"):
        f.library.export(str(tmp_path / "x.so"), {"graph": b"{}"})


def test_export_rejects_bad_blob_names(tmp_path):
    s, args = _scaled_add()
    f = nnvm.build(s, args, target="llvm")
    with pytest.raises(nnvm.Error, match="blob name"):
        f.library.export(str(tmp_path / "x.so"), {"bad name": b"1"})


@pytest.mark.parametrize("text, what", [
    ("llvm -foo=1", "-foo"),
    ("llvm -mcpu=not-a-cpu", "not-a-cpu"),
    ("llvm -mattr=+not-a-feature", "not-a-feature"),
    ("llvm -mattr=avx2", "avx2"),
    ("llvm -mcpu", "-mcpu"),
    ("llvm -mtriple=aarch64-linux-gnu", "aarch64"),
])
def test_bad_target_options(text, what):
    with pytest.raises(TargetError, match=what):
        X86Backend().check_target(parse_target(text))


def test_target_options_select_cpu_and_features(close):
    backend = X86Backend()
    host = backend.resolve(parse_target("llvm"))
    assert host.cpu and host.features
    assert backend.host_can_run(parse_target("llvm"))
    assert not backend.host_can_run(parse_target("llvm -mtriple=x86_64-apple-darwin"))
    assert backend.host_can_run(parse_target("llvm -mtriple=x86_64-linux-gnu")) == (
        backend.host_can_run(parse_target("llvm -mtriple=x86_64-pc-linux-gnu")))
    assert backend.resolve(parse_target("llvm -mcpu=haswell")).cpu == "haswell"
    assert backend.resolve(parse_target("llvm -mattr=-avx512f")).features.endswith(",-avx512f")
    if "+avx2" not in host.features:
        pytest.skip("the host has no AVX2")
    s, args = _scaled_add()
    f = nnvm.build(s, args, target="llvm -mcpu=haswell")
    asm = f.library.assembly()
    assert "ymm" in asm and "zmm" not in asm, "haswell code must use AVX2, never AVX-512"
    a = np.ones((100, 70), "float32")
    b = np.arange(70, dtype="float32")
    c = np.zeros_like(a)
    f(a, b, c)
    close("haswell kernel", c, a * 2 + b)


def test_cross_triple_builds_without_running():
    s, args = _scaled_add()
    from nnvm.te.lower import lower_schedule

    darwin = parse_target("llvm -mtriple=x86_64-apple-darwin")
    lib = X86Backend().build([lower_schedule(s, args, "k")], darwin)
    assert "x86_64-apple-darwin" in lib.source()
    with pytest.raises(nnvm.Error, match="cannot run"):
        lib.address("k")


def test_kernel_names_that_clash_with_runtime_functions():
    s, args = _scaled_add()
    with pytest.raises(nnvm.Error, match="taken by a runtime function"):
        nnvm.build(s, args, target="llvm", name="free")


@pytest.mark.parametrize("text, lanes, has, lacks", [
    ("llvm -mcpu=haswell", 8, "avx2", "avx512f"),
    ("llvm -mcpu=x86-64-v4", 16, "avx512bw", "amx-tile"),
    ("llvm -mattr=-avx512f", 8, "fma", "avx512bw"),  # after the host's +avx512f: off, and what needs it
    ("llvm -mattr=-avx", 4, "sse4.2", "avx2"),
])
def test_feature_string_read_in_order_for_vector_width_and_recorded_extensions(text, lanes, has, lacks):
    """The schedules' vector width and the extensions an export records (its footer) follow the last
    word on a feature: ``-mattr=-avx512f`` on an AVX-512 host is AVX2 code, not AVX-512 schedules."""
    from nnvm.cpu.schedule_helpers import vector_lanes
    from nnvm_backend_llvm_x86.isa import code_features

    host = X86Backend().resolve(parse_target("llvm"))
    if text.startswith("llvm -mattr") and "+avx2" not in host.features:
        pytest.fail("this test needs an AVX2 host (the project's CI machines all have one)")
    target = parse_target(text)
    assert vector_lanes(target) == lanes
    features = code_features(X86Backend().resolve(target))
    assert has in features and lacks not in features, features


@pytest.mark.parametrize("cpu,mattr,lanes", [
    ("x86-64-v3", "-avx512f", 8), ("x86-64-v3", "+avx512f", 16), ("x86-64-v3", "-avx2,-avx", 4),
    ("skylake-avx512", "-avx512f", 8), ("skylake-avx512", "", 16), ("haswell", "", 8), ("x86-64", "", 4),
    ("x86-64", "+avx2", 8), ("cascadelake", "+avx512f,-avx512f", 8)])
def test_vector_lanes_of_a_named_cpu_with_features_added_or_removed(cpu, mattr, lanes):
    """``-mcpu=NAME -mattr=...``: what ``-mattr`` does not say is the named CPU's (x86-64-v3 with
    -avx512f was read as SSE's 4 lanes)."""
    from nnvm_backend_llvm import LLVMTarget
    from nnvm_backend_llvm_x86.isa import x86_vector_lanes

    assert x86_vector_lanes(LLVMTarget("x86_64-unknown-linux-gnu", cpu, mattr)) == lanes

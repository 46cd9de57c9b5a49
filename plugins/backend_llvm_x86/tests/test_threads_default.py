"""Without NNVM_NUM_THREADS or OMP_NUM_THREADS, parallel kernels use one thread per physical core, in
the compiling process and in a fresh process that loads an exported library."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def _cores_from_cpuinfo() -> int:
    """Physical cores as /proc/cpuinfo counts them (distinct physical id / core id pairs), an
    independent reading of what ``nnvm.runtime.threads`` reads from sysfs."""
    pairs, cpus, package = set(), 0, "0"
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "processor":
                cpus += 1
            elif key == "physical id":
                package = value
            elif key == "core id":
                pairs.add((package, value))
    return len(pairs) or cpus


CHILD = textwrap.dedent("""
    import numpy as np
    import nnvm
    from nnvm import te

    A = te.placeholder((64, 100), name="A")
    B = te.compute((64, 100), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    f = nnvm.build(s, [A, B], target="llvm")
    a = np.ones((64, 100), "float32"); b = np.zeros_like(a)
    f(a, b)
    assert (b == 2).all()
    print("built", f.library.num_threads())
""")

LOADER = textwrap.dedent("""
    import ctypes, sys
    import numpy as np
    import nnvm
    mod = nnvm.load(sys.argv[1])
    print("loaded_ok", bool(np.isfinite(mod.run(np.ones((1, 8, 16, 16), "float32"))[0]).all()))
    fn = ctypes.CFUNCTYPE(ctypes.c_int32)(mod.library.address("nnvm_llvm_num_threads"))
    print("loaded", fn())
""")


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("NNVM_NUM_THREADS", "OMP_NUM_THREADS")}


def test_default_team_is_physical_cores(tmp_path, conv_model):
    if not os.path.exists("/proc/cpuinfo"):
        raise AssertionError("this test reads the CPU topology from /proc/cpuinfo (Linux)")
    want = _cores_from_cpuinfo()
    try:
        want = min(want, len(os.sched_getaffinity(0)))
    except AttributeError:
        pass
    out = subprocess.run([sys.executable, "-c", CHILD], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"built {want}" in out.stdout, f"expected {want} threads (physical cores): {out.stdout}"

    import nnvm

    path = conv_model(str(tmp_path / "c.onnx"), 8, 16)
    so = str(tmp_path / "c.so")
    nnvm.compile(path, target="llvm").export(so)
    out = subprocess.run([sys.executable, "-c", LOADER, so], env=_env(), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert "loaded_ok True" in out.stdout, out.stdout
    assert f"loaded {want}" in out.stdout, f"expected {want} threads (physical cores): {out.stdout}"

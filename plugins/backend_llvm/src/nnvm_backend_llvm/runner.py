"""The device runtime ``nnvm-run`` (the core's C runtime, ``nnvm/runtime/c``): built for a target, run
under qemu-user.

The runner is built once per target with the cross compiler (``-Os``, stripped, the runtime linked in
statically) and cached by ``nnvm.runtime.crt``, so tests and ``mod.run`` pay the compile once. On a
host of another CPU every run goes through ``qemu-<arch> -L /usr/<gnu triple>``, which loads the
target's C library and libm from the cross sysroot; on a matching host it runs as is.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from nnvm import environment
from nnvm.errors import Error
from nnvm.runtime.crt import build_runtime, runtime_target
from nnvm_backend_llvm.cross import CrossToolchain
from nnvm_backend_llvm.library import pool_build

RUN_TIMEOUT_S = 1800  # a large model under an emulator on a busy machine is slow, not hung
TIMER_SOURCE = Path(__file__).with_name("kernel_timer.c")


def build_runner(tc: CrossToolchain) -> str:
    """The path of ``nnvm-run`` for ``tc``'s target: the core's C runtime (``nnvm.runtime.crt``) built
    with the cross compiler on first use and cached."""
    tc.require_cc("building the nnvm-run device runtime")  # names the cross package to install
    return build_runtime(runtime_target(tc.kind))["nnvm-run"]


def run_artifact(tc: CrossToolchain, path: str, inputs: list, outputs: list, threads: int | None = None
                 ) -> list[np.ndarray]:
    """Run the exported module ``path`` on ``inputs`` (arrays in the plan's input order) with the
    device runtime; ``outputs`` is the plan's output descriptions. Returns the output arrays."""
    exe = build_runner(tc)
    env = dict(os.environ)
    if threads is not None:
        env["NNVM_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="nnvm-cross-run-") as tmp:
        in_paths, out_paths = [], []
        for k, arr in enumerate(inputs):
            in_paths.append(os.path.join(tmp, f"in{k}.npy"))
            np.save(in_paths[-1], np.asarray(arr, order="C"))  # (ascontiguousarray makes a 0-d input 1-d)
        out_paths = [os.path.join(tmp, f"out{k}.npy") for k in range(len(outputs))]
        cmd = [*tc.emulator(), exe, os.path.abspath(path), *in_paths, "-o", *out_paths]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise Error(f"{path}: running under {cmd[0]} took over {RUN_TIMEOUT_S} s; stopped") from None
        if proc.returncode != 0:
            detail = (proc.stderr.strip() or proc.stdout.strip() or f"exit status {proc.returncode}")
            raise Error(f"{path}: the {tc.kind} runtime failed: {detail.splitlines()[-1]}")
        return [np.load(p) for p in out_paths]


def runtime_sizes(tc: CrossToolchain) -> dict:
    """Bytes on disk of what a device needs besides the model file: the runner (stripped) and, for
    reference, the thread pool every parallel model carries (``nnvm_pool.c`` compiled for the target;
    an object file, so an upper bound of what it adds to a model)."""
    cc = tc.require_cc("building the nnvm-run device runtime")
    exe = build_runner(tc)
    return {"nnvm-run": os.path.getsize(exe),
            "nnvm_pool.o": os.path.getsize(pool_build(cc, "o", f"building the {tc.kind} thread pool"))}


def build_timer(tc: CrossToolchain) -> str:
    """``kernel_timer.c`` built with ``tc``'s compiler, cached like the thread pool (source, compiler)."""
    cc = tc.require_cc("timing a kernel for the tuner")
    key = hashlib.sha256(TIMER_SOURCE.read_bytes() + cc.encode()).hexdigest()[:16]
    out = os.path.join(environment.cache_dir(), "kernel-timer", f"{tc.kind}-{key}")
    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".timer-", dir=os.path.dirname(out))
    os.close(fd)
    try:
        proc = subprocess.run([cc, "-O2", "-o", tmp, str(TIMER_SOURCE), "-ldl", "-lm"], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise Error(f"compiling the kernel timer with {cc} failed: {proc.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def time_kernel(tc: CrossToolchain, library, name: str, arrays: list, repeat: int,
                min_repeat_ms: float) -> list[float]:
    """Seconds per call of kernel ``name`` of ``library`` in each of ``repeat`` rounds, run by the
    kernel timer under ``tc``'s emulator (exported to a temporary shared library first)."""
    exe = build_timer(tc)
    with tempfile.TemporaryDirectory(prefix="nnvm-cross-time-") as tmp:
        path = os.path.join(tmp, "kernels.so")
        library.export(path, {})
        buffers = []
        for k, arr in enumerate(arrays):
            buffers.append(os.path.join(tmp, f"buf{k}.bin"))
            np.ascontiguousarray(arr).tofile(buffers[-1])
        cmd = [*tc.emulator(), exe, path, name, str(repeat), repr(float(min_repeat_ms)), *buffers]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if proc.returncode != 0:
            detail = proc.stderr.strip() or f"exit status {proc.returncode}"
            raise Error(f"timing {name} under {cmd[0]} failed: {detail.splitlines()[-1]}")
        return [float(line) for line in proc.stdout.split()]

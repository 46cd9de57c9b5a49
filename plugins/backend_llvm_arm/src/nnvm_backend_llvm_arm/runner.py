"""The device runtime ``nnvm-run`` (``runtime/nnvm_run.c``): built for a target, run under qemu-user.

The runner is built once per target with the cross compiler (``-Os``, stripped) and cached under
``$NNVM_CACHE_DIR/arm-runtime`` keyed by a hash of its source, so tests and ``mod.run`` pay the
compile once. On an x86 host every run goes through ``qemu-<arch> -L /usr/<gnu triple>``, which loads
the target's C library, libgomp and libm from the cross sysroot; on a matching Arm host it runs as is.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from importlib import resources

import numpy as np

from nnvm.errors import Error
from nnvm_backend_llvm_arm.toolchain import ArmToolchain

RUNNER_SOURCE = "nnvm_run.c"
# Small and stripped; 4 KiB page alignment instead of aarch64's default 64 KiB: the file is 4x smaller.
CFLAGS = ("-Os", "-s", "-std=c11", "-Wall", "-Wl,-z,max-page-size=4096")
RUN_TIMEOUT_S = 1800  # a large model under an emulator on a busy machine is slow, not hung


def cache_root() -> str:
    base = os.environ.get("NNVM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "nnvm")
    return os.path.join(base, "arm-runtime")


def runner_source() -> bytes:
    return resources.files("nnvm_backend_llvm_arm").joinpath("runtime", RUNNER_SOURCE).read_bytes()


def build_runner(tc: ArmToolchain) -> str:
    """The path of ``nnvm-run`` for ``tc``'s target, compiling it on first use (atomically, so parallel
    test workers never see a half-written file)."""
    source = runner_source()
    cc = tc.require_cc("building the nnvm-run device runtime")
    key = hashlib.sha256(source + " ".join([cc, *CFLAGS]).encode()).hexdigest()[:16]
    out_dir = os.path.join(cache_root(), f"{tc.kind}-{key}")
    exe = os.path.join(out_dir, "nnvm-run")
    if os.path.exists(exe):
        return exe
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="nnvm-runner-", dir=out_dir) as tmp:
        src = os.path.join(tmp, RUNNER_SOURCE)
        with open(src, "wb") as f:
            f.write(source)
        partial = os.path.join(tmp, "nnvm-run")
        cmd = [cc, *CFLAGS, "-o", partial, src, "-ldl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise Error(f"building the {tc.kind} runtime with {cc} failed: {proc.stderr.strip()}")
        os.replace(partial, exe)
    return exe


def run_artifact(tc: ArmToolchain, path: str, inputs: list, outputs: list, threads: int | None = None
                 ) -> list[np.ndarray]:
    """Run the exported module ``path`` on ``inputs`` (arrays in the plan's input order) with the
    device runtime; ``outputs`` is the plan's output descriptions. Returns the output arrays."""
    exe = build_runner(tc)
    env = dict(os.environ)
    if threads is not None:
        env["NNVM_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory(prefix="nnvm-arm-run-") as tmp:
        in_paths, out_paths = [], []
        for k, arr in enumerate(inputs):
            in_paths.append(os.path.join(tmp, f"in{k}.npy"))
            np.save(in_paths[-1], np.ascontiguousarray(arr))
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


def runtime_sizes(tc: ArmToolchain) -> dict:
    """Bytes on disk of what a device needs besides the model file: the runner (stripped) and, for
    reference, the shared libraries it and a parallel model load (libgomp; libc and libm are the
    system's)."""
    exe = build_runner(tc)
    sizes = {"nnvm-run": os.path.getsize(exe)}
    gomp = os.path.join(tc.sysroot, "lib", "libgomp.so.1")
    if os.path.exists(gomp):
        sizes["libgomp.so.1"] = os.path.getsize(os.path.realpath(gomp))
    return sizes

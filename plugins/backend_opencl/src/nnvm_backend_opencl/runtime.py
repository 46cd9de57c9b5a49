"""Devices, contexts and built programs, shared by every library of the process.

PoCL compiles OpenCL C with clang at ``clBuildProgram`` and again per work-group size at the first
launch, both slow (seconds). Three caches keep that to once per kernel source:

- in memory: one context per device, one built program per (device, SHA-256 of the source);
- on disk: PoCL's own kernel cache, put under ``~/.cache/nnvm/pocl`` (``POCL_CACHE_DIR``, set here
  before the OpenCL platform is first opened, unless the user set it);
- a library builds all its kernels as one program, so a model costs one compiler run, and kernels
  with the same workload were already deduplicated by the compiler.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading

from nnvm.errors import Error, TargetError

os.environ.setdefault("POCL_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "nnvm", "pocl"))

_lock = threading.Lock()
_contexts: dict = {}  # device kind -> (context, queue, device)
_programs: dict = {}  # (device key, source hash) -> built program

DEVICE_KINDS = ("cpu", "gpu", "accelerator", "default")


def device_kind(target) -> str:
    """``cpu``/``gpu``/``accelerator`` from ``opencl -device=...``; ``default`` without the option."""
    kind = target.options.get("device", "default") if target is not None else "default"
    if kind not in DEVICE_KINDS:
        raise TargetError(f"target {target}: -device must be one of cpu, gpu, accelerator, got {kind!r}")
    return kind


def context(kind: str = "default"):
    """(context, queue, device) for the first device of ``kind`` (default: a GPU if any, else any)."""
    import pyopencl as cl

    with _lock:
        if kind in _contexts:
            return _contexts[kind]
        try:
            platforms = cl.get_platforms()
        except cl.Error as exc:
            raise Error(f"no OpenCL platform is available ({exc}); install an OpenCL driver such as "
                        "PoCL (pip install pocl-binary-distribution)") from None
        devices = [d for p in platforms for d in p.get_devices()]
        wanted = {"cpu": cl.device_type.CPU, "gpu": cl.device_type.GPU,
                  "accelerator": cl.device_type.ACCELERATOR}
        if kind == "default":
            found = [d for d in devices if d.type & cl.device_type.GPU] or devices
        else:
            found = [d for d in devices if d.type & wanted[kind]]
        if not found:
            have = ", ".join(f"{d.name} ({cl.device_type.to_string(d.type)})" for d in devices) or "none"
            raise Error(f"no OpenCL {kind} device found (devices: {have})")
        if len(found) > 1:  # skip a driver that cannot compile here, if another one can
            found = [d for d in found if _compiles(cl, d)] or found
        dev = found[0]
        ctx = cl.Context([dev])
        _contexts[kind] = (ctx, cl.CommandQueue(ctx), dev)
        return _contexts[kind]


def _compiles(cl, dev) -> bool:
    """Whether ``dev``'s compiler builds a trivial kernel. A PoCL whose LLVM predates the host CPU (the one
    in pyopencl's wheel, LLVM 14, on AMD Zen 5) fails every build with "unknown target CPU 'generic'",
    while Debian's PoCL (``make install`` adds it) on the same machine works: with both installed, the
    one that works is taken whatever order the ICD loader lists them in."""
    try:
        cl.Program(cl.Context([dev]), "__kernel void nnvm_probe(__global float *a) { a[0] = 1.0f; }").build()
        return True
    except cl.Error:
        return False


_ERROR_LINE = re.compile(r"^(?:error: )?\S*?:(\d+):(\d+)(?: <[^>]*>)?: (?:error: )?(.*)$", re.MULTILINE)


def build_program(source: str, kind: str = "default"):
    """The built program for ``source`` on the device of ``kind``; build errors name the source line."""
    import pyopencl as cl

    ctx, _, dev = context(kind)
    key = (dev.int_ptr, hashlib.sha256(source.encode()).hexdigest())
    with _lock:
        if key in _programs:
            return _programs[key]
    try:
        program = cl.Program(ctx, source).build(options=["-cl-std=CL1.2"])
    except cl.RuntimeError as exc:
        raise Error(build_error_message(source, str(exc))) from None
    with _lock:
        _programs[key] = program
    return program


def build_error_message(source: str, log: str) -> str:
    """One sentence: the compiler's first error and the source line it points at."""
    if "unknown target CPU 'generic'" in log:  # PoCL's LLVM predates the host CPU (Zen 5 with LLVM 14)
        return ("the OpenCL driver cannot compile for this CPU: PoCL's LLVM does not know it (unknown target "
                "CPU 'generic'); install a newer PoCL (Debian's pocl-opencl-icd), or use another OpenCL "
                "device")
    m = _ERROR_LINE.search(log)
    if not m:
        first = next((ln for ln in log.splitlines() if "error" in ln.lower()), log.strip()[:300])
        return f"the OpenCL compiler rejected the generated kernels: {first}"
    line = int(m.group(1))
    lines = source.splitlines()
    text = lines[line - 1].strip() if 0 < line <= len(lines) else "?"
    return f"the OpenCL compiler rejected the generated kernels: {m.group(3)} at line {line}: {text}"

"""GPU kernels run on the CPU: the kernel source compiled as host code, each GPU thread a fiber.

A GPU backend whose hardware is absent (CUDA without an NVIDIA GPU, Metal off a Mac) still runs the
very source it generated: a language plugin supplies a shim header that maps its language onto host
C++ (thread indices read from ``nnvm_thread_idx`` and friends, its barrier calling
``nnvm_fibers_barrier``) and a small trampoline per kernel, ``void entry(void **args)``, that runs one
GPU thread of the kernel on the launch's argument array. ``compile_host_library`` builds that together
with ``fibers/fibers.c`` (the scheduler) into one shared library, cached by a hash of everything that
goes into it; ``HostKernels.launch`` runs a grid of blocks. ``HostSource`` is all of that for one
generated source: a language plugin's subclass names only its kernel pattern, barrier call,
trampoline template and compiler command.

Kernels without a barrier run each thread to completion, with no fiber at all; kernels with barriers
switch fibers at every barrier, and a barrier only some threads of a block reach is an ``Error``, not a
hang. Launching with ``reversed=True`` runs the threads of every round in reverse order, so a kernel
that forgot a barrier computes different numbers in the two orders; ``NNVM_GPU_THREAD_ORDER=reversed``
makes that the default for every launch (the test suites run each kernel in both orders with it).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

from nnvm import environment
from nnvm.errors import Error

FIBERS_DIR = Path(__file__).with_name("fibers")
_lock = threading.Lock()
_loaded: dict = {}  # path -> HostKernels


def threads_reversed() -> bool:
    """Whether launches run the threads of a block in reverse order by default
    (``NNVM_GPU_THREAD_ORDER=reversed``; ``forward`` is the default)."""
    return environment.gpu_threads_reversed()


def cache_dir() -> str:
    """``$NNVM_CACHE_DIR/host-kernels`` (default ``~/.cache/nnvm/host-kernels``)."""
    return str(environment.cache_dir() / "host-kernels")


def compile_host_library(source: str, *, compiler: str = "g++", flags: tuple = (), headers: tuple = (),
                         what: str = "kernels") -> str:
    """Compile ``source`` (host C++ of the kernels plus their trampolines) with the fiber scheduler into a
    shared library; ``headers`` are included before it (as ``-include`` would, but not into the C
    scheduler). Returns the library's
    path, reused while the inputs are unchanged. A compiler error is an ``Error`` quoting its first lines."""
    runtime_c = (FIBERS_DIR / "fibers.c").read_text()
    digest = hashlib.sha256()
    for part in (compiler, *flags, source, runtime_c, (FIBERS_DIR / "fibers.h").read_text(),
                 *(Path(h).read_text() for h in headers)):
        digest.update(part.encode() + b"\0")
    out_dir = cache_dir()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{digest.hexdigest()[:32]}.so")
    if os.path.exists(path):
        return path
    with tempfile.TemporaryDirectory(prefix="nnvm-host-") as tmp:
        src = os.path.join(tmp, "kernels.cpp")
        Path(src).write_text("".join(f'#include "{h}"\n' for h in headers) + source)
        partial = os.path.join(out_dir, f".{os.getpid()}-{os.path.basename(path)}")
        cmd = [compiler, "-shared", "-fPIC", "-O2", "-w", "-I", str(FIBERS_DIR), *flags,
               "-x", "c", str(FIBERS_DIR / "fibers.c"), "-x", "c++", src, "-o", partial]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError:
            raise Error(f"running {what} on the CPU needs a C++ compiler ({compiler}); install g++") from None
        if proc.returncode != 0:
            log = proc.stderr.splitlines()
            lines = [ln for ln in log if "error" in ln][:5] or log[:5]
            raise Error(f"{what} do not compile as host C++ for the CPU runner: " + " | ".join(lines))
        os.replace(partial, path)
    return path


class HostKernels:
    """A shared library from ``compile_host_library``: launches its trampolines over a grid."""

    def __init__(self, path: str):
        self.path = path
        self.lib = ctypes.CDLL(path)
        self.lib.nnvm_fibers_launch.restype = ctypes.c_int
        self.lib.nnvm_fibers_launch.argtypes = [
            ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.POINTER(ctypes.c_uint),
            ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        self._entries: dict = {}

    @classmethod
    def load(cls, path: str) -> HostKernels:
        """One object per library path in this process (``dlopen`` would share it anyway)."""
        with _lock:
            if path not in _loaded:
                _loaded[path] = cls(path)
            return _loaded[path]

    def entry(self, symbol: str) -> int:
        if symbol not in self._entries:
            try:
                self._entries[symbol] = ctypes.cast(getattr(self.lib, symbol), ctypes.c_void_p).value
            except AttributeError:
                raise Error(f"{self.path}: no kernel entry {symbol}") from None
        return self._entries[symbol]

    def launch(self, symbol: str, args, grid, block, *, reversed: bool | None = None, fibers: bool = True,
               kernel: str | None = None) -> None:
        """Run trampoline ``symbol`` over ``grid`` x ``block`` (x, y, z) with ``args`` (a ``void **``, as
        ``cuLaunchKernel`` takes: ``args[i]`` points at the i-th argument's value). ``fibers=False`` for
        a kernel without barriers; ``reversed=None`` follows ``threads_reversed()``. Raises ``Error`` naming
        ``kernel`` on a divergent barrier."""
        if reversed is None:
            reversed = threads_reversed()
        g = (ctypes.c_uint * 3)(*[int(v) for v in grid])
        b = (ctypes.c_uint * 3)(*[int(v) for v in block])
        err = ctypes.create_string_buffer(512)
        rc = self.lib.nnvm_fibers_launch(self.entry(symbol), ctypes.cast(args, ctypes.c_void_p), g, b,
                                         int(reversed), int(fibers), err, len(err))
        if rc != 0:
            raise Error(f"kernel {kernel or symbol}: {err.value.decode()}")


def barrier_kernels(source: str, kernel: re.Pattern, barrier: str) -> dict:
    """Kernel name -> whether its body (from its ``kernel`` match up to the next) mentions ``barrier``:
    a kernel without one runs each thread to completion, with no fiber to switch."""
    marks = [(m.start(), m.group(1)) for m in kernel.finditer(source)]
    return {name: barrier in source[start:marks[i + 1][0] if i + 1 < len(marks) else None]
            for i, (start, name) in enumerate(marks)}


class HostSource:
    """The kernels of one GPU source built for the CPU: the source unchanged, then ``trampolines`` (C++
    defining ``nnvm_call(kernel, void **args)``, which runs one GPU thread) and one
    ``extern "C" nnvm_thread_<kernel>`` entry per kernel, compiled by ``compile_host_library``.

    ``kernel`` is the language's kernel pattern (group 1: the name) and ``barrier`` its barrier call;
    ``compiler``, ``flags`` and ``headers`` go to ``compile_host_library``, ``what`` names the kernels
    in its errors."""

    def __init__(self, source: str, *, kernel: re.Pattern, barrier: str, trampolines: str, what: str,
                 compiler: str = "g++", flags: tuple = (), headers: tuple = ()):
        self.source = source
        self.names = kernel.findall(source)
        self.barriers = barrier_kernels(source, kernel, barrier)
        text = source + "\n" + trampolines + "".join(
            f'extern "C" void nnvm_thread_{k}(void **args) {{ nnvm_call({k}, args); }}\n' for k in self.names)
        path = compile_host_library(text, compiler=compiler, flags=flags, headers=headers, what=what)
        self.lib = HostKernels.load(path)

    def launch(self, kernel: str, grid, block, args, *, reversed: bool | None = None) -> None:
        """Run ``kernel`` over ``grid`` x ``block`` with ``args`` (a ``void **``); threads of each block in
        reverse order when ``reversed`` (None: as ``NNVM_GPU_THREAD_ORDER`` says)."""
        self.lib.launch(f"nnvm_thread_{kernel}", args, grid, block, reversed=reversed,
                        fibers=self.barriers.get(kernel, True), kernel=kernel)

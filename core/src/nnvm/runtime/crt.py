"""Building the C runtime (``c/``: ``nnvm_runtime.h``, ``nnvm_runtime.c``, ``nnvm_run.c``) for a CPU target.

One runtime for every CPU target, built with what the target's backend declares
(``Backend.native_target``: the C compiler, a cross compiler for another CPU, and the ELF machine and
class the runtime accepts, passed to the C build as defines): ``llvm`` (x86-64) with the host's
compiler, ``aarch64``, ``armv7`` or a vendor's ``riscv64`` with their cross compilers. With no backend
installed, ``llvm`` means this machine (API.md) and is built for it. A build makes

- ``libnnvm_runtime.a`` and ``libnnvm_runtime.so`` (the API of ``nnvm_runtime.h``; link ``-ldl -lpthread``),
- ``nnvm-run``, the command-line runner, linked statically with the runtime, ``-Os`` and stripped,
- a copy of ``nnvm_runtime.h``,

and is cached under ``$NNVM_CACHE_DIR/c-runtime/<kind>-<hash of sources, compiler and flags>``, so tests,
``nnvm runtime build`` and the Arm plugin's emulated runs compile it once. The runtime's threading
(one activation arena per concurrent call) lives in ``nnvm_runtime.c``; a module's parallel loops run
on the thread pool compiled into it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from nnvm import environment
from nnvm.backend import NativeTarget
from nnvm.errors import Error
from nnvm.plugins import backends
from nnvm.runtime.artifact import host_elf, machine_name
from nnvm.target import parse_target

SOURCE_DIR = Path(__file__).parent / "c"
SOURCES = ("nnvm_runtime.h", "nnvm_runtime.c", "nnvm_run.c")
FILES = ("nnvm_runtime.h", "libnnvm_runtime.a", "libnnvm_runtime.so", "nnvm-run")
LIB_CFLAGS = ("-O2", "-std=c11", "-Wall", "-fPIC", "-ffunction-sections", "-fdata-sections")
# Small and stripped; 4 KiB page alignment instead of aarch64's default 64 KiB: the file is 4x smaller.
RUN_CFLAGS = ("-Os", "-s", "-std=c11", "-Wall", "-Wl,-z,max-page-size=4096", "-Wl,--gc-sections")
LIBS = ("-ldl", "-lpthread")
HOST_KIND = "llvm"  # the target API.md defines as this machine's CPU


def cache_root() -> str:
    return str(environment.cache_dir() / "c-runtime")


def runtime_target(target_text: str) -> NativeTarget:
    """What the C runtime for ``target_text`` is built with: its backend's ``native_target``; for
    ``llvm`` with no backend installed (the core alone), this machine's CPU and ``$CC`` or ``cc``. Raises
    ``Error`` naming the target when its backend's modules are not for the C runtime."""
    target = parse_target(target_text)
    found = backends().get(target.kind)
    if found is None and target.kind == HOST_KIND and host_elf() is not None:
        machine, elf_class = host_elf()
        return NativeTarget(HOST_KIND, os.environ.get("CC", "cc"), machine, elf_class, machine_name(machine))
    native = target.backend.native_target(target)  # no backend: a TargetError naming the installed ones
    if native is None:
        raise Error(f"the C runtime is for the CPU targets, whose modules are shared libraries; the backend "
                    f"of target {target.kind!r} (plugin {found[0]}) exports none")
    return native


def compiler_for(target_text: str) -> tuple[str, str]:
    """(target kind, C compiler) of the runtime for ``target_text`` (``runtime_target``)."""
    native = runtime_target(target_text)
    return native.kind, native.cc


def _archiver(cc: str) -> str:
    """The ``ar`` that goes with ``cc`` (``aarch64-linux-gnu-gcc`` -> ``aarch64-linux-gnu-ar``)."""
    if cc.endswith("gcc"):
        cross = cc[:-3] + "ar"
        if shutil.which(cross):
            return cross
    return "ar"


def _c_string(text: str) -> str:
    """A C string literal of ``text`` for a ``-D`` define (target kinds and CPU names: plain words)."""
    if not text.replace("-", "").replace("_", "").replace(" ", "").replace(".", "").isalnum():
        raise Error(f"the C runtime cannot be built for the name {text!r}: letters, digits, '-', '_' only")
    return f'"{text}"'


def _run(cmd: list, kind: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Error(f"building the {kind} C runtime with {cmd[0]} failed: {proc.stderr.strip()}")


def build_runtime(native: NativeTarget) -> dict[str, str]:
    """Paths of the runtime's files (``FILES``) for ``native`` (``runtime_target``), compiling on first use
    (in a temporary folder renamed into place, so parallel test workers never see half a build). The
    runtime accepts modules of ``native``'s kind, ELF machine and class: passed as defines."""
    kind, cc = native.kind, native.cc
    defines = [f"-DNNVM_HOST_MACHINE={int(native.elf_machine)}", f"-DNNVM_HOST_CLASS={int(native.elf_class)}",
               f"-DNNVM_HOST_TARGET={_c_string(native.kind)}",
               f"-DNNVM_HOST_CPU={_c_string(native.machine_name)}"]
    if shutil.which(cc) is None:
        raise Error(f"building the {kind} C runtime needs the C compiler {cc!r}; install it (make install "
                    "installs the Arm cross compilers) or set CC")
    key = hashlib.sha256()
    for name in SOURCES:
        key.update((SOURCE_DIR / name).read_bytes())
    key.update("\0".join([cc, *defines, *LIB_CFLAGS, *RUN_CFLAGS, *LIBS]).encode())
    out_dir = os.path.join(cache_root(), f"{kind}-{key.hexdigest()[:16]}")
    paths = {name: os.path.join(out_dir, name) for name in FILES}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    os.makedirs(cache_root(), exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{kind}-", dir=cache_root())
    try:
        shutil.copy(SOURCE_DIR / "nnvm_runtime.h", tmp)
        obj = os.path.join(tmp, "nnvm_runtime.o")
        _run([cc, *LIB_CFLAGS, *defines, "-c", "-o", obj, str(SOURCE_DIR / "nnvm_runtime.c")], kind)
        _run([_archiver(cc), "rcs", os.path.join(tmp, "libnnvm_runtime.a"), obj], kind)
        _run([cc, "-shared", "-s", "-Wl,-z,max-page-size=4096", "-o", os.path.join(tmp, "libnnvm_runtime.so"),
              obj, "-Wl,-soname,libnnvm_runtime.so", *LIBS], kind)
        _run([cc, *RUN_CFLAGS, f"-I{SOURCE_DIR}", "-o", os.path.join(tmp, "nnvm-run"),
              str(SOURCE_DIR / "nnvm_run.c"), os.path.join(tmp, "libnnvm_runtime.a"), *LIBS], kind)
        os.unlink(obj)
        try:
            os.rename(tmp, out_dir)
        except OSError:  # another process finished the same build first
            if not all(os.path.exists(p) for p in paths.values()):
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return paths


def install_runtime(target_text: str, out_dir: str) -> dict[str, int]:
    """``nnvm runtime build``: the runtime for ``target_text`` copied into ``out_dir``; {file: bytes}."""
    paths = build_runtime(runtime_target(target_text))
    os.makedirs(out_dir, exist_ok=True)
    sizes = {}
    for name, src in paths.items():
        dst = os.path.join(out_dir, name)
        shutil.copy2(src, dst)
        sizes[name] = os.path.getsize(dst)
    return sizes

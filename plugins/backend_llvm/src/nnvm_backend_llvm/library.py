"""Compiled kernels: run in process through MCJIT, or exported as one shared library with data blobs.

The export format is an ordinary ELF shared object linked by the system C compiler:

- the kernels, as object code LLVM emits (position independent) from the optimized module;
- each blob ``name`` as the symbols ``nnvm_blob_<name>`` (its bytes, 64-byte aligned, in a read-only
  section) and ``nnvm_blob_<name>_size`` (uint64). The bytes never pass through LLVM IR: each blob is
  written to a file and pulled in by a tiny assembly file with ``.incbin``, so 100 MB of weights cost
  a file copy, not an LLVM constant;
- ``glue.py``'s C entry point ``nnvm_model_execute`` and the model's input/output metadata, so the C
  runtime (``nnvm/runtime/c``, ``nnvm_runtime.h``) runs it with no Python, on every CPU target;
- for parallel loops and heap buffers, the thread pool ``nnvm_pool.c`` compiled in (hidden symbols: the
  module needs no threading library beyond libc), and ``-lm``, the C math library.

``nnvm.runtime.module.load_module`` reads it back with ``ctypes`` alone. ``Module.export`` then appends
the footer of ``nnvm.runtime.artifact`` (format version, target, checksum).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import llvmlite.binding as llvm

from nnvm import environment
from nnvm.backend import KernelLibrary
from nnvm.errors import Error
from nnvm.runtime.artifact import host_lacks
from nnvm_backend_llvm.glue import glue_source
from nnvm_backend_llvm.kernel_unit import empty_module, runtime_module
from nnvm_backend_llvm.toolchain import LLVMTarget

_BLOB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_runtime_lock = threading.Lock()
_runtime_loaded: set = set()
POOL_SOURCE = Path(__file__).with_name("nnvm_pool.c")
POOL_CFLAGS = ("-O2", "-std=c11", "-fPIC", "-Wall")


def load_runtime_libraries(names=("m", "gcc_s")) -> None:
    """Make libm and libgcc_s symbols resolvable by JIT-compiled code (once per process).

    libgcc_s holds the helpers LLVM calls for conversions x86 has no instruction for (double to half:
    ``__truncdfhf2``); an unresolved helper would crash the process at the first call."""
    with _runtime_lock:
        for name in names:
            if name in _runtime_loaded:
                continue
            path = ctypes.util.find_library(name)
            if path is None:
                continue
            llvm.load_library_permanently(path)
            _runtime_loaded.add(name)


def pool_build(cc: str, kind: str, what: str) -> str:
    """``nnvm_pool.c`` compiled by ``cc``: ``kind`` ``"so"`` (the JIT's shared library, symbols visible)
    or ``"o"`` (an object for exports, symbols hidden). Compiled once per machine and cached under
    ``$NNVM_CACHE_DIR/thread-pool``, keyed by the source, the compiler (path and date) and the flags;
    written to a temporary name and renamed, so parallel processes never see half a file."""
    path = shutil.which(cc)
    if path is None:
        raise Error(f"{what} needs a C compiler for the thread pool of parallel loops (nnvm_pool.c), and "
                    f"{cc!r} was not found; install one (e.g. apt-get install gcc) or set CC")
    flags = [*POOL_CFLAGS, "-shared", "-DNNVM_POOL_API="] if kind == "so" else [*POOL_CFLAGS, "-c"]
    key = hashlib.sha256(POOL_SOURCE.read_bytes())
    real = os.path.realpath(path)
    key.update(f"{cc}\0{real}\0{os.stat(real).st_mtime_ns}\0{' '.join(flags)}".encode())
    out = os.path.join(environment.cache_dir(), "thread-pool", f"nnvm_pool-{key.hexdigest()[:16]}.{kind}")
    if os.path.exists(out):
        return out
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".nnvm_pool-", suffix=f".{kind}", dir=os.path.dirname(out))
    os.close(fd)
    try:
        cmd = [cc, *flags, "-o", tmp, str(POOL_SOURCE), *(["-lpthread"] if kind == "so" else [])]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise Error(f"{what}: compiling the thread pool (nnvm_pool.c) with {cc} failed: "
                        f"{proc.stderr.strip()}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def load_pool() -> None:
    """The thread pool's shared library, loaded once per process so JIT code resolves ``nnvm_pool_run``
    and ``nnvm_scratch_alloc``."""
    with _runtime_lock:
        if "pool" in _runtime_loaded:
            return
        cc = os.environ.get("CC", "cc")
        llvm.load_library_permanently(pool_build(cc, "so", "running parallel kernels"))
        _runtime_loaded.add("pool")


class LLVMKernelLibrary(KernelLibrary):
    """Kernels of one ``build`` call: one LLVM module, optimized once.

    ``source()`` returns the optimized LLVM IR (what actually runs); ``unoptimized_ir`` holds the code
    generator's output before the O3 pipeline.
    """

    def __init__(self, optimized_ir: str | None, unoptimized_ir: str | None, target: LLVMTarget, kernel_names,
                 uses_parallel: bool, module: llvm.ModuleRef | None = None, tm=None,
                 compile_seconds: dict | None = None, cc: str | None = None, uses_scratch: bool = False,
                 units: list | None = None):
        # ``units`` (``kernel_unit.KernelUnit``, from ``link_kernels``): kernels compiled one by one, each
        # with its machine code; the IR texts are then made from them only when asked for
        self._optimized_ir = optimized_ir
        self._unoptimized_ir = unoptimized_ir
        self.units = list(units or [])
        self.target = target
        self.kernel_names = list(kernel_names)
        self.uses_parallel = uses_parallel
        # the kernels call nnvm_pool.c: parallel loops, or heap buffers (nnvm_scratch_alloc)
        self.uses_pool = uses_parallel or uses_scratch
        self.cc = cc  # the C compiler that links exports (a cross compiler for another CPU); None: $CC or cc
        self.compile_seconds = compile_seconds if compile_seconds is not None else {}
        self._engine = None
        # the ISA extensions the code may use (the backend's ``code_features``), set by the backend: an
        # export records them in its footer, so a loader on a CPU without them refuses it
        self.cpu_features: list = []
        if module is not None:
            load_runtime_libraries()
            if self.uses_pool:
                load_pool()
            self._engine = llvm.create_mcjit_compiler(module, tm)
            if units:
                for unit in units:
                    self._engine.add_object_file(llvm.ObjectFileRef.from_data(unit.object_code))
            self._engine.finalize_object()

    @property
    def optimized_ir(self) -> str:
        """The optimized LLVM IR of every kernel (what runs), as one module."""
        if self._optimized_ir is None:
            self._optimized_ir = str(self._linked_module())
        return self._optimized_ir

    @property
    def unoptimized_ir(self) -> str:
        """The code generator's output before the O3 pipeline."""
        if self._unoptimized_ir is None:
            self._unoptimized_ir = "\n".join(unit.unoptimized_ir for unit in self.units)
        return self._unoptimized_ir

    def _linked_module(self) -> llvm.ModuleRef:
        """One module: the units' optimized bitcode linked (their internal names renamed where they
        clash) with the exported ``nnvm_llvm_num_threads``; or the optimized IR text parsed."""
        if self._optimized_ir is not None:  # built by ``build``, not from units
            return llvm.parse_assembly(self._optimized_ir)
        tm = self.target.target_machine()
        linked = runtime_module(self.target, tm) if self.uses_parallel else empty_module(self.target, tm)
        for unit in self.units:
            linked.link_in(llvm.parse_bitcode(unit.bitcode))
        return linked

    def runs_in_process(self) -> bool:
        return self._engine is not None

    def cannot_run_here(self) -> str | None:
        """Code this process cannot run and no emulator runs (built for a CPU with extensions this one
        lacks, or another OS): say what it lacks. A cross target's library runs under its emulator."""
        if self._engine is not None:
            return None
        missing = host_lacks(self.cpu_features)
        what = f"use {', '.join(missing)}, which this CPU lacks" if missing else "are for another platform"
        return (f"kernels for {self.target.cpu or self.target.triple} {what}; export the module and run "
                "it on such a CPU")

    def address(self, name: str) -> int:
        if self._engine is None:
            raise Error(f"kernels for {self.target.triple} cannot run in this process; export them instead")
        if name not in self.kernel_names and name != "nnvm_llvm_num_threads":
            raise Error(f"no kernel named {name!r} in this library (kernels: {', '.join(self.kernel_names)})")
        return self._engine.get_function_address(name)

    def sequence_runner(self) -> int | None:
        """``nnvm_run_kernels`` of the thread pool's shared library (``nnvm_pool.c``), loaded for it."""
        if self._engine is None:
            return None
        load_pool()
        return llvm.address_of_symbol("nnvm_run_kernels") or None

    def num_threads(self) -> int:
        """The team size parallel loops use (``nnvm_pool_team``); 1 without any."""
        if not self.uses_parallel or self._engine is None:
            return 1
        return ctypes.CFUNCTYPE(ctypes.c_int32)(self.address("nnvm_llvm_num_threads"))()

    def source(self) -> str:
        return self.optimized_ir

    def assembly(self) -> str:
        """The machine code as assembly text (for inspection and tests)."""
        tm = self.target.target_machine()
        return tm.emit_assembly(self._linked_module())

    # -- export -----------------------------------------------------------------------------------
    def export(self, path: str, blobs: dict) -> None:
        cc = self.cc or os.environ.get("CC", "cc")
        if shutil.which(cc) is None:
            raise Error(f"exporting {path} needs a C compiler to link the shared library, and {cc!r} was "
                        "not found; install one (e.g. apt-get install gcc) or set CC")
        for name in blobs:
            if not _BLOB_NAME.match(name):
                raise Error(f"exporting {path}: blob name {name!r} is not a valid symbol name")
        tm = self.target.target_machine(reloc="pic", codemodel="default")
        obj = tm.emit_object(self._linked_module())
        out_dir = os.path.dirname(os.path.abspath(path))
        with tempfile.TemporaryDirectory(prefix="nnvm-export-") as tmp:
            obj_path = os.path.join(tmp, "kernels.o")
            with open(obj_path, "wb") as f:
                f.write(obj)
            asm_path = os.path.join(tmp, "blobs.S")
            with open(asm_path, "w") as f:
                f.write(blob_assembly(blobs, tmp))
            fd, partial = tempfile.mkstemp(prefix=".nnvm-", suffix=".so", dir=out_dir)
            os.close(fd)
            try:
                extra = self._export_objects(cc, tmp, blobs, path)
                if self.uses_pool:
                    extra.append(pool_build(cc, "o", f"exporting {path}"))
                self._link(cc, partial, [obj_path, asm_path, *extra], path)
                os.replace(partial, path)  # a loaded copy of an older file stays intact
            finally:
                if os.path.exists(partial):
                    os.unlink(partial)

    def _export_objects(self, cc: str, directory: str, blobs: dict, path: str) -> list[str]:
        """More object files to link into the export (written under ``directory``): the C entry point
        ``nnvm_model_execute`` and the model's metadata (``glue.py``), compiled position independent. None
        for a library that is not a whole model (``nnvm.build`` kernels with blobs of the caller's own)."""
        try:
            meta = json.loads(bytes(blobs["graph"]).decode())
        except (KeyError, UnicodeDecodeError, json.JSONDecodeError):
            return []
        if not isinstance(meta, dict) or "plan" not in meta or "params" not in blobs:
            return []
        src = os.path.join(directory, "model_run.c")
        with open(src, "w") as f:
            f.write(glue_source(meta, blobs["params"]))
        obj = os.path.join(directory, "model_run.o")
        proc = subprocess.run([cc, "-c", "-fPIC", "-O2", "-std=c11", "-o", obj, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise Error(f"exporting {path}: compiling the model's C entry point with {cc} failed: "
                        f"{proc.stderr.strip()}")
        return [obj]

    def _link(self, cc: str, out: str, inputs: list, path: str) -> None:
        base = [cc, "-shared", "-o", out, *inputs, "-Wl,-z,noexecstack"]
        libs = ["-lm", "-lpthread"] if self.uses_pool else ["-lm"]
        proc = subprocess.run(base + libs, capture_output=True, text=True)
        if proc.returncode != 0:
            raise Error(f"exporting {path}: linking with {cc} failed: {proc.stderr.strip()}")


def blob_assembly(blobs: dict, directory: str) -> str:
    """GNU assembler source defining ``nnvm_blob_<name>`` and ``nnvm_blob_<name>_size`` for each blob."""
    lines = []
    for k, (name, data) in enumerate(blobs.items()):
        data = bytes(data) if not isinstance(data, (bytes, bytearray, memoryview)) else data
        file = os.path.join(directory, f"blob{k}.bin")
        with open(file, "wb") as f:
            f.write(data)
        size = len(memoryview(data).cast("B"))
        sym = f"nnvm_blob_{name}"
        quoted = file.replace("\\", "\\\\").replace('"', '\\"')
        lines += [
            f'\t.section .rodata.{sym},"a"',
            "\t.balign 64",
            f"\t.globl {sym}",
            f"\t.type {sym}, %object",
            f"{sym}:",
            f'\t.incbin "{quoted}"',
            f"\t.size {sym}, . - {sym}",
            "\t.balign 8",
            f"\t.globl {sym}_size",
            f"\t.type {sym}_size, %object",
            f"{sym}_size:",
            f"\t.quad {size}",
            f"\t.size {sym}_size, 8",
        ]
    lines.append('\t.section .note.GNU-stack,"",%progbits')
    return "\n".join(lines) + "\n"

"""One kernel compiled on its own: what the kernel cache stores and parallel compiles hand back.

A ``KernelUnit`` is one ``PrimFunc`` through the whole pipeline (code generation, O3, and for a CPU
this process runs, machine code): its optimized LLVM module as bitcode (linked with the others for
``source()`` and ``export``), the object file MCJIT loads as it is (no code generation when the unit
comes from the cache), the code generator's IR before O3 (``unoptimized_ir``, for tests and dumps) and
what the library needs to know (``uses_parallel``, ``uses_scratch``). Kernels never call each other, so
O3 on one kernel's module gives the code O3 on all of them together gives.

Each unit carries its own ``nnvm_llvm_num_threads`` as an internal function (its team size computed
once per unit on the first parallel call), so units link without clashing; the library defines the
exported one for ``num_threads()``.

``to_bytes``/``from_bytes``: a 4-byte header length, a JSON header (names, flags, section sizes), then
the sections. ``from_bytes`` raises ``ValueError`` on anything malformed.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import llvmlite.binding as llvm

from nnvm.errors import Error
from nnvm_backend_llvm.codegen import NUM_THREADS_FN, CodeGenLLVM
from nnvm_backend_llvm.toolchain import LLVMTarget, optimize

FORMAT = 1


@dataclass
class KernelUnit:
    name: str
    bitcode: bytes
    object_code: bytes  # empty for a CPU this process cannot run (no JIT)
    unoptimized_ir_z: bytes  # zlib: read only by tests and dumps, not worth inflating on every load
    uses_parallel: bool
    uses_scratch: bool

    @property
    def unoptimized_ir(self) -> str:
        return zlib.decompress(self.unoptimized_ir_z).decode()

    def to_bytes(self) -> bytes:
        ir = self.unoptimized_ir_z
        header = json.dumps({"format": FORMAT, "name": self.name, "uses_parallel": self.uses_parallel,
                             "uses_scratch": self.uses_scratch,
                             "sizes": [len(self.bitcode), len(self.object_code), len(ir)]}).encode()
        return len(header).to_bytes(4, "little") + header + self.bitcode + self.object_code + ir

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelUnit:
        try:
            n = int.from_bytes(data[:4], "little")
            header = json.loads(data[4:4 + n])
            if header.get("format") != FORMAT:
                raise ValueError(f"kernel unit format {header.get('format')!r}")
            sizes = [int(s) for s in header["sizes"]]
            if 4 + n + sum(sizes) != len(data) or len(sizes) != 3:
                raise ValueError("kernel unit sections do not add up to its size")
            at = 4 + n
            sections = []
            for size in sizes:
                sections.append(data[at:at + size])
                at += size
            return cls(str(header["name"]), sections[0], sections[1], sections[2],
                       bool(header["uses_parallel"]), bool(header["uses_scratch"]))
        except (KeyError, TypeError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"malformed kernel unit: {exc}") from None


def compile_unit(func, target: LLVMTarget, jit: bool) -> KernelUnit:
    """``func`` through code generation and O3; machine code for MCJIT too when ``jit``."""
    tm = target.target_machine()
    cg = CodeGenLLVM(target.triple, str(tm.target_data))
    cg.add_function(func)
    helper = cg.module.globals.get(NUM_THREADS_FN)
    if helper is not None:
        helper.linkage = "internal"
    text = cg.ir_text()
    try:
        module = llvm.parse_assembly(text)
        module.verify()
    except RuntimeError as exc:  # a code generator bug, not the user's: say where to look
        raise Error(f"the llvm backend produced invalid IR for {func.name}: {exc}") from exc
    optimize(module, tm, level=3)
    obj = tm.emit_object(module) if jit else b""
    return KernelUnit(func.name, module.as_bitcode(), obj, zlib.compress(text.encode(), 1), cg.uses_parallel,
                      cg.uses_scratch)


def runtime_module(target: LLVMTarget, tm) -> llvm.ModuleRef:
    """The library's exported ``nnvm_llvm_num_threads`` (``num_threads()`` asks it)."""
    cg = CodeGenLLVM(target.triple, str(tm.target_data), module_name="nnvm_runtime")
    cg.num_threads_fn()
    return llvm.parse_assembly(cg.ir_text())


def empty_module(target: LLVMTarget, tm) -> llvm.ModuleRef:
    """A module with no code: what MCJIT starts from when every kernel comes as an object file."""
    module = llvm.parse_assembly("")
    module.triple = target.triple
    module.data_layout = str(tm.target_data)
    return module

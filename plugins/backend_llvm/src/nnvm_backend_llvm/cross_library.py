"""Kernel libraries of a cross-compiled target: the LLVM library, linked by the cross gcc, run under qemu.

``CrossKernelLibrary`` is what ``CrossLLVMBackend.build`` returns. Exported, it is the same format as
the host's (kernels, ``.incbin`` blobs, the C entry point of ``glue.py``) linked by the cross gcc, so
the C runtime and ``nnvm-run`` on the device need no Python. On a host that cannot execute the code,
the core's ``Module`` sees ``runs_in_process() == False`` and runs an exported copy through
``run_exported`` (the device runner under qemu). ``ForeignArtifact`` is the same for a file given to
``nnvm.load``: another CPU's ELF cannot be ``dlopen``ed here, so its blobs are read from the file with
``elf.py``.
"""

from __future__ import annotations

import platform
import shutil

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError
from nnvm_backend_llvm.cross import CrossToolchain
from nnvm_backend_llvm.elf import ElfSymbols
from nnvm_backend_llvm.library import LLVMKernelLibrary
from nnvm_backend_llvm.runner import run_artifact, time_kernel


def _note(tc: CrossToolchain) -> str:
    return (f"this {platform.machine()} host cannot run {tc.kind} code; running it under "
            f"{' '.join(tc.emulator()) or 'the device runtime'} with the nnvm-run device runtime")


class CrossKernelLibrary(LLVMKernelLibrary):
    """Kernels for a cross-compiled target; ``toolchain`` is set by the backend right after construction."""

    toolchain: CrossToolchain

    def runs_in_process(self) -> bool:
        return self._engine is not None

    def cannot_run_here(self) -> str | None:
        return None  # the emulator runs it

    def emulation_note(self) -> str:
        return _note(self.toolchain)

    def run_exported(self, path: str, inputs: list, outputs: list) -> list:
        return run_artifact(self.toolchain, path, inputs, outputs)

    def time_kernel(self, name: str, arrays: list, repeat: int, min_repeat_ms: float) -> list[float]:
        return time_kernel(self.toolchain, self, name, arrays, repeat, min_repeat_ms)

    def export(self, path: str, blobs: dict) -> None:
        self.toolchain.require_cc(f"exporting {path}")  # names the cross package to install
        super().export(path, blobs)


class ForeignArtifact(KernelLibrary):
    """An exported module of another CPU on a host that cannot load it: blobs read from the file, run
    emulated."""

    def __init__(self, path: str, tc: CrossToolchain):
        self.path = path
        self.toolchain = tc
        self.elf = ElfSymbols(path)

    def blob(self, name: str):
        try:
            size = int.from_bytes(self.elf.read(f"nnvm_blob_{name}_size", 8), "little")
            return bytearray(self.elf.read(f"nnvm_blob_{name}", size))
        except KeyError:
            raise ModelLoadError(f"{self.path}: not an nnvm module (no {name} section)") from None

    def address(self, name: str) -> int:
        raise Error(f"{self.path}: {self.toolchain.kind} kernels cannot be called in this process")

    def runs_in_process(self) -> bool:
        return False

    def emulation_note(self) -> str:
        return _note(self.toolchain)

    def run_exported(self, path: str, inputs: list, outputs: list) -> list:
        return run_artifact(self.toolchain, path, inputs, outputs)

    def export(self, path: str, blobs: dict) -> None:
        shutil.copyfile(self.path, path)

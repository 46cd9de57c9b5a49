"""Arm kernel libraries: the x86 plugin's LLVM library, linked by the cross gcc, run under qemu-user.

``ArmKernelLibrary`` is what ``build`` returns. Exported, it is the x86 format (kernels, ``.incbin``
blobs, the C entry point of ``nnvm_backend_llvm_x86.glue``) linked by the cross gcc, so the C runtime
and ``nnvm-run`` on the device need no Python. On a host that cannot execute the code, the core's
``Module`` sees ``runs_in_process() == False`` and runs an exported copy through ``run_exported`` (the
device runner under qemu). ``ForeignArtifact`` is the same for a file given to ``nnvm.load``: an Arm
ELF cannot be ``dlopen``ed here, so its blobs are read from the file with ``elf.py``.
"""

from __future__ import annotations

import platform
import shutil

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError
from nnvm_backend_llvm_arm.elf import ElfSymbols
from nnvm_backend_llvm_arm.runner import run_artifact
from nnvm_backend_llvm_arm.toolchain import ArmToolchain
from nnvm_backend_llvm_x86 import LLVMKernelLibrary


def _note(tc: ArmToolchain) -> str:
    return (f"this {platform.machine()} host cannot run {tc.kind} code; running it under "
            f"{' '.join(tc.emulator()) or 'the device runtime'} with the nnvm-run device runtime")


class ArmKernelLibrary(LLVMKernelLibrary):
    """Kernels for an Arm target; ``toolchain`` is set by the backend right after construction."""

    toolchain: ArmToolchain

    def runs_in_process(self) -> bool:
        return self._engine is not None

    def emulation_note(self) -> str:
        return _note(self.toolchain)

    def run_exported(self, path: str, inputs: list, outputs: list) -> list:
        return run_artifact(self.toolchain, path, inputs, outputs)

    def export(self, path: str, blobs: dict) -> None:
        self.toolchain.require_cc(f"exporting {path}")  # names the cross package to install
        super().export(path, blobs)


class ForeignArtifact(KernelLibrary):
    """An exported Arm module on a host that cannot load it: blobs read from the file, runs emulated."""

    def __init__(self, path: str, tc: ArmToolchain):
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

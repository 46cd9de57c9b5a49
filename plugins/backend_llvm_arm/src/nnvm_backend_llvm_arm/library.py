"""Arm kernel libraries: the x86 plugin's LLVM library plus a C entry point, run under qemu-user.

``ArmKernelLibrary`` is what ``build`` returns. Exported, it is the x86 format (kernels, ``.incbin``
blobs, ``nnvm.load`` reads it) linked by the cross gcc, plus ``glue.py``'s ``nnvm_model_run`` so the
device runner needs no Python. On a host that cannot execute the code, the core's ``Module`` sees
``runs_in_process() == False`` and runs an exported copy through ``run_exported`` (the device runner
under qemu). ``ForeignArtifact`` is the same for a file given to ``nnvm.load``: an Arm ELF cannot be
``dlopen``ed here, so its blobs are read from the file with ``elf.py``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess

from nnvm.backend import KernelLibrary
from nnvm.errors import Error, ModelLoadError
from nnvm_backend_llvm_arm.elf import ElfSymbols
from nnvm_backend_llvm_arm.glue import glue_source
from nnvm_backend_llvm_arm.runner import run_artifact
from nnvm_backend_llvm_arm.toolchain import ArmToolchain
from nnvm_backend_llvm_x86.library import LLVMKernelLibrary


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

    def _export_objects(self, directory: str, blobs: dict, path: str) -> list[str]:
        """``nnvm_model_run`` and the model's metadata as C, compiled position independent."""
        meta = json.loads(bytes(blobs["graph"]).decode())
        src = os.path.join(directory, "model_run.c")
        with open(src, "w") as f:
            f.write(glue_source(meta, blobs["params"]))
        obj = os.path.join(directory, "model_run.o")
        proc = subprocess.run([self.cc, "-c", "-fPIC", "-O2", "-std=c11", "-o", obj, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise Error(f"exporting {path}: compiling the model's C entry point with {self.cc} failed: "
                        f"{proc.stderr.strip()}")
        return [obj]


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

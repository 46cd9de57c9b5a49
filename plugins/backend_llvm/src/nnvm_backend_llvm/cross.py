"""What a CPU target this host may not run needs: LLVM triple, default CPU, cross compiler, ELF, emulator.

One record per target kind (``CrossToolchain``), declared by the target plugin (Arm's ``aarch64`` and
``armv7``, a vendor's ``riscv64``), so the backend, the exporter, the C runtime's build and the emulator
all agree on the same names. Debian's cross packages (``gcc-<gnu triple>``, ``qemu-user``) install
exactly these commands and sysroots.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass

from nnvm.errors import Error


@dataclass(frozen=True)
class CrossToolchain:
    """The fixed facts about one cross-compiled target kind."""

    kind: str  # the target name users type
    triple: str  # LLVM's
    cpu: str  # default -mcpu
    features: str  # default -mattr (added to the CPU's own)
    gnu: str  # GNU triple: prefix of the cross tools, name of the sysroot under /usr
    qemu: str  # the qemu-user binary for this architecture
    elf_machine: int  # e_machine in an ELF header
    elf_class: int  # 1: 32-bit, 2: 64-bit
    host_machines: tuple  # platform.machine() values that run this code natively
    arch_prefixes: tuple = ()  # what a ``-mtriple`` of this kind starts with; () the triple's own arch
    machine_name: str = ""  # the CPU in messages ("32-bit Arm", "RISC-V"); "" the kind
    qemu_args: tuple = ()  # options of the emulator (``-cpu rv64,v=true``: the CPU it emulates)

    def __post_init__(self):
        if not self.arch_prefixes:
            object.__setattr__(self, "arch_prefixes", (self.triple.split("-")[0],))
        if not self.machine_name:
            object.__setattr__(self, "machine_name", self.kind)

    @property
    def cc(self) -> str:
        """The cross C compiler; on a matching host the native one also works."""
        cross = f"{self.gnu}-gcc"
        if shutil.which(cross) is None and self.runs_natively():
            return os.environ.get("CC", "cc")
        return cross

    @property
    def sysroot(self) -> str:
        return f"/usr/{self.gnu}"

    def runs_natively(self) -> bool:
        return platform.machine().lower() in self.host_machines

    def emulator(self) -> list[str]:
        """The command prefix that runs this target's executables here: empty on a matching host."""
        if not self.runs_natively() and shutil.which(self.qemu) is None:
            raise Error(f"running {self.kind} code on this {platform.machine()} host needs {self.qemu} "
                        "(apt-get install qemu-user, or run make install)")
        return self.emulator_prefix()

    def emulator_prefix(self) -> list[str]:
        """``emulator`` without checking that the emulator is installed."""
        return [] if self.runs_natively() else [self.qemu, *self.qemu_args, "-L", self.sysroot]

    def require_cc(self, what: str) -> str:
        cc = self.cc
        if shutil.which(cc) is None:
            raise Error(f"{what} needs the {self.kind} cross compiler {cc!r}; install it with "
                        f"apt-get install gcc-{self.gnu} (or run make install)")
        return cc

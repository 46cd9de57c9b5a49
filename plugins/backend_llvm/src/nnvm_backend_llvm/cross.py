"""What each Arm target means: LLVM triple, default CPU, cross compiler, sysroot and emulator.

One table, ``ARM_TARGETS``, so the backend, the exporter, the C runner's build and the emulator all
agree on the same names. Debian's cross packages (``gcc-aarch64-linux-gnu``, ``gcc-arm-linux-gnueabihf``,
``qemu-user``) install exactly these commands and sysroots; ``make install`` installs them.
"""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass

from nnvm.errors import Error


@dataclass(frozen=True)
class ArmToolchain:
    """The fixed facts about one Arm target kind."""

    kind: str  # the target name users type
    triple: str  # LLVM's
    cpu: str  # default -mcpu
    features: str  # default -mattr (added to the CPU's own)
    gnu: str  # GNU triple: prefix of the cross tools, name of the sysroot under /usr
    qemu: str  # the qemu-user binary for this architecture
    elf_machine: int  # e_machine in an ELF header
    elf_class: int  # 1: 32-bit, 2: 64-bit
    host_machines: tuple  # platform.machine() values that run this code natively
    lanes: int = 4  # float32 lanes of a 128-bit NEON register

    @property
    def cc(self) -> str:
        """The cross C compiler; on a matching Arm host the native one also works."""
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
        if self.runs_natively():
            return []
        if shutil.which(self.qemu) is None:
            raise Error(f"running {self.kind} code on this {platform.machine()} host needs {self.qemu} "
                        "(apt-get install qemu-user, or run make install)")
        return [self.qemu, "-L", self.sysroot]

    def require_cc(self, what: str) -> str:
        cc = self.cc
        if shutil.which(cc) is None:
            raise Error(f"{what} needs the {self.kind} cross compiler {cc!r}; install it with "
                        f"apt-get install gcc-{self.gnu} (or run make install)")
        return cc


ARM_TARGETS = {
    "aarch64": ArmToolchain(
        kind="aarch64", triple="aarch64-unknown-linux-gnu", cpu="cortex-a72", features="+neon",
        gnu="aarch64-linux-gnu", qemu="qemu-aarch64", elf_machine=183, elf_class=2,
        host_machines=("aarch64", "arm64")),
    "armv7": ArmToolchain(
        kind="armv7", triple="armv7a-unknown-linux-gnueabihf", cpu="generic", features="+neon,+vfp4",
        gnu="arm-linux-gnueabihf", qemu="qemu-arm", elf_machine=40, elf_class=1,
        host_machines=("armv7l", "armv8l")),
}


def toolchain_for_machine(elf_class: int, elf_machine: int) -> ArmToolchain | None:
    """The Arm target an ELF file was built for, from its header fields; None for other CPUs."""
    for tc in ARM_TARGETS.values():
        if tc.elf_machine == elf_machine and tc.elf_class == elf_class:
            return tc
    return None

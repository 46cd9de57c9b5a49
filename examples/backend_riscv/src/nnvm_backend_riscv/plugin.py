"""Target ``riscv64``: 64-bit RISC-V Linux (RV64GC, the vector extension with ``-mattr=+v``).

    mod = nnvm.compile("model.onnx", target="riscv64 -mattr=+v")
    mod.run(x)                  # off a RISC-V host: under qemu-riscv64, with the nnvm-run device runtime
    mod.export("model.so")      # with `nnvm runtime build --target riscv64 -o rt`: all a board needs

Everything but the target facts below is the shared LLVM layer's (``nnvm_backend_llvm``): code
generator, O3 pipeline, export linked by the cross gcc, the C runtime under qemu, and the CPU schedules
of the core (``nnvm.cpu``, target key ``cpu``), sized by ``vector_lanes``. Needs
``gcc-riscv64-linux-gnu`` and ``qemu-user`` (Debian's packages; ``make install`` installs them).
"""

from __future__ import annotations

import nnvm
from nnvm.target import Target
from nnvm_backend_llvm import CrossLLVMBackend, CrossToolchain, LLVMTarget, feature_switches

RISCV64 = CrossToolchain(
    kind="riscv64",
    triple="riscv64-unknown-linux-gnu",  # LLVM's; with +d it picks the lp64d ABI, as Debian's gcc does
    cpu="generic-rv64",
    features="+m,+a,+f,+d,+c",  # RV64GC: what every RISC-V Linux distribution requires
    gnu="riscv64-linux-gnu",  # gcc-riscv64-linux-gnu's prefix and sysroot (/usr/riscv64-linux-gnu)
    qemu="qemu-riscv64",
    # the emulated CPU has V (128-bit vectors), so modules built with and without +v both run
    qemu_args=("-cpu", "rv64,v=true,vlen=128"),
    elf_machine=243,  # EM_RISCV
    elf_class=2,
    machine_name="RISC-V",
    host_machines=("riscv64",),
)


class RiscvBackend(CrossLLVMBackend):
    """LLVM code for 64-bit RISC-V Linux, cross-compiled here and run under qemu-riscv64."""

    name = "llvm-riscv"
    toolchains = {"riscv64": RISCV64}
    # The extensions a CPU signature records (tuning logs are matched on them), and how a board shows
    # it has one (the footer records it; the loader refuses a module using one the board lacks): the
    # kernel's AT_HWCAP has bit (letter - 'a') for each single-letter extension.
    signature_features = ("v", "zfh", "zvfh")
    feature_probes = {"v": "hwcap:21"}

    def vector_lanes(self, target: Target) -> int:
        """4 x float32: V guarantees 128-bit vectors (Zvl128b); without V, LLVM splits the same tiles
        into scalar code, which the templates' 4-wide register tiles still suit (32 FP registers)."""
        return 4

    def vector_registers(self, target: Target) -> int:
        """v0-v31 with V (v0 doubles as the mask register); f0-f31 without."""
        return 32

    def has_fma(self, resolved: LLVMTarget, features: frozenset) -> bool:
        """Fused multiply-add is in F and D (``fmadd.s``), and in V (``vfmacc.vv``)."""
        return bool(feature_switches(resolved.features).get("f"))


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(RiscvBackend())

"""Targets ``aarch64`` and ``armv7``: the shared LLVM layer with Arm triples and cross tools.

Everything but the target facts is ``nnvm_backend_llvm``'s ``CrossLLVMBackend``: the stages (codegen,
parse, optimize, jit), the code generator, the export linked by the cross gcc with the C entry point the
device runtime calls, and ``mod.run`` under qemu-user off an Arm host. What this module says:

- ``ARM_TARGETS``: ``aarch64`` is ``aarch64-unknown-linux-gnu`` on a Cortex-A72 (NEON); ``armv7`` is
  ``armv7a-unknown-linux-gnueabihf`` (hard float), a generic ARMv7-A with ``+neon,+vfp4``. Not
  ``-mcpu=cortex-a15``: LLVM's A15-only register pass crashes on some i64 vector compares; and the
  Cortex-A7 model marks vector multiply-accumulate slow, so LLVM would split every ``vmla``.
  ``-mcpu``/``-mattr``/``-mtriple`` work as for ``llvm``.
- schedules: the core's CPU layer (``nnvm.cpu``, key ``cpu``) at NEON width: ``vector_lanes`` answers
  4 x float32 (and ``vector_registers``, ``broadcast_operand``: 32 on AArch64, by-element ``fmla``),
  so its templates come out sized for NEON: the register-blocked conv2d (up to 8 output
  channels x 4 columns in registers, each input vector feeding 8 ``fmla``), depthwise conv2d, dense
  (vector partial sums), softmax/layer-norm rows, and the rows-apart schedule of index remaps;
  ``nnvm tune`` searches their knobs here too. ``blocked_layout`` answers no (the NCHW[x]c layout was
  measured on x86 only), so the NCHW[x]c, Winograd and packed-dense templates, which take only what
  that layout pass makes, decline; other groups get the generic schedule, vectorized by LLVM.
- 8-bit kernels: the CPU layer's blocked int8 convolution, depthwise and dense kernels (its 8-bit
  layout pass runs wherever the backend has ``dot_u8s8``) over 16-byte vectors, 4 int32 lanes, in the
  form ``dot_isa`` picks: ``usdot`` (``+i8mm``), ``sdot`` (``+dotprod``) or the NEON fallback.
"""

from __future__ import annotations

import os

import nnvm
from nnvm.target import Target
from nnvm_backend_llvm import CrossLLVMBackend, CrossToolchain, LLVMTarget, feature_switches

# Debian's cross packages (gcc-aarch64-linux-gnu, gcc-arm-linux-gnueabihf, qemu-user) install exactly
# these commands and sysroots; make install installs them.
ARM_TARGETS = {
    "aarch64": CrossToolchain(
        kind="aarch64", triple="aarch64-unknown-linux-gnu", cpu="cortex-a72", features="+neon",
        gnu="aarch64-linux-gnu", qemu="qemu-aarch64", elf_machine=183, elf_class=2,
        host_machines=("aarch64", "arm64"), arch_prefixes=("aarch64", "arm64")),
    "armv7": CrossToolchain(
        kind="armv7", triple="armv7a-unknown-linux-gnueabihf", cpu="generic", features="+neon,+vfp4",
        gnu="arm-linux-gnueabihf", qemu="qemu-arm", elf_machine=40, elf_class=1,
        host_machines=("armv7l", "armv8l"), arch_prefixes=("arm", "thumb"), machine_name="32-bit Arm"),
}


# The AArch64 byte dot products of CPUs named by ``-mcpu`` alone (llvmlite does not list a named CPU's
# features): LLVM's own CPU definitions have them (``test_arm_int8.py`` compiles each). A subset:
# a CPU missing here gets the NEON form (slower, never wrong); one listed wrongly would not compile.
DOTPROD_CPUS = frozenset({"cortex-a55", "cortex-a75", "cortex-a76", "cortex-a77", "cortex-a78", "cortex-x1",
                          "neoverse-n1"})
I8MM_CPUS = frozenset({"cortex-a710", "cortex-x2", "neoverse-n2", "neoverse-v1", "neoverse-v2"})


class ArmBackend(CrossLLVMBackend):
    """LLVM code for 64-bit (``aarch64``) and 32-bit hard-float (``armv7``) Arm Linux with NEON."""

    name = "llvm-arm"
    toolchains = ARM_TARGETS
    # Its own shipped logs (none yet: the folder may be missing) and the NEON-era extensions a CPU
    # signature records; ``cpu_signature`` itself is the layer's (128-bit vectors from ``vector_lanes``).
    tuned_dir = os.path.join(os.path.dirname(__file__), "tuned")
    signature_features = ("neon", "vfp4", "fp-armv8", "fullfp16", "dotprod", "i8mm", "bf16", "sve", "sve2")
    # AArch64's extensions beyond NEON an export records (``-mattr=+sve``...), with the kernel's AT_HWCAP
    # and AT_HWCAP2 bits that show a board has them (qemu-aarch64 reports its emulated CPU's)
    feature_probes = {"fullfp16": "hwcap:10", "dotprod": "hwcap:20", "sve": "hwcap:22", "sve2": "hwcap2:1",
                      "i8mm": "hwcap2:13", "bf16": "hwcap2:14"}

    def vector_lanes(self, target: Target) -> int:
        """NEON: 128-bit vectors, 4 x float32, on both ``aarch64`` and ``armv7`` (SVE is not used)."""
        return 4

    def vector_registers(self, target: Target) -> int:
        """AArch64: 32 (v0-v31); ARMv7: 16 quad registers (q0-q15)."""
        return 32 if self.resolve(target).arch.startswith(("aarch64", "arm64")) else 16

    def broadcast_operand(self, target: Target) -> bool:
        """Yes: the by-element multiply-add (``fmla v0.4s, v1.4s, v2.s[1]`` on AArch64, ``vmla.f32 q0,
        q1, d4[1]`` on ARMv7) reads its scalar from a lane, so four broadcasts share one register
        loaded once, not a register each."""
        return True

    def blocked_layout(self, target: Target) -> bool:
        """No: Arm keeps NCHW. Turned on, the NCHW[x]c, Winograd and packed-dense path computes right here
        too (the conformance suite and the ResNet-18/MobileNetV2/SqueezeNet tests pass under qemu at 4
        lanes), but its speed was only ever measured on x86, and qemu cannot time Arm hardware."""
        return False

    def dot_isa(self, target: Target) -> str:
        """How ``dot_u8s8`` multiplies bytes: ``usdot`` where AArch64 has ``+i8mm`` (u8 x s8 as it is),
        ``sdot`` with ``+dotprod`` (the activation read as int8 ``a ^ 0x80``, its ``128 * sum(b)`` added
        back exactly inside the kernel), else ``neon`` (AArch64 without dot products, and ARMv7)."""
        return dot_form(self.resolve(target))

    def code_features(self, resolved: LLVMTarget) -> dict:
        """Those of ``feature_probes`` on AArch64 (ARMv7's HWCAP bits differ, and it has none of them), and
        the dot product a CPU named by ``-mcpu`` alone brings (``DOTPROD_CPUS``), so that an export for
        ``-mcpu=neoverse-n1`` is refused, not killed by SIGILL, on a board without ``sdot``."""
        if not resolved.arch.startswith(("aarch64", "arm64")):
            return {}
        features = super().code_features(resolved)
        form = dot_form(resolved)
        for name in {"usdot": ("i8mm",), "sdot": ("dotprod",)}.get(form, ()):
            features.setdefault(name, self.feature_probes[name])
        return features

    def has_fma(self, resolved: LLVMTarget, features: frozenset) -> bool:
        """AArch64 always has vector FMA (``fmla``); ARMv7 with VFPv4 (``vfma``)."""
        return resolved.arch.startswith(("aarch64", "arm64")) or "vfp4" in features


def dot_form(resolved: LLVMTarget) -> str:
    """``ArmBackend.dot_isa`` of a resolved target: its feature string first, then its CPU's name."""
    if not resolved.arch.startswith(("aarch64", "arm64")):
        return "neon"
    on = feature_switches(resolved.features)
    if on.get("i8mm", resolved.cpu in I8MM_CPUS):
        return "usdot"
    return "sdot" if on.get("dotprod", resolved.cpu in DOTPROD_CPUS | I8MM_CPUS) else "neon"


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(ArmBackend())

"""The ``llvm`` target: x86-64 CPUs (the host by default), on the shared LLVM layer (``nnvm_backend_llvm``).

Everything but the target facts is the layer's (stages, code generator, kernel library, export, thread
pool); this module says what ``llvm`` means:

- ``resolve``: the host's triple and CPU (or the assumed host's, ``nnvm.target.assume_host``), with
  ``-mcpu``/``-mattr``/``-mtriple`` and what decisions read of a CPU besides its ISA (``-l1d=48K
  -l2=1M -l3=32M -cores=8``);
- the vector unit the CPU layer (``nnvm.cpu``, key ``cpu``) sizes its templates by: ``vector_lanes``
  (16 with AVX-512, 8 with AVX2, else 4, from the resolved features or the CPU's name),
  ``vector_registers`` and ``broadcast_operand`` (32 and an embedded broadcast with AVX-512, 16 and none
  with AVX2), and the blocked layout (``blocked_layout``);
- ``code_target``: ``llvm`` alone is this machine, or the CPU ``assume_host`` names (the test suites'
  ``--host-cpu``): its decisions, and code this machine runs;
- ``code_features``: the x86 extensions an export's footer records (``isa.py``); the shipped tuning
  logs (``tuned/``) and the extensions a CPU signature records.
"""

from __future__ import annotations

import os

import nnvm
from nnvm.cpu.switches import enabled
from nnvm.errors import TargetError
from nnvm.runtime.artifact import host_lacks
from nnvm.target import Target, assumed_host
from nnvm_backend_llvm import (
    LLVMBackend,
    LLVMTarget,
    host_cpu,
    host_features,
    host_triple,
    resolve_target,
    same_platform,
)
from nnvm_backend_llvm_x86.isa import (
    FEATURE_PROBES,
    X86_ARCHS,
    code_features,
    cpu_name_features,
    x86_vector_lanes,
)


class X86Backend(LLVMBackend):
    """Compiles loop programs for x86-64 with LLVM; the host CPU unless the target says otherwise."""

    name = "llvm-x86"
    target_kinds = ("llvm",)
    tuned_dir = os.path.join(os.path.dirname(__file__), "tuned")
    signature_features = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                          "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni", "amx-tile")
    feature_probes = FEATURE_PROBES
    elf_machine, elf_class, machine_name = 62, 2, "x86-64"  # EM_X86_64

    def resolve(self, target: Target) -> LLVMTarget:
        """The triple, CPU and features ``target`` means (validated; raises ``TargetError``)."""
        if target.kind not in self.target_kinds:
            raise TargetError(f"target {target}: the llvm-x86 backend builds for 'llvm', not {target.kind!r}")
        resolved = resolve_target(target, host_triple(), *default_cpu())
        if resolved.arch not in X86_ARCHS:
            raise TargetError(f"target {target}: the 'llvm' target is for x86 CPUs; use the target of "
                              f"another CPU plugin for {resolved.triple}")
        return resolved

    def code_target(self, target: Target) -> LLVMTarget:
        """What code for ``target`` is generated for: the CPU it resolves to, except a target naming no
        CPU while the host is assumed (``nnvm.target.assume_host``) to be a CPU this machine cannot
        run: then this machine's CPU, the decisions still the assumed one's (vectors wider than the
        CPU's are legal LLVM, split in two), so the code runs here."""
        resolved = self.resolve(target)
        if (assumed_host() is None or "mcpu" in target.options or _runs_here(resolved)
                or not same_platform(resolved.triple, host_triple())):
            return resolved
        return resolve_target(target, host_triple(), host_cpu(), host_features())

    def host_can_run(self, target: Target) -> bool:
        """This OS and architecture, and every extension the code may use (``-mcpu=sapphirerapids`` on
        an AVX2 machine is a cross compile: run in process, its first kernel would die of SIGILL)."""
        return _runs_here(self.code_target(target))

    def code_features(self, resolved: LLVMTarget) -> dict:
        """The x86 extensions of ``isa.code_features`` (for ``-mcpu`` alone too), with their cpuinfo flags."""
        return {name: FEATURE_PROBES[name] for name in code_features(resolved)}

    def vector_lanes(self, target: Target) -> int:
        """16 with AVX-512, 8 with AVX2, else 4, from the resolved features (or the ``-mcpu`` name alone):
        the width the CPU layer's templates (``nnvm.cpu``) tile registers with."""
        return x86_vector_lanes(self.resolve(target))

    def vector_registers(self, target: Target) -> int:
        """32 with AVX-512 (zmm0-31), else 16 (ymm or xmm 0-15)."""
        return 32 if self.vector_lanes(target) == 16 else 16

    def broadcast_operand(self, target: Target) -> bool:
        """With AVX-512: ``vfmadd231ps zmm, zmm, [mem]{1to16}`` broadcasts inside the multiply-add. Not
        with AVX2 (a ``vbroadcastss`` into a register first); ``cpu_switches={"avx2_tiles": "0"}`` answers yes
        there too: the cost model's tiles before session 11, for A/B benchmarks. SSE (4 lanes) is
        answered yes, as before, although its broadcast takes a register: it has no FMA either (a
        product takes a register too), and the exact count of no measured mixed there. Zen 4, one
        thread, ``-mcpu=x86-64``, kernel sums: ResNet-18 90 -> 81 ms, SqueezeNet 47 -> 45, but ViT-B/16
        93 -> 114 (its packed dense tiles and the patch convolution slower)."""
        lanes = self.vector_lanes(target)
        return lanes != 8 or not enabled("avx2_tiles")

    def blocked_layout(self, target: Target) -> bool:
        """Yes: on x86, conv2d in ``NCHW16c``/``NCHW8c`` and dense over packed weights beat NCHW."""
        return True

    def features_of_cpu_name(self, lanes: int) -> frozenset:
        """``-mcpu`` alone: LLVM knows the CPU's features but llvmlite does not tell them; the vector
        width (known by name in ``isa``) implies the ones a schedule cares about."""
        if lanes >= 16:
            return frozenset({"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
        return frozenset({"avx", "avx2", "fma", "f16c"}) if lanes == 8 else frozenset()


def default_cpu() -> tuple[str, str]:
    """(CPU, features) of a target that names no CPU: the assumed host's (``nnvm.target.assume_host``:
    its name and the features its vector width implies, so ``-mattr=-avx512f`` takes from them as from
    this machine's), else this machine's, whose features are known (also when it is the one assumed)."""
    assumed = assumed_host()
    if assumed is None or assumed.cpu == host_cpu():
        return host_cpu(), host_features()
    return assumed.cpu, cpu_name_features(assumed.cpu)


def _runs_here(resolved: LLVMTarget) -> bool:
    """Whether this machine runs code built for ``resolved``: its platform, and every extension."""
    return same_platform(resolved.triple, host_triple()) and not host_lacks(
        {name: FEATURE_PROBES[name] for name in code_features(resolved)})


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(X86Backend())

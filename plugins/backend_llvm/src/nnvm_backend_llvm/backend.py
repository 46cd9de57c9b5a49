"""The ``llvm`` target: x86-64 CPUs (the host by default), code generated with llvmlite.

How a ``build`` call turns loop programs into running code, in the order of ``LLVMBackend.stages``:

1. ``codegen``: every ``PrimFunc`` of the call into ONE LLVM module (``codegen.CodeGenLLVM``);
2. ``parse``: llvmlite reads the IR text and verifies it;
3. ``optimize``: LLVM's O3 pipeline once for the whole module, with the target machine of the host
   CPU (name and features, so AVX2 / AVX-512 are used) driving the vectorizers;
4. ``jit``: MCJIT turns it into machine code in this process (our thread pool, ``nnvm_pool.c``, and
   libm made resolvable).

Schedules are the core's CPU layer (``nnvm.cpu``, key ``cpu``): this backend answers ``vector_lanes``
(16 with AVX-512, 8 with AVX2, else 4, from the resolved features or the CPU's name), the vector unit
the cost model counts with (``vector_registers``, ``broadcast_operand``: 32 and an embedded broadcast
with AVX-512, 16 and none with AVX2) and asks for the blocked layout (``blocked_layout``).

``KernelLibrary.export`` later emits position-independent object code from the same optimized IR
and links a shared library with the data blobs (see ``library.py``).

Threads: parallel loops run on our own pool (``nnvm_pool.c``: dynamic chunks, bounded spinning). The
team size is ``NNVM_NUM_THREADS`` (read once, at the first parallel kernel call, by the generated code
itself, so exported libraries honour it too);
unless the user set it or ``OMP_NUM_THREADS``, the Python runtime sets it to the number of physical
cores before handing out the first kernel (``nnvm.runtime.threads``).

Target options (TVM style): ``llvm -mcpu=skylake-avx512 -mattr=+avx2,-avx512f -mtriple=...``, and what
decisions read of a CPU besides its ISA, known otherwise for the host only: ``-l1d=48K -l2=1M -l3=32M
-cores=8``. ``llvm`` alone is this machine, or the CPU ``nnvm.target.assume_host`` names (the test
suites' ``--host-cpu``): its decisions, and code this machine runs (``code_target``).
"""

from __future__ import annotations

import functools
import glob
import json
import os
import sys
import time

import llvmlite
import llvmlite.binding as llvm

import nnvm
from nnvm.backend import Backend
from nnvm.cpu.switches import enabled
from nnvm.errors import Error, TargetError
from nnvm.kernel_cache import source_fingerprint
from nnvm.runtime.artifact import host_lacks
from nnvm.target import Target, assumed_host
from nnvm_backend_llvm_x86.codegen import CodeGenLLVM
from nnvm_backend_llvm_x86.kernel_unit import KernelUnit, compile_unit, empty_module, runtime_module
from nnvm_backend_llvm_x86.library import LLVMKernelLibrary, code_features, cpu_name_features
from nnvm_backend_llvm_x86.toolchain import (
    LLVMTarget,
    cpu_facts,
    host_cpu,
    host_features,
    host_triple,
    optimize,
    resolve_target,
    x86_vector_lanes,
)


class LLVMBackend(Backend):
    """Compiles loop programs for x86-64 with LLVM; the host CPU unless the target says otherwise."""

    name = "llvm-x86"
    target_kinds = ("llvm",)
    # Ordered compilation stages (name, method); each takes and returns the build state dict.
    stages = (("codegen", "_codegen"), ("parse", "_parse"), ("optimize", "_optimize"), ("jit", "_jit"))
    library_class = LLVMKernelLibrary  # what ``build`` returns; a subclass may export more (Arm)
    # Shipped tuning logs (``default_tuning_logs``) and the ISA extensions a CPU signature records: the
    # ones a float32 schedule may depend on. A subclass for another ISA names its own (Arm).
    tuned_dir = os.path.join(os.path.dirname(__file__), "tuned")
    signature_features = ("avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl",
                          "avx512vnni", "avx512bf16", "avx512fp16", "avxvnni", "amx-tile")

    def resolve(self, target: Target) -> LLVMTarget:
        """The triple, CPU and features ``target`` means (validated; raises ``TargetError``)."""
        if target.kind not in self.target_kinds:
            raise TargetError(f"target {target}: the llvm-x86 backend builds for 'llvm', not {target.kind!r}")
        resolved = resolve_target(target, host_triple(), *default_cpu())
        if resolved.arch not in ("x86_64", "i386", "i686"):
            raise TargetError(f"target {target}: the 'llvm' target is for x86 CPUs; use the aarch64 or armv7 "
                              f"target for {resolved.triple}")
        return resolved

    def c_compiler(self, target: Target) -> str | None:
        """The C compiler that links exported libraries; None means ``$CC`` or ``cc``."""
        return None

    def check_target(self, target: Target) -> None:
        self.resolve(target)

    def tensor_intrinsics(self, target: Target) -> dict:
        """The micro-kernels of ``intrinsics.py`` (``gemm``), for ``Stage.tensorize``."""
        from nnvm_backend_llvm_x86.intrinsics import TENSOR_INTRINSICS

        return dict(TENSOR_INTRINSICS)

    def host_can_run(self, target: Target) -> bool:
        """This OS and architecture, and every extension the code may use (``-mcpu=sapphirerapids`` on
        an AVX2 machine is a cross compile: run in process, its first kernel would die of SIGILL)."""
        return _runs_here(self.code_target(target))

    def code_target(self, target: Target) -> LLVMTarget:
        """What code for ``target`` is generated for: the CPU it resolves to, except a target naming no
        CPU while the host is assumed (``nnvm.target.assume_host``) to be a CPU this machine cannot
        run: then this machine's CPU, the decisions still the assumed one's (vectors wider than the
        CPU's are legal LLVM, split in two), so the code runs here."""
        resolved = self.resolve(target)
        if (assumed_host() is None or "mcpu" in target.options or _runs_here(resolved)
                or not _same_platform(resolved.triple, host_triple())):
            return resolved
        return resolve_target(target, host_triple(), host_cpu(), host_features())

    def default_tuning_logs(self, target: Target) -> list:
        """Every shipped log, ``tuned/*.jsonl`` (named after the CPU that tuned it): the compiler keeps
        the records whose CPU signature fits the target's (``cpu_signature``), exactly or nearly, and
        refuses the rest (another vector width, no FMA), so one log serves every CPU like its own."""
        return sorted(glob.glob(os.path.join(self.tuned_dir, "*.jsonl")))

    def vector_lanes(self, target: Target) -> int:
        """16 with AVX-512, 8 with AVX2, else 4, from the resolved features (or the ``-mcpu`` name alone):
        the width the CPU layer's templates (``nnvm.cpu``) tile registers with."""
        return x86_vector_lanes(self.resolve(target))

    def vector_registers(self, target: Target) -> int:
        """32 with AVX-512 (zmm0-31), else 16 (ymm or xmm 0-15)."""
        return 32 if self.vector_lanes(target) == 16 else 16

    def broadcast_operand(self, target: Target) -> bool:
        """With AVX-512: ``vfmadd231ps zmm, zmm, [mem]{1to16}`` broadcasts inside the multiply-add. Not
        with AVX2 (a ``vbroadcastss`` into a register first); ``NNVM_X86_AVX2_TILES=0`` answers yes
        there too: the cost model's tiles before session 11, for A/B benchmarks. SSE (4 lanes) is
        answered yes, as before, although its broadcast takes a register: it has no FMA either (a
        product takes a register too), and the exact count of no measured mixed there. Zen 4, one
        thread, ``-mcpu=x86-64``, kernel sums: ResNet-18 90 -> 81 ms, SqueezeNet 47 -> 45, but ViT-B/16
        93 -> 114 (its packed dense tiles and the patch convolution slower)."""
        lanes = self.vector_lanes(target)
        return lanes != 8 or not enabled("NNVM_X86_AVX2_TILES")

    def blocked_layout(self, target: Target) -> bool:
        """Yes: on x86, conv2d in ``NCHW16c``/``NCHW8c`` and dense over packed weights beat NCHW."""
        return True

    def cpu_signature(self, target: Target):
        """What decides a schedule on ``target``: vector width (``vector_lanes``, the width the
        templates use), FMA, the ISA extensions of ``signature_features`` from the resolved feature
        string, and its cache sizes and team size (``host_facts``). Unknown ones are None."""
        from nnvm.autotune.signature import CPUSignature, parse_features

        resolved = self.resolve(target)
        lanes = self.vector_lanes(target)
        features = parse_features(resolved.features, self.signature_features) if resolved.features \
            else self._features_of_cpu_name(lanes)
        facts = self.host_facts(target)
        return CPUSignature(resolved.arch, 32 * lanes, self._has_fma(resolved, features), features,
                            facts.get("cores"), facts.get("l1d"), facts.get("l2"), facts.get("l3"),
                            resolved.cpu)

    def host_facts(self, target: Target) -> dict:
        """``{"l1d", "l2", "l3": bytes, "cores": team size}`` of ``target``'s CPU, each None when
        unknown: those the target states (``-l2=1M``, ``-cores=8``) first; for the host's CPU (the
        assumed one of ``nnvm.target.assume_host``, else this machine when it can run the code) the
        host's caches (sysfs) and the team size of parallel kernels; nothing known of any other CPU."""
        from nnvm.autotune.signature import this_hosts_caches
        from nnvm.runtime.threads import team_size

        resolved = self.resolve(target)
        assumed = assumed_host()
        if assumed is not None:
            known = {"l1d": assumed.l1d, "l2": assumed.l2, "l3": assumed.l3,
                     "cores": assumed.cores or team_size()} if resolved.cpu == assumed.cpu else {}
        elif resolved.cpu == host_cpu() and self.host_can_run(target):
            known = {**this_hosts_caches(), "cores": team_size()}
        else:
            known = {}
        return {key: known.get(key) for key in ("l1d", "l2", "l3", "cores")} | cpu_facts(target)

    def _features_of_cpu_name(self, lanes: int) -> frozenset:
        """``-mcpu`` alone: LLVM knows the CPU's features but llvmlite does not tell them; the vector
        width (known by name in ``toolchain``) implies the ones a schedule cares about."""
        if lanes >= 16:
            return frozenset({"avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq", "avx512vl"})
        return frozenset({"avx", "avx2", "fma", "f16c"}) if lanes == 8 else frozenset()

    def _has_fma(self, resolved: LLVMTarget, features: frozenset) -> bool:
        return "fma" in features

    def kernel_identity(self, target: Target) -> str:
        """The resolved triple, CPU and features, the CPU signature the CPU layer's schedules read (vector
        unit, caches, team size), whether this process runs the code (units then hold machine code),
        llvmlite's and LLVM's versions and a hash of this plugin's source. The code's CPU
        (``code_target``) and the CPU the decisions are made for (an assumed host's) both count."""
        resolved = self.code_target(target)
        signature = self.cpu_signature(target)
        return json.dumps({"backend": self.name, "class": type(self).__qualname__, "triple": resolved.triple,
                           "cpu": resolved.cpu, "features": resolved.features,
                           "decided_for": self.resolve(target).cpu,
                           "signature": signature.to_dict() if signature is not None else None,
                           "jit": self.host_can_run(target), "llvmlite": llvmlite.__version__,
                           "llvm": list(llvm.llvm_version_info), "source": _source_hash(type(self))},
                          sort_keys=True)

    def compile_kernel(self, func, target: Target) -> bytes:
        return compile_unit(func, self.code_target(target), self.host_can_run(target)).to_bytes()

    def link_kernels(self, kernels: list, target: Target) -> LLVMKernelLibrary:
        """The units' object files loaded into one MCJIT engine (no code generation at all)."""
        start = time.perf_counter()
        units = [KernelUnit.from_bytes(k) for k in kernels]
        resolved = self.code_target(target)
        run = self.host_can_run(target)
        uses_parallel = any(u.uses_parallel for u in units)
        module = tm = None
        if run:
            tm = resolved.target_machine()
            module = runtime_module(resolved, tm) if uses_parallel else empty_module(resolved, tm)
        library = self.library_class(
            None, None, resolved, [u.name for u in units], uses_parallel, module=module, tm=tm,
            cc=self.c_compiler(target), uses_scratch=any(u.uses_scratch for u in units), units=units)
        library.compile_seconds["link"] = time.perf_counter() - start
        return self.finish_library(library, target)

    def finish_library(self, library: LLVMKernelLibrary, target: Target) -> LLVMKernelLibrary:
        """What a subclass adds to every library it builds (Arm: its toolchain)."""
        return library

    def build(self, funcs: list, target: Target) -> LLVMKernelLibrary:
        state = {"funcs": list(funcs), "target": self.code_target(target), "parsed": target, "seconds": {},
                 "run": self.host_can_run(target)}
        for stage, method in self.stages:
            start = time.perf_counter()
            state = getattr(self, method)(state)
            state["seconds"][stage] = time.perf_counter() - start
        return self.finish_library(state["library"], target)

    # -- stages -----------------------------------------------------------------------------------
    def _codegen(self, state: dict) -> dict:
        lt: LLVMTarget = state["target"]
        state["tm"] = lt.target_machine()
        cg = CodeGenLLVM(lt.triple, str(state["tm"].target_data))
        for func in state["funcs"]:
            cg.add_function(func)
        state["codegen"] = cg
        state["ir"] = cg.ir_text()
        return state

    def _parse(self, state: dict) -> dict:
        try:
            module = llvm.parse_assembly(state["ir"])
            module.verify()
        except RuntimeError as exc:  # a code generator bug, not the user's: say where to look
            names = ", ".join(f.name for f in state["funcs"])
            raise Error(f"the llvm backend produced invalid IR for {names}: {exc}") from exc
        state["module"] = module
        return state

    def _optimize(self, state: dict) -> dict:
        optimize(state["module"], state["tm"], level=3)
        state["optimized_ir"] = str(state["module"])
        return state

    def _jit(self, state: dict) -> dict:
        cg: CodeGenLLVM = state["codegen"]
        state["library"] = self.library_class(
            state["optimized_ir"], state["ir"], state["target"], cg.kernel_names, cg.uses_parallel,
            module=state["module"] if state["run"] else None, tm=state["tm"],
            compile_seconds=state["seconds"], cc=self.c_compiler(state["parsed"]),
            uses_scratch=cg.uses_scratch)
        return state


@functools.cache
@functools.cache
def _source_hash(backend_class: type) -> str:
    """The source of every package defining a class ``backend_class`` inherits from: this plugin's, and
    a subclass's own (the Arm plugin, a third party's); the core's is in every key already. Read once a
    process, as the core's is (``compiler_fingerprint``): every compile asks for it."""
    tops = dict.fromkeys(c.__module__.split(".")[0] for c in backend_class.__mro__)
    packages = [sys.modules[t] for t in tops
                if t not in ("builtins", "nnvm") and getattr(sys.modules[t], "__file__", None)]
    return source_fingerprint(*packages)


_OS_NAMES = ("linux", "darwin", "macos", "windows", "freebsd", "netbsd", "openbsd", "none")


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
    return _same_platform(resolved.triple, host_triple()) and not host_lacks(code_features(resolved))


def _same_platform(a: str, b: str) -> bool:
    """x86_64-unknown-linux-gnu, x86_64-pc-linux-gnu and x86_64-linux-gnu run the same code:
    compare the architecture and the operating system, whatever the vendor field says."""

    def key(triple: str):
        parts = triple.lower().split("-")
        os_name = next((p for p in parts[1:] if p.startswith(_OS_NAMES)), "")
        return parts[0], next((n for n in _OS_NAMES if os_name.startswith(n)), "")

    return key(a) == key(b)


@nnvm.hookimpl
def nnvm_register_backends(register):
    register(LLVMBackend())

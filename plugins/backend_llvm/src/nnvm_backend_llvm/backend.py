"""The LLVM backend every CPU target shares: stages, kernel units, the kernel cache's identity, export.

How a ``build`` call turns loop programs into running code, in the order of ``LLVMBackend.stages``:

1. ``codegen``: every ``PrimFunc`` of the call into ONE LLVM module (``codegen.CodeGenLLVM``);
2. ``parse``: llvmlite reads the IR text and verifies it;
3. ``optimize``: LLVM's O3 pipeline once for the whole module, with the target machine of the resolved
   CPU (name and features) driving the vectorizers;
4. ``jit``: MCJIT turns it into machine code in this process (our thread pool, ``nnvm_pool.c``, and
   libm made resolvable), when this process can run the code.

A CPU target is a subclass that declares its facts: ``resolve`` (triple, CPU, features), the vector
unit the CPU layer (``nnvm.cpu``, key ``cpu``) sizes its templates by (``vector_lanes``,
``vector_registers``, ``broadcast_operand``, ``blocked_layout``), the ISA extensions a CPU signature
records (``signature_features``) and its shipped tuning logs (``tuned_dir``). ``CrossLLVMBackend``
adds what a target this host does not run needs: a ``CrossToolchain`` per target kind (cross
compiler, ELF machine, emulator), a library that runs under the emulator, and ``open_foreign``.

Threads: parallel loops run on our own pool (``nnvm_pool.c``: dynamic chunks, bounded spinning). The
team size is ``NNVM_NUM_THREADS`` (read once, at the first parallel kernel call, by the generated code
itself, so exported libraries honour it too); unless the user set it or ``OMP_NUM_THREADS``, the Python
runtime sets it to the number of physical cores before handing out the first kernel
(``nnvm.runtime.threads``).
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

from nnvm.backend import Backend, NativeTarget
from nnvm.errors import Error, TargetError
from nnvm.kernel_cache import source_fingerprint
from nnvm.runtime.artifact import host_lacks
from nnvm.target import Target, assumed_host
from nnvm_backend_llvm.codegen import CodeGenLLVM
from nnvm_backend_llvm.cross import CrossToolchain
from nnvm_backend_llvm.cross_library import CrossKernelLibrary, ForeignArtifact
from nnvm_backend_llvm.elf import elf_header
from nnvm_backend_llvm.intrinsics import TENSOR_INTRINSICS, dot_u8s8
from nnvm_backend_llvm.kernel_unit import KernelUnit, compile_unit, empty_module, runtime_module
from nnvm_backend_llvm.library import LLVMKernelLibrary
from nnvm_backend_llvm.toolchain import (
    LLVMTarget,
    cpu_facts,
    feature_switches,
    host_cpu,
    host_triple,
    optimize,
    resolve_target,
)


class LLVMBackend(Backend):
    """Compiles loop programs with LLVM for one CPU family; a target plugin subclasses it and says which.

    A subclass sets ``name`` and ``target_kinds`` and answers ``resolve``; the CPU layer's questions
    (``vector_lanes``...) have ``nnvm.backend.Backend``'s defaults until it answers them."""

    name = "llvm"
    keys = ("cpu",)  # the CPU layer (``nnvm.cpu``) serves every LLVM target
    device = "cpu"
    # Ordered compilation stages (name, method); each takes and returns the build state dict.
    stages = (("codegen", "_codegen"), ("parse", "_parse"), ("optimize", "_optimize"), ("jit", "_jit"))
    library_class = LLVMKernelLibrary  # what ``build`` returns; a subclass may run it elsewhere (cross)
    # Shipped tuning logs (``default_tuning_logs``: every ``*.jsonl`` there; None: none) and the ISA
    # extensions a CPU signature records: the ones a float32 schedule may depend on.
    tuned_dir: str | None = None
    signature_features: tuple = ()
    # How a host shows it has an ISA extension, for an export's footer (``code_features``):
    # ``{LLVM feature name: "cpuinfo:FLAG" | "hwcap:BIT" | "hwcap2:BIT"}`` (``nnvm.runtime.artifact``).
    feature_probes: dict = {}
    # The ELF facts of a target this host runs natively (x86: 62, 2, "x86-64"); a cross target's are its
    # toolchain's. None: the C runtime does not serve it.
    elf_machine: int | None = None
    elf_class: int = 2
    machine_name: str = ""

    def resolve(self, target: Target) -> LLVMTarget:
        """The triple, CPU and features ``target`` means (validated; raises ``TargetError``)."""
        raise NotImplementedError(f"{type(self).__name__} must say what its targets mean (resolve)")

    def c_compiler(self, target: Target) -> str | None:
        """The C compiler that links exported libraries; None means ``$CC`` or ``cc``."""
        return None

    def native_target(self, target: Target) -> NativeTarget | None:
        """The C runtime's facts of ``target``: the C compiler (``c_compiler``, else ``$CC`` or ``cc``) and
        the declared ELF machine and class, run natively."""
        if self.elf_machine is None:
            return None
        cc = self.c_compiler(target) or os.environ.get("CC", "cc")
        name = self.machine_name or target.kind
        return NativeTarget(target.kind, cc, self.elf_machine, self.elf_class, name)

    def check_target(self, target: Target) -> None:
        self.resolve(target)

    def tensor_intrinsics(self, target: Target) -> dict:
        """The micro-kernels of ``intrinsics.py``, for ``Stage.tensorize``: ``gemm``, and ``dot_u8s8`` in
        the form ``target``'s features allow (``dot_isa``)."""
        return {**TENSOR_INTRINSICS, "dot_u8s8": functools.partial(dot_u8s8, isa=self.dot_isa(target))}

    def dot_isa(self, target: Target) -> str:
        """How ``dot_u8s8`` multiplies bytes on ``target``: ``avx512vnni`` where the code uses 512-bit
        vectors and has VNNI, ``avxvnni`` where it has VNNI on 256-bit vectors (AVX-VNNI, or AVX-512
        VNNI with VL), ``avx2`` (``vpmaddwd`` on 16-bit values, exact), else ``widened`` (exact 16-bit
        products, any CPU)."""
        on = set(self.code_features(self.resolve(target)))
        if "avx512vnni" in on and self.vector_lanes(target) == 16:
            return "avx512vnni"
        if "avxvnni" in on or {"avx512vnni", "avx512vl"} <= on:
            return "avxvnni"
        return "avx2" if "avx2" in on else "widened"

    def host_can_run(self, target: Target) -> bool:
        """This OS and architecture, and every extension the code may use (code for a CPU with extensions
        this one lacks is a cross compile: run in process, its first kernel would die of SIGILL)."""
        return _runs_here(self.code_target(target), self.code_features(self.code_target(target)))

    def code_target(self, target: Target) -> LLVMTarget:
        """What code for ``target`` is generated for: the CPU it resolves to (x86 may pick this machine's
        CPU when the host is only assumed to be another, ``nnvm.target.assume_host``)."""
        return self.resolve(target)

    def code_features(self, resolved: LLVMTarget) -> dict:
        """``{name: probe}`` of the ISA extensions code built for ``resolved`` may use: those of
        ``feature_probes`` its feature string turns on. Recorded in an export's footer, so a loader on a
        CPU without them refuses it (``nnvm.runtime.artifact.host_lacks``)."""
        on = feature_switches(resolved.features)
        return {name: probe for name, probe in self.feature_probes.items() if on.get(name)}

    def default_tuning_logs(self, target: Target) -> list:
        """Every shipped log, ``tuned_dir/*.jsonl`` (named after the CPU that tuned it): the compiler keeps
        the records whose CPU signature fits the target's (``cpu_signature``), exactly or nearly, and
        refuses the rest (another vector width, no FMA), so one log serves every CPU like its own."""
        return sorted(glob.glob(os.path.join(self.tuned_dir, "*.jsonl"))) if self.tuned_dir else []

    def cpu_signature(self, target: Target):
        """What decides a schedule on ``target``: vector width (``vector_lanes``, the width the
        templates use), FMA, the ISA extensions of ``signature_features`` from the resolved feature
        string, and its cache sizes and team size (``host_facts``). Unknown ones are None."""
        from nnvm.autotune.signature import CPUSignature, parse_features

        resolved = self.resolve(target)
        lanes = self.vector_lanes(target)
        if lanes is None:  # no vector unit declared: no CPU templates, nothing for a log to match
            return None
        features = parse_features(resolved.features, self.signature_features) if resolved.features \
            else self.features_of_cpu_name(lanes)
        facts = self.host_facts(target)
        return CPUSignature(resolved.arch, 32 * lanes, self.has_fma(resolved, features), features,
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

    def features_of_cpu_name(self, lanes: int) -> frozenset:
        """The signature features of a target given by ``-mcpu`` alone, whose features llvmlite does not
        list: none known here (x86 infers them from the vector width)."""
        return frozenset()

    def has_fma(self, resolved: LLVMTarget, features: frozenset) -> bool:
        """Whether ``resolved`` has a vector fused multiply-add (a CPU signature's ``fma``); ``features`` are
        its ``signature_features`` that are on. x86 names it ``fma``; other ISAs answer for themselves."""
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
        """What a subclass adds to every library it builds (a cross target: its toolchain); here the ISA
        extensions the code may use, for the export's footer."""
        library.cpu_features = self.code_features(library.target)
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
def _source_hash(backend_class: type) -> str:
    """The source of every package defining a class ``backend_class`` inherits from: this layer's, and
    the target plugin's own (x86, Arm, a third party's); the core's is in every key already. Read once a
    process, as the core's is (``compiler_fingerprint``): every compile asks for it."""
    tops = dict.fromkeys(c.__module__.split(".")[0] for c in backend_class.__mro__)
    packages = [sys.modules[t] for t in tops
                if t not in ("builtins", "nnvm") and getattr(sys.modules[t], "__file__", None)]
    return source_fingerprint(*packages)


_OS_NAMES = ("linux", "darwin", "macos", "windows", "freebsd", "netbsd", "openbsd", "none")


def _runs_here(resolved: LLVMTarget, features) -> bool:
    """Whether this machine runs code built for ``resolved``: its platform, and every extension."""
    return same_platform(resolved.triple, host_triple()) and not host_lacks(features)


def same_platform(a: str, b: str) -> bool:
    """x86_64-unknown-linux-gnu, x86_64-pc-linux-gnu and x86_64-linux-gnu run the same code:
    compare the architecture and the operating system, whatever the vendor field says."""

    def key(triple: str):
        parts = triple.lower().split("-")
        os_name = next((p for p in parts[1:] if p.startswith(_OS_NAMES)), "")
        return parts[0], next((n for n in _OS_NAMES if os_name.startswith(n)), "")

    return key(a) == key(b)


class CrossLLVMBackend(LLVMBackend):
    """An LLVM target this host may not run: a ``CrossToolchain`` per target kind (``toolchains``) says
    its triple, default CPU and features, cross compiler, ELF machine and emulator. Built code links
    with the cross compiler and runs here under the emulator (qemu-user) with the C runtime ``nnvm-run``;
    on a matching host it runs in process."""

    library_class = CrossKernelLibrary
    toolchains: dict = {}  # target kind -> CrossToolchain

    @property
    def target_kinds(self) -> tuple:
        return tuple(self.toolchains)

    def toolchain(self, target: Target) -> CrossToolchain:
        tc = self.toolchains.get(target.kind)
        if tc is None:
            raise TargetError(f"target {target}: the {self.name} backend builds for "
                              f"{', '.join(self.toolchains)}, not {target.kind!r}")
        return tc

    def resolve(self, target: Target) -> LLVMTarget:
        """The toolchain's triple, CPU and features; ``-mcpu``/``-mattr``/``-mtriple`` as for ``llvm``
        (a ``-mtriple`` of another architecture is refused)."""
        tc = self.toolchain(target)
        triple = target.options.get("mtriple", tc.triple)
        if not str(triple).split("-")[0].startswith(tc.arch_prefixes):
            raise TargetError(f"target {target}: -mtriple={triple} is not a {tc.kind} triple")
        return resolve_target(target, tc.triple, tc.cpu, tc.features)

    def c_compiler(self, target: Target) -> str:
        return self.toolchain(target).cc

    def native_target(self, target: Target) -> NativeTarget:
        tc = self.toolchain(target)
        return NativeTarget(target.kind, tc.cc, tc.elf_machine, tc.elf_class, tc.machine_name,
                            tuple(tc.emulator_prefix()))

    def host_can_run(self, target: Target) -> bool:
        return self.toolchain(target).runs_natively()

    def finish_library(self, library: CrossKernelLibrary, target: Target) -> CrossKernelLibrary:
        library = super().finish_library(library, target)
        library.toolchain = self.toolchain(target)
        return library

    def open_foreign(self, path: str) -> ForeignArtifact | None:
        """An exported module of one of these targets that this host cannot ``dlopen``; None for files of
        other CPUs."""
        header = elf_header(path)
        for tc in self.toolchains.values() if header else ():
            if (tc.elf_class, tc.elf_machine) == header:
                return ForeignArtifact(path, tc)
        return None

"""LLVM target machines, option parsing and the optimization pipeline, shared by the LLVM backends.

``LLVMTarget`` is what a backend resolves a user's target to (triple, CPU name, feature string). The
x86 plugin resolves ``llvm`` to the host; the Arm plugin resolves ``aarch64``/``armv7`` to its own
triples (a vendor's plugin its own) and uses the same class, the same ``optimize`` and ``emit_object``.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from dataclasses import dataclass
from functools import lru_cache

import llvmlite.binding as llvm

from nnvm.autotune.signature import parse_size
from nnvm.errors import TargetError
from nnvm.target import Target

_lock = threading.Lock()
_initialized = False


def init_llvm() -> None:
    """Register every target LLVM was built with (host JIT plus cross targets for export)."""
    global _initialized
    with _lock:
        if not _initialized:
            llvm.initialize_all_targets()
            llvm.initialize_all_asmprinters()
            llvm.initialize_native_asmparser()
            _initialized = True


# The host does not change while the process runs; the CPU layer resolves the target for every group
# it schedules (``vector_lanes``), and asking LLVM for the features each time cost ~250 us a call.
@lru_cache(maxsize=1)
def host_triple() -> str:
    return llvm.get_process_triple()


@lru_cache(maxsize=1)
def host_cpu() -> str:
    return llvm.get_host_cpu_name()


@lru_cache(maxsize=1)
def host_features() -> str:
    return llvm.get_host_cpu_features().flatten()


@dataclass(frozen=True)
class LLVMTarget:
    """What LLVM compiles for: a triple, a CPU name and a feature string (``+avx2,-avx512f``)."""

    triple: str
    cpu: str = ""
    features: str = ""

    def target_machine(self, reloc: str = "default", codemodel: str = "jitdefault", opt: int = 3):
        init_llvm()
        target = llvm.Target.from_triple(self.triple)
        return target.create_target_machine(cpu=self.cpu, features=self.features, opt=opt, reloc=reloc,
                                            codemodel=codemodel)

    @property
    def arch(self) -> str:
        return self.triple.split("-")[0]


def optimize(module: llvm.ModuleRef, tm, level: int = 3) -> None:
    """LLVM's default ``O<level>`` pipeline with vectorizers on, tuned for ``tm``'s CPU, in place."""
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2
    pto.slp_vectorization = level >= 2
    pto.loop_unrolling = level >= 2
    pto.loop_interleaving = level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


_FEATURE = re.compile(r"^[+-][A-Za-z0-9_.\-]+$")


def feature_switches(features: str) -> dict:
    """{feature: on} from an LLVM feature string read in order (``+avx512f,...,-avx512f`` ends off), with
    what LLVM turns off along with a feature: every AVX-512 extension with ``-avx512f``, every AVX one
    (and FMA, F16C) with ``-avx``."""
    on = {}
    for item in features.split(","):
        if item[:1] in "+-" and len(item) > 1:
            on[item[1:]] = item[0] == "+"
    if on.get("avx512f") is False:  # turned off (``+avx2`` alone says nothing of AVX-512)
        on = {k: v for k, v in on.items() if not k.startswith("avx512")}
    if on.get("avx") is False:
        on = {k: v for k, v in on.items() if not k.startswith(("avx", "fma", "f16c"))}
    return on


def cpu_facts(target) -> dict:
    """``{"l1d", "l2", "l3": bytes, "cores": count}`` a target states (``-l2=1M``, ``-cores=8``), only
    those it states; raises ``TargetError`` for a value that is not a size or a count."""
    facts = {}
    for key in CPU_FACT_OPTIONS:
        text = target.options.get(key)
        if text is None or text is True:
            continue
        value = parse_size(text) if key != "cores" else (int(text) if text.isdigit() else None)
        if not value:
            what = "a positive count (-cores=8)" if key == "cores" else "a size in bytes (48K, 1M, 32M)"
            raise TargetError(f"target {target}: -{key}={text} should be {what}")
        facts[key] = value
    return facts


@lru_cache(maxsize=64)
def llvm_warnings(triple: str, cpu: str, features: str) -> tuple[str, ...]:
    """What LLVM says about a CPU name and feature string (it only prints warnings, to stderr)."""
    init_llvm()
    target = llvm.Target.from_triple(triple)
    with _lock, tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            target.create_target_machine(cpu=cpu, features=features)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        text = sink.read().decode(errors="replace")
    return tuple(line for line in text.splitlines() if "not a recognized" in line)


# What a target may say of the CPU besides its ISA, for the decisions that read it (the backend's
# ``cpu_signature``): ``llvm -mcpu=znver5 -l1d=48K -l2=1M -l3=32M -cores=8``.
CPU_FACT_OPTIONS = ("l1d", "l2", "l3", "cores")


def resolve_target(target, triple: str, default_cpu: str, default_features: str,
                   allowed=("mcpu", "mattr", "mtriple", *CPU_FACT_OPTIONS)) -> LLVMTarget:
    """Turn a parsed ``nnvm.target.Target`` into an ``LLVMTarget``, validating its options.

    ``-mcpu`` alone selects that CPU with its own features; ``-mattr`` alone adds to (or removes from)
    the default CPU's features; ``-mcpu=native`` is this machine's CPU (never an assumed one). The cache
    and core options are checked here and read by ``cpu_facts``. Remembered per target and default CPU
    (an assumed host's too): the CPU layer asks for every group it schedules (~1400 times a model).
    """
    options = tuple((k, v if isinstance(v, str | bool) else str(v)) for k, v in target.options.items())
    native = (host_cpu(), host_features()) if target.options.get("mcpu") == "native" else None
    return _resolve(target.kind, options, str(target), triple, default_cpu, default_features, tuple(allowed),
                    native)


@lru_cache(maxsize=256)
def _resolve(kind: str, options: tuple, text: str, triple: str, default_cpu: str, default_features: str,
             allowed: tuple, native: tuple | None) -> LLVMTarget:
    target = Target(kind, dict(options), text)
    opts = dict(target.options)
    for key in opts:
        if key not in allowed:
            raise TargetError(f"target {target}: unknown option -{key} (the {target.kind} target "
                              f"understands {', '.join('-' + a for a in allowed)})")
    for key in opts:
        if opts[key] is True or opts[key] == "":
            raise TargetError(f"target {target}: option -{key} needs a value (-{key}=...)")
    cpu_facts(target)
    triple = opts.get("mtriple", triple)
    try:
        init_llvm()
        llvm.Target.from_triple(triple)
    except RuntimeError as exc:
        raise TargetError(f"target {target}: LLVM cannot generate code for the triple {triple!r} ({exc})"
                          ) from None
    mattr = opts.get("mattr")
    if mattr is not None:
        for item in mattr.split(","):
            if not _FEATURE.match(item):
                raise TargetError(f"target {target}: -mattr item {item!r} should look like "
                                  "+feature or -feature")
    cpu = opts.get("mcpu")
    if cpu == "native":
        cpu, features = native
    elif cpu is not None:
        features = ""
    else:
        cpu, features = default_cpu, default_features
    if mattr:
        features = f"{features},{mattr}" if features else mattr
    for line in llvm_warnings(triple, cpu, features):
        what = "-mcpu" if "processor" in line else "-mattr"
        name = line.split("'")[1] if "'" in line else line
        raise TargetError(f"target {target}: {what} value {name!r} is not known to LLVM for {triple}")
    return LLVMTarget(triple, cpu, features)

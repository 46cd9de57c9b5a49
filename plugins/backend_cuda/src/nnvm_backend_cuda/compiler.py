"""CUDA source -> cubin (and PTX) with NVRTC, and what ptxas says about each kernel.

NVRTC ships as PyPI wheels (``nvidia-cuda-nvrtc-cu12``, driven through ``cuda-bindings``) and needs no
GPU and no driver, so every compile here, in CI too, is the real one. Given a real architecture
(``--gpu-architecture=sm_80``) it emits a cubin for it, plus the PTX, kept so a newer GPU can JIT it.
``-Xptxas=-v`` puts ptxas's per-kernel report into the log: registers, spills, static shared memory.
A kernel beyond what the architecture can launch is a compile error naming it, not a launch failure.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import threading
from dataclasses import dataclass, field

from nnvm.errors import Error, TargetError

# Per architecture: max warps per SM, max blocks per SM, shared memory per SM (bytes), registers per SM.
# (CUDA C Programming Guide, "Compute Capabilities" table.) Every listed architecture allows 1024
# threads per block, 48 KiB of static shared memory per block, 255 registers per thread and 64 Ki
# registers per block.
ARCHS = {
    "sm_50": (64, 32, 65536, 65536), "sm_52": (64, 32, 98304, 65536), "sm_53": (64, 32, 65536, 65536),
    "sm_60": (64, 32, 65536, 65536), "sm_61": (64, 32, 98304, 65536), "sm_62": (64, 32, 65536, 65536),
    "sm_70": (64, 32, 98304, 65536), "sm_72": (64, 32, 98304, 65536), "sm_75": (32, 16, 65536, 65536),
    "sm_80": (64, 32, 167936, 65536), "sm_86": (48, 16, 102400, 65536), "sm_87": (48, 16, 167936, 65536),
    "sm_89": (48, 24, 102400, 65536), "sm_90": (64, 32, 233472, 65536), "sm_100": (64, 32, 233472, 65536),
    "sm_120": (48, 32, 102400, 65536),
}
MAX_THREADS_PER_BLOCK = 1024
MAX_STATIC_SHARED = 48 * 1024
REGISTERS_PER_BLOCK = 65536
DEFAULT_ARCH = "sm_80"


@dataclass
class KernelUsage:
    """ptxas's report for one kernel (bytes for memory, counts for registers)."""

    name: str
    registers: int = 0
    shared_bytes: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    barriers: int = 0

    def as_dict(self) -> dict:
        return {"registers": self.registers, "shared_bytes": self.shared_bytes,
                "spill_stores": self.spill_stores, "spill_loads": self.spill_loads,
                "stack_bytes": self.stack_bytes, "barriers": self.barriers}


@dataclass
class CompiledCUDA:
    """The result of one NVRTC compile: the cubin for ``arch``, the PTX, and ptxas's usage per kernel."""

    arch: str
    cubin: bytes
    ptx: bytes
    usage: dict = field(default_factory=dict)  # kernel name -> KernelUsage
    log: str = ""


def check_arch(arch: str, target=None) -> str:
    """``arch`` if NVRTC can build a cubin for it (``sm_XY``), else a ``TargetError``."""
    if arch not in ARCHS:
        where = f"target {target}: " if target is not None else ""
        raise TargetError(f"{where}-arch={arch} is not a known NVIDIA architecture (known: "
                          f"{', '.join(ARCHS)})")
    return arch


def _fp16_include() -> str | None:
    """The include directory holding ``cuda_fp16.h``: the CUDA 12 runtime wheel's (``nvidia/cuda_runtime``),
    the CUDA 13 wheels' (``nvidia/cu13``), else an installed toolkit's; None when there is none."""
    try:
        import nvidia
    except ImportError:
        bases = []
    else:
        bases = [os.path.join(b, sub) for b in nvidia.__path__ for sub in ("cuda_runtime", "cu13")]
    for base in [*bases, os.environ.get("CUDA_HOME", "/usr/local/cuda")]:
        inc = os.path.join(base, "include")
        if os.path.exists(os.path.join(inc, "cuda_fp16.h")):
            return inc
    return None


_FUNC = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BAR = re.compile(r"used (\d+) barriers")


def parse_ptxas_log(log: str) -> dict:
    """Kernel name -> ``KernelUsage`` from the ``-Xptxas=-v`` lines of an NVRTC log."""
    usage: dict = {}
    current = None
    for line in log.splitlines():
        m = _FUNC.search(line)
        if m:
            current = usage.setdefault(m.group(1), KernelUsage(m.group(1)))
            continue
        if current is None:
            continue
        if m := _STACK.search(line):
            current.stack_bytes, current.spill_stores, current.spill_loads = (int(g) for g in m.groups())
        if m := _USED.search(line):
            current.registers = int(m.group(1))
            if s := _SMEM.search(line):
                current.shared_bytes = int(s.group(1))
            if b := _BAR.search(line):
                current.barriers = int(b.group(1))
    return usage


def check_limits(usage: dict, threads: dict, arch: str) -> None:
    """Raise ``Error`` naming every kernel that ``arch`` cannot launch with its threads per block
    (``threads``: kernel name -> threads per block): too many threads, too much static shared memory,
    or more registers than a block may hold."""
    problems = []
    for name, u in usage.items():
        n = threads.get(name, 1)
        if n > MAX_THREADS_PER_BLOCK:
            problems.append(f"{name} has {n} threads per block (the most is {MAX_THREADS_PER_BLOCK})")
        if u.shared_bytes > MAX_STATIC_SHARED:
            problems.append(f"{name} uses {u.shared_bytes} bytes of static shared memory (the most is "
                            f"{MAX_STATIC_SHARED})")
        if u.registers * n > REGISTERS_PER_BLOCK:
            problems.append(f"{name} needs {u.registers} registers x {n} threads = {u.registers * n} "
                            f"registers per block (the most is {REGISTERS_PER_BLOCK})")
    if problems:
        raise Error(f"kernels exceed what {arch} can launch: " + "; ".join(problems))


def occupancy(u: KernelUsage, threads: int, arch: str) -> float:
    """Theoretical occupancy (resident warps / max warps per SM) of a kernel with ``threads`` per block,
    limited by warps, blocks, registers (allocated per warp in units of 256) and shared memory (1 KiB
    reserved per block by the runtime since CUDA 11, allocated in units of 128 bytes)."""
    max_warps, max_blocks, smem_sm, regs_sm = ARCHS[arch]
    warps = -(-threads // 32)
    limits = [max_blocks, max_warps // warps]
    if u.registers:
        regs_per_warp = -(-u.registers * 32 // 256) * 256
        limits.append(regs_sm // (regs_per_warp * warps))
    if u.shared_bytes:
        per_block = -(-(u.shared_bytes + 1024) // 128) * 128
        limits.append(smem_sm // per_block)
    blocks = max(min(limits), 0)
    return blocks * warps / max_warps


GOAL_OCCUPANCY = 0.5  # what a register cap aims for (``compile_capped``)


def min_blocks(threads: int, arch: str, goal: float = GOAL_OCCUPANCY) -> int:
    """Blocks of ``threads`` an SM of ``arch`` must hold for ``goal`` occupancy: ``__launch_bounds__``'s
    second argument, from which ptxas derives its register cap (64 per thread for 50% on sm_80)."""
    max_warps, max_blocks = ARCHS[arch][:2]
    warps = -(-threads // 32)
    return max(1, min(-(-math.ceil(max_warps * goal) // warps), max_blocks, max_warps // warps))


def launch_bounds(source: str) -> dict:
    """Kernel name -> (threads per block, blocks per SM or 0), read back from the ``__launch_bounds__`` the
    printer wrote (threads only) or ``with_min_blocks`` rewrote."""
    return {m.group(3): (int(m.group(1)), int(m.group(2) or 0)) for m in _BOUNDS.finditer(source)}


def with_min_blocks(source: str, blocks: dict) -> str:
    """``source`` with ``__launch_bounds__(threads, n)`` for each kernel named in ``blocks`` (name -> n)
    and ``__launch_bounds__(threads)`` for the others."""
    def bounds(m):
        n = blocks.get(m.group(3))
        return f"__launch_bounds__({m.group(1)}{f', {n}' if n else ''}){m.group(4)}"
    return _BOUNDS.sub(bounds, source)


def compile_capped(source: str, arch: str, threads: dict) -> tuple[str, CompiledCUDA]:
    """(source, compile) where a kernel below ``GOAL_OCCUPANCY`` or spilling gets the register cap of
    ``min_blocks`` if ptxas then spills no more than without it. Left alone, ptxas may give a kernel more
    registers than 50% allows, or too few (it spills at 32-40 registers for some 3x3 convolutions);
    capped, it fits them into 64 (on sm_80/sm_90). Kernels already above the goal stay uncapped: a cap
    lets ptxas take up to 64 registers and lowers their occupancy. A spill costs more than occupancy
    gains, so a kernel that spills more under the cap keeps none. At most three NVRTC runs, one where no
    kernel needs a cap."""
    plain = compile_cuda(source, arch, threads=threads)
    spills = {k: u.spill_stores + u.spill_loads for k, u in plain.usage.items()}
    caps = {k: min_blocks(t, arch) for k, t in threads.items() if k in plain.usage and (
        spills[k] or occupancy(plain.usage[k], t, arch) < GOAL_OCCUPANCY)}
    if not caps:
        return source, plain
    capped = compile_cuda(with_min_blocks(source, caps), arch, threads=threads)
    worse = {k for k in caps if capped.usage[k].spill_stores + capped.usage[k].spill_loads > spills[k]}
    if worse:
        caps = {k: n for k, n in caps.items() if k not in worse}
        capped = compile_cuda(with_min_blocks(source, caps), arch, threads=threads)
    return with_min_blocks(source, caps), capped


_lock = threading.Lock()
_cache: dict = {}  # (arch, source hash) -> CompiledCUDA


def compile_cuda(source: str, arch: str = DEFAULT_ARCH, *, threads: dict | None = None,
                 name: str = "kernels.cu") -> CompiledCUDA:
    """Compile ``source`` for ``arch`` with NVRTC. Compile errors name the kernels of the source and quote
    NVRTC's error lines; ``threads`` (kernel -> threads per block) are checked against ``arch``'s limits."""
    check_arch(arch)
    key = (arch, hashlib.sha256(source.encode()).hexdigest())
    with _lock:
        hit = _cache.get(key)
    if hit is None:
        hit = _nvrtc(source, arch, name)
        with _lock:
            _cache[key] = hit
    if threads:
        check_limits(hit.usage, threads, arch)
    return hit


def _check(result, what: str):
    from cuda.bindings import nvrtc

    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise Error(f"NVRTC {what} failed: {err.name}")
    return rest[0] if len(rest) == 1 else rest


def nvrtc_options(arch: str, version: tuple, include: str | None = None) -> list[bytes]:
    """NVRTC's options for ``arch`` under NVRTC ``version`` (major, minor), ``include``: where
    ``cuda_fp16.h`` is.

    From 12.9 NVRTC keeps a cache of compiled programs on disk (where a CUDA driver is installed) and a
    hit skips ptxas, so its ``-v`` report is missing and every kernel's registers, shared memory and
    spills with it: seen on an H200, where the second compile of a model in a fresh process gave no
    usage at all (no register caps, no limit checks, empty ``cuda_kernels``). ``--no-cache`` turns it
    off; compiles within a process are cached here (``compile_cuda``) with their report."""
    opts = [f"--gpu-architecture={arch}".encode(), b"-Xptxas=-v", b"--std=c++17", b"-default-device"]
    if tuple(version) >= (12, 9):
        opts.append(b"--no-cache")
    if include:
        opts.append(f"--include-path={include}".encode())
    return opts


def _nvrtc_module():
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        raise Error("compiling for cuda needs NVRTC: pip install nvidia-cuda-nvrtc-cu12 cuda-bindings"
                    ) from None
    return nvrtc


def nvrtc_version() -> tuple:
    """(major, minor) of the NVRTC that compiles: the loaded library, whichever wheel brought it."""
    return tuple(_check(_nvrtc_module().nvrtcVersion(), "version"))


def _nvrtc(source: str, arch: str, name: str) -> CompiledCUDA:
    nvrtc = _nvrtc_module()
    version = nvrtc_version()
    prog = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "program creation")
    try:
        opts = nvrtc_options(arch, version, _fp16_include())
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        size = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        buf = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\0 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise Error(compile_error_message(source, log))
        cubin = b" " * _check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        ptx = b" " * _check(nvrtc.nvrtcGetPTXSize(prog), "PTX size")
        _check(nvrtc.nvrtcGetPTX(prog, ptx), "PTX")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return CompiledCUDA(arch, cubin, ptx.rstrip(b"\0"), parse_ptxas_log(log), log)


_ERROR = re.compile(r"\((\d+)\): (?:catastrophic )?error: (.*)")
KERNEL = re.compile(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)\s*\(")
_BOUNDS = re.compile(r"__launch_bounds__\((\d+)(?:,\s*(\d+))?\)(?=\s+(\w+)\s*\()(\s+)")


def kernel_names(source: str) -> list[str]:
    """The ``__global__`` functions of a CUDA source, in order."""
    return KERNEL.findall(source)


def compile_error_message(source: str, log: str) -> str:
    """NVRTC's error lines, each with the kernel it falls in and the source line."""
    lines = source.splitlines()
    starts = [(source[:m.start()].count("\n") + 1, m.group(1)) for m in KERNEL.finditer(source)]
    out = []
    for m in _ERROR.finditer(log):
        line = int(m.group(1))
        kernel = next((k for start, k in reversed(starts) if start <= line), None)
        text = lines[line - 1].strip() if 0 < line <= len(lines) else "?"
        where = f"in kernel {kernel} " if kernel else ""
        msg = f"{m.group(2)} {where}at line {line}: {text}"
        if msg not in out:
            out.append(msg)
    if not out:  # ptxas's own errors (too much shared memory ...) name the entry function themselves
        lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
        out = [ln for ln in lines if "error" in ln.lower()][:5] or lines[:5]
    return "NVRTC rejected the generated CUDA source: " + "; ".join(out[:3]) + (
        f" (and {len(out) - 3} more)" if len(out) > 3 else "")

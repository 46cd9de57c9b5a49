"""The host the test suites reason about, in one place: the machine they run on, or the CPU that
``pytest --host-cpu=NAME`` makes the compiler assume (``nnvm.target.assume_host``).

Tests read the host's facts (vector width, caches, team size) through the root conftest's ``host``
fixture, never from the machine directly, so the whole suite can be run as if on another CPU and a
test that holds on one machine only is found before CI finds it. A test checking a decision names its
CPU instead (``DECISION_TARGETS``: one AVX2 and one AVX-512 CPU, compiled for on any x86 machine).
"""

from __future__ import annotations

from dataclasses import dataclass

from nnvm.autotune.signature import this_hosts_caches
from nnvm.runtime.threads import team_size
from nnvm.target import HostCPU, assumed_host, parse_target

KIB, MIB = 1 << 10, 1 << 20

# Caches of the CPUs ``--host-cpu`` knows by name (a core's L1d and L2, the L3 of a typical part), so
# the decisions that read them are that CPU's; another name runs with its caches unknown (the cost
# model's defaults). The team size stays the one the thread pool really runs.
KNOWN_HOSTS = {
    "haswell": HostCPU("haswell", 32 * KIB, 256 * KIB, 8 * MIB),
    "skylake": HostCPU("skylake", 32 * KIB, 256 * KIB, 8 * MIB),
    "skylake-avx512": HostCPU("skylake-avx512", 32 * KIB, 1 * MIB, 16 * MIB),
    "icelake-server": HostCPU("icelake-server", 48 * KIB, 1280 * KIB, 48 * MIB),
    "sapphirerapids": HostCPU("sapphirerapids", 48 * KIB, 2 * MIB, 60 * MIB),
    "znver3": HostCPU("znver3", 32 * KIB, 512 * KIB, 32 * MIB),
    "znver4": HostCPU("znver4", 32 * KIB, 1 * MIB, 32 * MIB),
    "znver5": HostCPU("znver5", 48 * KIB, 1 * MIB, 32 * MIB),
}

# One CPU of each vector width: a test of a decision checks both, whatever machine runs it.
DECISION_TARGETS = {"avx2": "llvm -mcpu=haswell", "avx512": "llvm -mcpu=skylake-avx512"}


def host_cpu_named(name: str) -> HostCPU:
    """The ``HostCPU`` for ``--host-cpu=NAME``: a known one's caches, else the name alone."""
    return KNOWN_HOSTS.get(name, HostCPU(name))


@dataclass(frozen=True)
class Host:
    """What the suites know of the host: the ``cpu`` its ``target`` (``llvm``) compiles for, ``lanes``
    (float32 per vector), ``l1d``/``l2``/``l3`` bytes and ``cores`` (None where unknown), whether it
    is ``assumed`` (``--host-cpu``) and, where this machine cannot run the assumed CPU's code, ``note``
    saying so (code is then built for this machine's CPU, with the assumed CPU's decisions)."""

    cpu: str
    lanes: int
    l1d: int | None
    l2: int | None
    l3: int | None
    cores: int | None
    assumed: bool
    note: str = ""
    target: str = "llvm"

    def describe(self) -> str:
        """One line: ``haswell, 256-bit vectors, L1d 32K L2 256K L3 8M, 2 threads``."""
        def size(v):
            return "?" if v is None else f"{v // MIB}M" if v % MIB == 0 else f"{v // KIB}K"
        return (f"{self.cpu}, {32 * self.lanes}-bit vectors, L1d {size(self.l1d)} L2 {size(self.l2)} "
                f"L3 {size(self.l3)}, {self.cores or '?'} threads")

    @property
    def isa(self) -> str:
        """``avx512`` or ``avx2`` (``DECISION_TARGETS``' keys), ``sse`` below them."""
        return {16: "avx512", 8: "avx2"}.get(self.lanes, "sse")

    def runs(self, target: str) -> bool:
        """Whether code built for ``target`` runs on this machine (an AVX-512 one runs AVX2 code)."""
        parsed = parse_target(target)
        return parsed.backend.host_can_run(parsed)

    def run_targets(self) -> dict:
        """``{isa: target}`` a test running code runs for: the host's own (``llvm``), and the other
        vector width's ``DECISION_TARGETS`` entry where this machine can run it."""
        found = {self.isa: self.target}
        for isa, target in DECISION_TARGETS.items():
            if isa not in found and self.runs(target):
                found[isa] = target
        return found


def describe_host(target: str = "llvm") -> Host:
    """The ``Host`` of ``target`` (a CPU one): the assumed CPU's facts (``assume_host``), else this
    machine's (sysfs caches, the team size), the vector width its backend answers; read here rather
    than from the backend's ``cpu_signature``, so tests can hold the signature against them."""
    parsed = parse_target(target)
    backend = parsed.backend
    resolved = backend.resolve(parsed)
    assumed = assumed_host()
    if assumed is not None:
        l1d, l2, l3, cores = assumed.l1d, assumed.l2, assumed.l3, assumed.cores or team_size()
    else:
        caches = this_hosts_caches()
        l1d, l2, l3, cores = caches["l1d"], caches["l2"], caches["l3"], team_size()
    code_target = getattr(backend, "code_target", None)
    code_cpu = code_target(parsed).cpu if code_target is not None else resolved.cpu
    note = "" if code_cpu == resolved.cpu else (
        f"this machine cannot run {resolved.cpu}'s code: compiled code is built for {code_cpu} with "
        f"{resolved.cpu}'s decisions")
    return Host(resolved.cpu, backend.vector_lanes(parsed), l1d, l2, l3, cores, assumed is not None, note,
                target)

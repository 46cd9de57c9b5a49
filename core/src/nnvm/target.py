"""Target strings (``llvm -mcpu=znver4 -mattr=+avx2``) parsed once, the backend that builds them, and
the one switch that makes the compiler take the host to be another CPU (``assume_host``)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from nnvm.errors import TargetError


@dataclass(frozen=True)
class Target:
    """A parsed target: its kind (first word), its ``-key=value`` options, and the original text."""

    kind: str
    options: dict = field(default_factory=dict)
    text: str = ""

    def __str__(self) -> str:
        return self.text or self.kind

    def __hash__(self) -> int:
        return hash(self.text)

    @property
    def keys(self) -> tuple:
        """The target's keys: what a schedule or template may be registered for, so one registration
        serves every target kind that has the key (a GPU schedule serves cuda, opencl and metal). Declared
        by the backend registered for the kind (``Backend.keys``); () when none is installed."""
        from nnvm.plugins import backends

        found = backends().get(self.kind)
        return found[1].keys if found is not None else ()

    @property
    def backend(self):
        """The backend registered for this target's kind."""
        from nnvm.plugins import backends

        found = backends().get(self.kind)
        if found is None:
            have = ", ".join(sorted(backends())) or "none: install a backend such as nnvm-backend-llvm-x86"
            raise TargetError(f"no installed backend builds for target {self.kind!r} "
                              f"(installed targets: {have})")
        return found[1]


@dataclass(frozen=True)
class HostCPU:
    """A CPU the compiler may take the host to be: ``cpu`` (the backend's name for it, LLVM's ``haswell``,
    ``znver5``), ``l1d``/``l2`` (bytes per core), ``l3`` (bytes, the whole cache) and ``cores`` (the
    team size parallel kernels are planned for); a size left None is unknown (the cost model's defaults),
    ``cores`` left None is the team the thread pool really runs."""

    cpu: str
    l1d: int | None = None
    l2: int | None = None
    l3: int | None = None
    cores: int | None = None


_assumed_host: HostCPU | None = None


def assume_host(host: HostCPU | None) -> HostCPU | None:
    """Compile as if this machine were ``host`` (None: the real one again); returns the previous value.

    A target that names no CPU (``llvm``) then means ``host.cpu``, and the decisions that read the host
    (vector width, registers, caches, team size) read ``host``; targets naming a CPU are unchanged. Code
    still runs here: where this machine cannot run ``host``'s code, a backend builds the same decisions
    for the CPU it runs on. The test suites' ``--host-cpu`` option sets it; the compiler reads no
    environment variable for it."""
    global _assumed_host
    previous, _assumed_host = _assumed_host, host
    return previous


def assumed_host() -> HostCPU | None:
    """The CPU ``assume_host`` set, or None when the compiler targets the machine it runs on."""
    return _assumed_host


def parse_target(target) -> Target:
    if isinstance(target, Target):
        return target
    if not isinstance(target, str) or not target.strip():
        raise TargetError(f"a target must be a non-empty string such as 'llvm', got {target!r}")
    words = shlex.split(target)
    options: dict = {}
    for w in words[1:]:
        if not w.startswith("-"):
            raise TargetError(f"target {target!r}: option {w!r} should look like -key=value")
        key, _, value = w.lstrip("-").partition("=")
        options[key] = value if value else True
    return Target(words[0], options, " ".join(words))

"""Target strings (``llvm -mcpu=znver4 -mattr=+avx2``) parsed once, and the backend that builds them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from nnvm.errors import TargetError

# Target keys: what a schedule or template may be registered for, so one registration serves every target
# kind that has the key (a GPU schedule serves cuda, opencl and metal). Kinds not listed here are CPUs.
KEYS = {"cuda": ("gpu",), "opencl": ("gpu",), "metal": ("gpu",)}
DEFAULT_KEYS = ("cpu",)


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
        """The target's keys (``("gpu",)`` for cuda, opencl and metal, ``("cpu",)`` for the rest)."""
        return KEYS.get(self.kind, DEFAULT_KEYS)

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

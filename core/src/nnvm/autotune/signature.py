"""CPU signatures: what decides a schedule on a CPU, so a tuning log can serve every CPU it fits.

A schedule's best knobs depend on the vector unit (width, fused multiply-add), on the caches its tiles
must fit and on how many threads share the work, much more than on the CPU's model name. A
``CPUSignature`` holds exactly that; the backend that resolves a target builds it (``Backend.
cpu_signature``: the LLVM plugins from the target's CPU and feature string, plus the host's caches and
team size when the target is the host), so the core stays free of any ISA knowledge.

The tuner writes the signature of the machine it measured on into every record; the compiler compares
it with the target's (``distance``):

- refused (``None``): another architecture, another vector width, FMA on one side only, or times
  measured under an emulator (``emulated``: a cluster's qemu node tests the path, never a device). The x86
  templates size register tiles by the vector width, so such a config is wrong or cannot be built;
- ``0.0``: an exact match (every field equal), as good as a log tuned on this very machine;
- otherwise the nearest wins, by ``distance = sum over L1d, L2, L3 of |log2(size ratio)|
  + 0.5 * |log2(core ratio)| + 0.25 * (features on one side only)``, an unknown size on either side
  counting 1 (one doubling). Caches weigh most: they decide which tiles fit; the team size decides how
  the outer loops split; the remaining features (VNNI, BF16 ...) rarely change a float32 schedule.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field

CACHE_WEIGHT = 1.0
CORE_WEIGHT = 0.5
FEATURE_WEIGHT = 0.25
UNKNOWN = 1.0  # the distance term of a size one side does not know: as far as one doubling


@dataclass(frozen=True)
class CPUSignature:
    """What a schedule depends on: ``arch`` (``x86_64``, ``aarch64`` ...), ``vector_bits`` (the widest
    vector unit the code uses), ``fma``, ``features`` (the ISA extensions that matter, without ``+``),
    ``cores`` (the team size of parallel kernels), ``l1d``/``l2``/``l3`` (bytes per core for L1d and L2,
    the whole L3; None when unknown). ``cpu`` (LLVM's name) is shown to people but never compared."""

    arch: str
    vector_bits: int
    fma: bool
    features: frozenset = field(default_factory=frozenset)
    cores: int | None = None
    l1d: int | None = None
    l2: int | None = None
    l3: int | None = None
    cpu: str = ""
    emulated: bool = False  # timed under an emulator (qemu): tests the path, says nothing of the device

    def to_dict(self) -> dict:
        d = {"arch": self.arch, "vector_bits": self.vector_bits, "fma": self.fma,
             "features": sorted(self.features), "cores": self.cores, "l1d": self.l1d, "l2": self.l2,
             "l3": self.l3, "cpu": self.cpu}
        if self.emulated:
            d["emulated"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict) -> CPUSignature:
        """The signature a log record holds (raises ``TypeError``/``KeyError``/``ValueError`` when it
        is not one, which the log reader reports with the file and line)."""
        if not isinstance(d, dict):
            raise TypeError("signature must be an object")
        features = d.get("features", [])
        if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
            raise TypeError("signature features must be a list of names")

        def size(key):
            v = d.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise ValueError(f"signature {key} must be a positive integer or null")
            return v

        bits = d["vector_bits"]
        if isinstance(bits, bool) or not isinstance(bits, int) or bits <= 0:
            raise ValueError("signature vector_bits must be a positive integer")
        return cls(str(d["arch"]), bits, bool(d["fma"]), frozenset(features), size("cores"), size("l1d"),
                   size("l2"), size("l3"), str(d.get("cpu", "")), d.get("emulated") is True)

    def key(self) -> tuple:
        """Everything compared (not ``cpu``): equal keys are an exact match."""
        return (self.arch, self.vector_bits, self.fma, self.features, self.cores, self.l1d, self.l2, self.l3,
                self.emulated)

    def refusal(self, other: CPUSignature) -> str | None:
        """Why configs tuned on ``other`` must not be used here, or None when they may."""
        if self.arch != other.arch:
            return f"architecture {other.arch}, not {self.arch}"
        if other.emulated and not self.emulated:
            return "times measured under an emulator"
        if self.vector_bits != other.vector_bits:
            return f"{other.vector_bits}-bit vectors, not {self.vector_bits}-bit"
        if self.fma != other.fma:
            return "FMA on one side only"
        return None

    def distance(self, other: CPUSignature) -> float | None:
        """How far configs tuned on ``other`` are from ideal here: None (refused), 0.0 (exact), or the
        documented sum (module docstring)."""
        if self.refusal(other) is not None:
            return None
        if self.key() == other.key():
            return 0.0
        d = sum(CACHE_WEIGHT * _log_gap(getattr(self, k), getattr(other, k)) for k in ("l1d", "l2", "l3"))
        d += CORE_WEIGHT * _log_gap(self.cores, other.cores)
        d += FEATURE_WEIGHT * len(self.features ^ other.features)
        return max(d, 1e-9)  # unequal signatures are never an exact match

    def describe(self) -> str:
        """One line for people: ``znver5: x86_64 512-bit FMA, 2 cores, L1d 48K L2 1M L3 32M``."""
        caches = " ".join(f"{name} {_size_text(v)}" for name, v in (("L1d", self.l1d), ("L2", self.l2),
                                                                   ("L3", self.l3)))
        cores = f"{self.cores} cores" if self.cores else "cores ?"
        head = f"{self.cpu}: " if self.cpu else ""
        emulated = " (emulated)" if self.emulated else ""
        return (f"{head}{self.arch} {self.vector_bits}-bit{' FMA' if self.fma else ''}, {cores}, {caches}"
                f"{emulated}")


def _log_gap(a: int | None, b: int | None) -> float:
    if a is None and b is None:
        return 0.0
    if a is None or b is None:
        return UNKNOWN
    return abs(math.log2(a / b))


def _size_text(v: int | None) -> str:
    if v is None:
        return "?"
    for unit, scale in (("M", 1 << 20), ("K", 1 << 10)):
        if v >= scale and v % scale == 0:
            return f"{v // scale}{unit}"
    return str(v)


def parse_features(features: str, relevant) -> frozenset:
    """The enabled features of an LLVM feature string (``+avx2,-avx512f,+fma``) among ``relevant``;
    a later ``-x`` undoes an earlier ``+x`` (``-mattr`` is appended after the CPU's own)."""
    on: set = set()
    for item in features.split(","):
        item = item.strip()
        if len(item) < 2 or item[0] not in "+-":
            continue
        name = item[1:]
        if name not in relevant:
            continue
        if item[0] == "+":
            on.add(name)
        else:
            on.discard(name)
    return frozenset(on)


def parse_size(text: str) -> int | None:
    """``48K``, ``1024K``, ``32M``, ``65536`` (sysfs ``size``, a target's ``-l2=1M``) in bytes; None when
    unreadable."""
    text = text.strip().upper()
    scale = 1
    if text[-1:] in ("K", "M", "G"):
        scale = 1 << {"K": 10, "M": 20, "G": 30}[text[-1]]
        text = text[:-1]
    try:
        value = int(text) * scale
    except ValueError:
        return None
    return value if value > 0 else None


def host_caches(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict:
    """``{"l1d": bytes, "l2": bytes, "l3": bytes}`` of the CPU this runs on, values None when unknown.

    Read from Linux's sysfs (``index*/level``, ``type``, ``size``); what it lacks comes from glibc's
    ``sysconf`` (``SC_LEVEL1_DCACHE_SIZE`` ...), which some virtual machines answer with 0 (unknown).
    """
    found: dict = {}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        entries = []
    for entry in entries:
        if not entry.startswith("index"):
            continue
        try:
            with open(os.path.join(root, entry, "level")) as f:
                level = int(f.read().strip())
            with open(os.path.join(root, entry, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, entry, "size")) as f:
                size = parse_size(f.read())
        except (OSError, ValueError):
            continue
        name = {1: "l1d", 2: "l2", 3: "l3"}.get(level)
        if name is None or size is None or (level == 1 and kind != "Data") or kind == "Instruction":
            continue
        found.setdefault(name, size)
    for name, conf in (("l1d", "SC_LEVEL1_DCACHE_SIZE"), ("l2", "SC_LEVEL2_CACHE_SIZE"),
                       ("l3", "SC_LEVEL3_CACHE_SIZE")):
        if name not in found:
            try:
                value = os.sysconf(conf)
            except (ValueError, OSError, AttributeError):
                value = 0
            if value and value > 0:
                found[name] = value
    return {name: found.get(name) for name in ("l1d", "l2", "l3")}


@functools.cache
def this_hosts_caches() -> dict:
    """``host_caches()`` read once a process: the CPU layer's cost model asks the backend's signature for
    every convolution it schedules, and the caches do not change while a process runs."""
    return host_caches()

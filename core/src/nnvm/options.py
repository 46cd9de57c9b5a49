"""``nnvm.Options``: how one ``nnvm.compile`` compiles, as one typed object.

``nnvm.compile``'s keyword arguments fill one in (or a caller passes its own, ``options=``); the compiler
hands it down (the pass context carries it) and makes it the *active* options of its thread while it
compiles, so a rule deep in a layer reads ``active()`` instead of the environment or a global. Worker
processes are forked from that thread and see the same.

``nnvm.compile`` called without ``options=`` starts from the active ones, so a ``with activated(...)`` block
(as TVM's ``PassContext``) sets options for every compile inside it: benchmark scripts and tests use it.

``cpu_switches`` are the CPU layer's A/B switches (``nnvm.cpu.switches``: ``{"layout": "0"}``); a switch
the options leave unset takes its default. They are options, never environment variables.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

from nnvm.errors import Error


def switch_key(name: str) -> str:
    """A CPU switch's key in ``cpu_switches``: ``layout`` and ``LAYOUT`` are one."""
    return name.lower()


@dataclass(frozen=True)
class Options:
    """Everything about a compile besides the model, its shapes and the target.

    - ``opt_level``: 0 to 3, which graph passes run;
    - ``tuning_log``: a log path or a list of them (consulted before the backend's own), False for none;
    - ``dump_ir``: a directory for the graph after each pass and the kernels' code;
    - ``disabled_passes`` / ``enabled_passes``: pass names, whatever ``opt_level`` says;
    - ``kernel_cache``: an ``nnvm.kernel_cache.KernelCache`` (None: no cache);
    - ``jobs``: worker processes for the kernels (None: ``kernel_jobs.default_jobs()``);
    - ``cpu_switches``: the CPU layer's A/B switches by name (``{"layout": "0"}``, ``nnvm.cpu.switches``).
    """

    opt_level: int = 3
    tuning_log: object = None
    dump_ir: str | None = None
    disabled_passes: frozenset = frozenset()
    enabled_passes: frozenset = frozenset()
    kernel_cache: object = None
    jobs: int | None = None
    cpu_switches: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.opt_level, int) or not 0 <= self.opt_level <= 3:
            raise Error(f"opt_level must be 0, 1, 2 or 3, got {self.opt_level!r}")
        object.__setattr__(self, "disabled_passes", frozenset(self.disabled_passes))
        object.__setattr__(self, "enabled_passes", frozenset(self.enabled_passes))
        switches = {}
        for name, value in dict(self.cpu_switches).items():
            if not isinstance(value, str):
                raise Error(f"cpu switch {name}={value!r}: the value must be a string ('0', '1', ...)")
            switches[switch_key(name)] = value
        object.__setattr__(self, "cpu_switches", switches)

    def replace(self, **changes) -> Options:
        """A copy with ``changes``."""
        return replace(self, **changes)

    def with_switches(self, **switches) -> Options:
        """A copy with these CPU switches set (``with_switches(layout="0")``); a value of None unsets one."""
        merged = dict(self.cpu_switches)
        for name, value in switches.items():
            if value is None:
                merged.pop(switch_key(name), None)
            else:
                merged[switch_key(name)] = value
        return replace(self, cpu_switches=merged)


_active: contextvars.ContextVar = contextvars.ContextVar("nnvm_options", default=None)


def active() -> Options | None:
    """The options of the compile running in this thread; None outside one."""
    return _active.get()


@contextlib.contextmanager
def activated(options: Options) -> Iterator[Options]:
    """Make ``options`` the active ones for the ``with`` block (in this thread and its forks): every
    ``nnvm.compile`` inside it without ``options=`` of its own compiles with them."""
    token = _active.set(options)
    try:
        yield options
    finally:
        _active.reset(token)

"""The contract between a schedule with knobs and whoever picks the knobs (compiler or tuner)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

from nnvm.errors import Error


def space_size(space: dict) -> int:
    """Number of configs of a space (knob -> candidate values): the product of the candidate counts."""
    return math.prod(len(values) for values in space.values())


@dataclass
class ScheduleTemplate:
    """One way to schedule a fused group, with named knobs.

    ``space`` maps each knob to its candidate values (JSON-able: ints, strings, bools, lists);
    ``fallback`` is the config used without a tuning log (it must be in the space); ``build(config)``
    returns the ``te.Schedule`` for one config (a dict with one value per knob); ``flops`` is the work
    of one run, for GFLOP/s reports. ``name`` identifies the template in tuning logs
    (``"cpu.conv2d_nchw.direct"``): a log entry applies only to the template that wrote it, and only at
    its ``revision``: a change to what a config means (the same knobs, another loop nest) bumps it, so
    configs measured on the old code are passed over rather than trusted (logs record the revision).
    """

    name: str
    space: dict
    fallback: dict
    build: Callable[[dict], object]
    flops: float = 0.0
    notes: dict = field(default_factory=dict)
    revision: int = 1

    def __post_init__(self):
        missing = set(self.space) ^ set(self.fallback)
        if missing:
            raise Error(f"schedule template {self.name}: fallback and space differ in {sorted(missing)}")
        for knob, value in self.fallback.items():
            if value not in self.space[knob]:
                raise Error(f"schedule template {self.name}: fallback {knob}={value!r} is not a candidate")

    def size(self) -> int:
        """Number of configs in the space."""
        return space_size(self.space)

    def configs(self):
        """Every config of the space, in a fixed order (knob order, then candidate order)."""
        knobs = list(self.space)
        for values in itertools.product(*(self.space[k] for k in knobs)):
            yield dict(zip(knobs, values))

    def one_knob_variants(self):
        """The fallback, then every config that changes one knob of it: each candidate value built once,
        where the whole product (``configs``) of a large space takes minutes to compile (tests' use)."""
        yield dict(self.fallback)
        for knob, values in self.space.items():
            for value in values:
                if value != self.fallback[knob]:
                    yield {**self.fallback, knob: value}

    def apply(self, config: dict | None = None):
        """The schedule for ``config`` (the fallback when None); unknown or missing knobs are errors."""
        config = dict(self.fallback if config is None else config)
        if set(config) != set(self.space):
            raise Error(f"schedule template {self.name}: config knobs {sorted(config)} "
                        f"are not the template's {sorted(self.space)}")
        return self.build(config)

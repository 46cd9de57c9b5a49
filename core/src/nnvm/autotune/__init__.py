"""Schedules with knobs, and the search that picks the knobs (the auto-tuner).

A backend offers a ``ScheduleTemplate`` for a fused group through the ``nnvm_schedule_template`` hook:
the knobs it has (tile sizes, unroll, vector width, loop order, layout block), a fallback config that is
already good, and a function that turns one config into a ``te.Schedule``. The compiler applies the
best config a tuning log holds for the group's workload, else the fallback.
"""

from nnvm.autotune.template import ScheduleTemplate

__all__ = ["ScheduleTemplate"]

"""Bound inference for stages computed inside another stage's loop (compute_at)."""

from __future__ import annotations

from nnvm.errors import ScheduleError


def attach_ranges(stage, sch, bodies, stage_ranges) -> dict:
    """Root ranges of ``stage`` when computed at ``stage.attach_ivar`` of ``stage.attach_stage``."""
    raise ScheduleError(
        f"stage {stage.name}: compute_at is not supported by this lowering yet; use compute_root or "
        "compute_inline"
    )

"""The Arm backend's CPU signature (tuning logs are matched against it): NEON's 128-bit vectors with
FMA, its own architecture, and none of the x86 plugin's shipped logs offered."""

from __future__ import annotations

import pytest

from nnvm.target import parse_target


@pytest.mark.parametrize("kind", ["aarch64", "armv7"])
def test_the_arm_backend_gives_its_own_signature_and_no_x86_logs(kind):
    target = parse_target(kind)
    sig = target.backend.cpu_signature(target)
    assert sig.vector_bits == 128 and sig.fma and "neon" in sig.features and sig.arch != "x86_64"
    assert target.backend.default_tuning_logs(target) == []

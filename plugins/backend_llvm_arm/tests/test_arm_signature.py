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


@pytest.mark.parametrize("kind, registers", [("aarch64", 32), ("armv7", 16)])
def test_the_arm_backend_answers_its_vector_unit(kind, registers):
    """NEON: v0-v31 on AArch64, q0-q15 on ARMv7; the by-element multiply-add reads its broadcast from a
    lane (a broadcast operand) on both."""
    from nnvm.cpu.cost_model import machine_of

    target = parse_target(kind)
    assert target.backend.vector_registers(target) == registers and target.backend.broadcast_operand(target)
    machine = machine_of(target)
    assert (machine.lanes, machine.registers, machine.broadcast_operand) == (4, registers, True)

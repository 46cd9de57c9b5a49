"""The vector unit the x86 backend answers for the CPU layer's cost model (``Backend.vector_registers``,
``broadcast_operand``), from what it resolved of the target: 32 zmm registers and an embedded broadcast
with AVX-512, 16 and none with AVX2; SSE, without FMA, counted with one (as before: no measured mixed); the
``cpu_switches={"avx2_tiles": "0"}`` A/B switch."""

from __future__ import annotations

import pytest

from nnvm.cpu.cost_model import machine_of
from nnvm.target import parse_target

AVX2_TARGETS = ["llvm -mcpu=haswell", "llvm -mcpu=x86-64-v3", "llvm -mcpu=skylake-avx512 -mattr=-avx512f"]
AVX512_TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=x86-64-v3 -mattr=+avx512f"]


@pytest.mark.parametrize("target, lanes, registers, operand",
                         [*((t, 8, 16, False) for t in AVX2_TARGETS),
                          *((t, 16, 32, True) for t in AVX512_TARGETS), ("llvm -mcpu=x86-64", 4, 16, True)])
def test_the_x86_backend_answers_its_vector_unit(target, lanes, registers, operand):
    tgt = parse_target(target)
    backend = tgt.backend
    assert backend.vector_lanes(tgt) == lanes
    assert (backend.vector_registers(tgt), backend.broadcast_operand(tgt)) == (registers, operand)
    machine = machine_of(tgt)
    assert (machine.lanes, machine.registers, machine.broadcast_operand) == (lanes, registers, operand)


def test_the_avx2_tiles_switch_models_avx2_with_a_broadcast_operand(cpu_switch):
    """``cpu_switches={"avx2_tiles": "0"}``: AVX2 counted as if it had a broadcast operand (the tiles before
    session 11, for A/B benchmarks); AVX-512 and SSE answer as before, and so do the registers."""
    cpu_switch("avx2_tiles", "0")
    for target, operand in (("llvm -mcpu=haswell", True), ("llvm -mcpu=skylake-avx512", True),
                            ("llvm -mcpu=x86-64", True)):
        tgt = parse_target(target)
        assert tgt.backend.broadcast_operand(tgt) is operand, target
    tgt = parse_target("llvm -mcpu=haswell")
    assert machine_of(tgt).registers == 16

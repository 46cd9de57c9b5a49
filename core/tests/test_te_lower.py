"""Schedules lower to the loop programs their docstrings promise (printed form) and validate misuse."""

from __future__ import annotations

import pytest

import nnvm
from nnvm import te
from nnvm.te.examples import matmul, matmul_api_schedule


def _matmul(n=64):
    return matmul(n)


def test_default_matmul_loop_program():
    A, B, C, _ = _matmul()
    text = str(nnvm.lower(te.create_schedule(C.op), [A, B, C]))
    assert text.splitlines() == [
        "def main(A: float32[64, 64], B: float32[64, 64], C: float32[64, 64]):",
        "  for i in range(64):",
        "    for j in range(64):",
        "      C[((i * 64) + j)] = 0.0f",
        "      for k in range(64):",
        "        C[((i * 64) + j)] = (C[((i * 64) + j)] + (A[((i * 64) + k)] * B[((k * 64) + j)]))",
    ]


def test_api_md_schedule_structure():
    s, (A, B, C) = matmul_api_schedule(64)
    text = str(nnvm.lower(s, [A, B, C]))
    assert "for i.outer in range(2):  # parallel" in text
    assert "for j.inner in range(32):  # vectorized" in text
    assert "for k.inner" not in text  # unrolled away
    assert text.count("for j.inner in range(32)") == 4  # four unrolled copies


def test_non_divisible_split_is_guarded():
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=4)
    text = str(nnvm.lower(s, [A, B]))
    assert "if (((i.outer * 4) + i.inner) < 10):" in text


def test_inline_removes_intermediate_storage():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: te.exp(B[i]), name="C")
    s = te.create_schedule(C.op)
    assert "allocate" in str(nnvm.lower(s, [A, C]))
    s[B].compute_inline()
    text = str(nnvm.lower(s, [A, C]))
    assert "allocate" not in text and "exp((A[i] * 2.0f))" in text


def test_axis_of_another_stage_is_an_error():
    A, B, C, _ = _matmul(8)
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(nnvm.ScheduleError, match="stage D: axis i does not belong"):
        s[D].split(C.op.axis[0], factor=2)


def test_bind_same_thread_twice_is_an_error():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j], name="B")
    s = te.create_schedule(B.op)
    s[B].bind(B.op.axis[0], "threadIdx.x")
    with pytest.raises(nnvm.ScheduleError, match="threadIdx.x is already bound to axis i"):
        s[B].bind(B.op.axis[1], "threadIdx.x")


def test_inlining_a_reduction_is_an_error():
    A, B, C, _ = _matmul(8)
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(nnvm.ScheduleError, match="stage C: a reduction cannot be inlined"):
        s[C].compute_inline()


def test_fuse_requires_adjacent_loops():
    A = te.placeholder((4, 4, 4), name="A")
    B = te.compute((4, 4, 4), lambda i, j, k: A[i, j, k], name="B")
    s = te.create_schedule(B.op)
    i, j, k = B.op.axis
    with pytest.raises(nnvm.ScheduleError, match="adjacent"):
        s[B].fuse(i, k)

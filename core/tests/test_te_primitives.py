"""cache_write, cache_read, rfactor, storage_align and double_buffer: the loop program they promise
(printed form) and the numbers it computes (reference interpreter vs numpy)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.te.examples import matmul
from nnvm.tir.interpreter import run_primfunc


def _matmul(n=8):
    return matmul(n)[:3]


def _run(s, args, inputs, expected):
    func = nnvm.lower(s, args)
    out = np.zeros(expected.shape, dtype=expected.dtype)
    run_primfunc(func, [*inputs, out])
    err = float(np.max(np.abs(out - expected)))
    assert err < 1e-4, f"{func.name}: max abs error {err} vs numpy, shape {expected.shape}"
    return str(func)


@pytest.fixture
def mats():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 8), dtype=np.float32), rng.standard_normal((8, 8), dtype=np.float32)


def test_cache_write_accumulates_in_local_then_copies(mats):
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    assert [st.name for st in s.stages] == ["A", "B", "C.local", "C"]
    assert CC.name == "C.local" and s[CC].scope == "local"
    text = _run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "C.local = allocate(float32[8*8], local)" in text
    assert "C.local[((i.c * 8) + j.c)] = 0.0f" in text
    assert "C[((i * 8) + j)] = C.local[((i * 8) + j)]" in text


def test_cache_write_at_a_tile_of_the_copy(mats):
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 2, 4)
    s[CC].compute_at(s[C], jo)
    s[CC].vectorize(s[CC].op.axis[1])
    text = _run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "      C.local = allocate(float32[2*4], local)" in text  # one 2x4 tile per (io, jo)
    assert "for j.c in range(4):  # vectorized" in text


def test_cache_write_after_scheduling_is_an_error():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(nnvm.ScheduleError, match="stage C: cache_write must come before"):
        s.cache_write(C, "local")
    with pytest.raises(nnvm.ScheduleError, match="unknown storage scope 'register'"):
        te.create_schedule(C.op).cache_write(C, "register")


def test_cache_read_copies_the_input_for_its_readers(mats):
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    assert [st.name for st in s.stages] == ["A", "A.shared", "B", "C"]
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[AA].compute_at(s[C], jo)
    text = _run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "A.shared = allocate(float32[4*8], shared)" in text  # 4 rows of A per tile
    assert "A.shared[((ax0 * 8) + ax1)] = A[" in text
    update = next(line for line in text.splitlines() if "C[" in line and "* B[" in line)
    assert "A.shared[" in update and "(A[" not in update  # C reads the copy


def test_cache_read_of_a_tensor_the_stage_does_not_read_is_an_error():
    A, B, C = _matmul()
    D = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="D")
    s = te.create_schedule([C.op, D.op])
    with pytest.raises(nnvm.ScheduleError, match="stage D: cache_read of B"):
        s.cache_read(B, "local", [D])


def test_rfactor_of_a_split_reduction():
    A = te.placeholder((6, 10), name="A")
    k = te.reduce_axis((0, 10), name="k")
    B = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=4)
    BF = s.rfactor(B, ki)
    assert BF.name == "B.rf" and [int(x.value) for x in BF.shape] == [4, 6]
    s[BF].parallel(s[BF].op.axis[0])
    a = np.random.default_rng(1).standard_normal((6, 10), dtype=np.float32)
    text = _run(s, [A, B], [a], a.sum(axis=1))
    assert "for k.inner in range(4):  # parallel" in text
    assert "if (((k.outer * 4) + k.inner) < 10):" in text
    assert "B[i] = (B[i] + B.rf[((k.inner.v * 6) + i)])" in text


def test_rfactor_of_the_whole_reduce_axis(mats):
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    CF = s.rfactor(C, C.op.reduce_axis[0])
    text = _run(s, [A, B, C], mats, mats[0] @ mats[1])
    assert "C.rf[(((k * 64) + (i * 8)) + j)] = (A[((i * 8) + k)] * B[((k * 8) + j)])" in text
    assert CF.op.reduce_axis == ()


def test_rfactor_of_a_spatial_axis_is_an_error():
    A, B, C = _matmul()
    s = te.create_schedule(C.op)
    with pytest.raises(nnvm.ScheduleError, match="stage C: rfactor axis i is not a reduce axis"):
        s.rfactor(C, C.op.axis[0])


def test_storage_align_pads_the_row_stride():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[j, i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 1)
    a = np.arange(64, dtype=np.float32).reshape(8, 8)
    text = _run(s, [A, C], [a], (a * 2.0).T + 1.0)
    assert "B = allocate(float32[136], global)" in text
    assert "B[((i * 17) + j)] = (A[((i * 8) + j)] * 2.0f)" in text


def test_storage_align_of_a_split_axis_is_an_error():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = te.create_schedule(B.op)
    io, _ = s[B].split(B.op.axis[0], factor=2)
    with pytest.raises(nnvm.ScheduleError, match="stage B: storage_align needs an original spatial axis"):
        s[B].storage_align(io, 16, 1)


def test_double_buffer_annotates_the_allocation():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].double_buffer()
    a = np.arange(8, dtype=np.float32)
    text = _run(s, [A, C], [a], a * 2.0 + 1.0)
    assert text.index("double_buffer_scope") < text.index("B = allocate")
    with pytest.raises(nnvm.ScheduleError, match="stage C: an output of the schedule cannot be double"):
        s[C].double_buffer()


@pytest.mark.parametrize("m,n,kk,bi,bj,kf", [(10, 7, 5, 4, 4, 2), (9, 9, 9, 2, 8, 4), (5, 6, 7, 3, 2, 3)])
def test_primitives_on_sizes_the_factors_do_not_divide(m, n, kk, bi, bj, kf):
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, kk), dtype=np.float32)
    b = rng.standard_normal((kk, n), dtype=np.float32)

    def make():
        A = te.placeholder((m, kk), name="A")
        B = te.placeholder((kk, n), name="B")
        k = te.reduce_axis((0, kk), name="k")
        return A, B, te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")

    A, B, C = make()
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    _, jo, _, _ = s[C].tile(C.op.axis[0], C.op.axis[1], bi, bj)
    s[CC].compute_at(s[C], jo)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=kf)
    s[CC].reorder(ko, ki, *s[CC].op.axis)
    _run(s, [A, B, C], [a, b], a @ b)

    A, B, C = make()
    s = te.create_schedule(C.op)
    s.cache_read(A, "local", [C])
    ko, _ = s[C].split(C.op.reduce_axis[0], factor=kf)
    s.rfactor(C, ko)
    _run(s, [A, B, C], [a, b], a @ b)


def test_compute_at_a_loop_enclosing_the_readers():
    """B is read only by C, which is computed at D's inner loop: B may be computed once at D's outer
    loop (a band of rows for all the tiles inside it), its region the union of what C reads there."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((12, 8)).astype(np.float32)
    A = te.placeholder((12, 8), name="A")
    B = te.compute((12, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((10, 8), lambda i, j: B[i, j] + B[i + 2, j], name="C")
    D = te.compute((10, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    io, ii = s[D].split(D.op.axis[0], factor=5)
    s[C].compute_at(s[D], ii)
    s[B].compute_at(s[D], io)
    text = _run(s, [A, D], [a], 2 * a[:10] + 2 * a[2:] + 1)
    assert "B = allocate(float32[7*8]" in text  # rows i .. i + 6 of a band of 5, once per band


def test_compute_at_outside_the_readers_loop_is_an_error():
    """Computed at D's inner loop, B cannot serve C computed at D's outer loop (before B exists)."""
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: B[i, j] + 1.0, name="C")
    D = te.compute((8, 8), lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    s[C].compute_at(s[D], D.op.axis[0])
    s[B].compute_at(s[D], D.op.axis[1])
    with pytest.raises(nnvm.ScheduleError, match="C reads it outside that loop"):
        nnvm.lower(s, [A, D])

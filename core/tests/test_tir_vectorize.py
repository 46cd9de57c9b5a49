"""Vectorization in the loop program (nnvm.tir.vectorize): vector loads, stores and arithmetic, checked
by the reference interpreter against numpy, and the loops it must leave serial."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from nnvm import te
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.interpreter import run_primfunc
from nnvm.tir.vectorize import vectorize_loops
from nnvm.tir.visit import walk


def _vectorized(s, args, name="f"):
    func = lower_schedule(s, args, name)
    return replace(func, body=vectorize_loops(func.body))


def _kinds(func) -> list:
    found = []
    walk(func.body, lambda n: found.append(n.kind) if isinstance(n, S.For) else None)
    return found


def test_elementwise_becomes_vector_loads_broadcasts_and_stores():
    A = te.placeholder((8, 16), name="A")
    s_ = te.placeholder((1,), name="s")
    B = te.compute((8, 16), lambda i, j: te.exp(A[i, j]) * s_[0] + 1.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=4)
    s[B].vectorize(ji)
    func = _vectorized(s, [A, s_, B])
    text = str(func)
    assert "B[ramp(" in text and "exp(A[ramp(" in text and "x4(s[0])" in text, text
    assert S.ForKind.VECTORIZED not in _kinds(func)
    a = np.random.default_rng(0).standard_normal((8, 16), dtype="float32")
    sv, b = np.array([3.0], "float32"), np.zeros((8, 16), "float32")
    run_primfunc(func, [a, sv, b])
    np.testing.assert_allclose(b, np.exp(a) * 3 + 1, rtol=1e-6)


def test_guard_not_depending_on_the_lane_stays_outside_the_vector():
    A = te.placeholder((40,), name="A")
    B = te.compute((40,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    o, v = s[B].split(B.op.axis[0], factor=4)
    oo, _ = s[B].split(o, factor=3)  # 10 vectors in blocks of 3: the last block is guarded
    s[B].vectorize(v)
    func = _vectorized(s, [A, B])
    assert "ramp(" in str(func) and S.ForKind.VECTORIZED not in _kinds(func)
    a = np.arange(40, dtype="float32")
    b = np.zeros(40, "float32")
    run_primfunc(func, [a, b])
    np.testing.assert_array_equal(b, a * 2)


def test_gathers_reductions_and_odd_widths_stay_serial_and_correct():
    A = te.placeholder((8, 8), name="A")
    T = te.compute((8, 8), lambda i, j: A[j, i], name="T")  # a transpose reads with stride 8
    k = te.reduce_axis((0, 8), name="k")
    R = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="R")
    F = te.compute((8, 5), lambda i, j: A[i, j] + 1.0, name="F")
    s = te.create_schedule([T.op, R.op, F.op])
    s[T].vectorize(T.op.axis[1])
    s[R].reorder(k, R.op.axis[0])
    s[F].vectorize(F.op.axis[1])
    func = _vectorized(s, [A, T, R, F])
    assert "ramp(" not in str(func)
    assert S.ForKind.VECTORIZED not in _kinds(func)
    a = np.random.default_rng(1).standard_normal((8, 8), dtype="float32")
    t, r, f = np.zeros((8, 8), "float32"), np.zeros(8, "float32"), np.zeros((8, 5), "float32")
    run_primfunc(func, [a, t, r, f])
    np.testing.assert_array_equal(t, a.T)
    np.testing.assert_allclose(r, a.sum(axis=1), rtol=1e-5)
    np.testing.assert_array_equal(f, a[:, :5] + 1)


def test_vector_dtypes_carry_lanes():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + A[i], name="B")
    s = te.create_schedule(B.op)
    s[B].vectorize(B.op.axis[0])
    func = _vectorized(s, [A, B])
    stores = []
    walk(func.body, lambda n: stores.append(n) if isinstance(n, S.Store) else None)
    (store,) = stores
    assert store.value.dtype == "float32x8" and isinstance(store.index, E.Ramp)

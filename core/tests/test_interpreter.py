"""The reference interpreter of loop programs: semantics of every node, and its safety checks."""

from __future__ import annotations

import math

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.te.examples import gemm
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.interpreter import run_primfunc

RNG = np.random.default_rng(1)


def _buf(name, n, dtype="float32", scope="global"):
    return S.Buffer(name, (E.const(n),), dtype, scope)


def _loop(var, n, body, kind=S.ForKind.SERIAL, tag=""):
    return S.For(var, E.const(0), E.const(n), kind, body, tag)


def _elementwise(fn, n, in_dtypes, out_dtype):
    """out[i] = fn(in0[i], in1[i], ...) as a hand-built PrimFunc."""
    i = E.Var("i")
    ins = [_buf(f"in{k}", n, dt) for k, dt in enumerate(in_dtypes)]
    out = _buf("out", n, out_dtype)
    value = fn(*[E.Load(b, i, b.dtype) for b in ins])
    return S.PrimFunc("f", (*ins, out), _loop(i, n, S.Store(out, i, value)))


def _run_elementwise(fn, arrays, out_dtype):
    out = np.zeros(arrays[0].shape, out_dtype)
    run_primfunc(_elementwise(fn, arrays[0].size, [str(a.dtype) for a in arrays], out_dtype), [*arrays, out])
    return out


# ---------------------------------------------------------------------------------------------------
# arithmetic semantics


def test_integer_division_and_remainders_follow_c_and_floor_semantics():
    a = np.array([7, -7, 7, -7, 0, -1, 9], np.int32)
    b = np.array([2, 2, -2, -2, 5, 3, -4], np.int32)
    trunc = _run_elementwise(lambda x, y: E.binop("div", x, y), [a, b], "int32")
    np.testing.assert_array_equal(trunc, [3, -3, -3, 3, 0, 0, -2])
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: E.binop("floordiv", x, y), [a, b], "int32"),
                                  a // b)
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: E.binop("floormod", x, y), [a, b], "int32"),
                                  a % b)
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: E.binop("fmod", x, y), [a, b], "int32"),
                                  np.fmod(a, b))


@pytest.mark.parametrize("op", ["div", "floordiv", "floormod", "fmod"])
def test_integer_division_by_zero_gives_zero_like_numpy_and_the_kernels(op):
    a, b = np.array([7, -7, 5], np.int64), np.array([2, 0, 0], np.int64)
    got = _run_elementwise(lambda x, y: E.binop(op, x, y), [a, b], "int64")
    np.testing.assert_array_equal(got[1:], [0, 0])


FLOAT_BINOPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "min": np.minimum,
    "max": np.maximum, "pow": np.power, "fmod": np.fmod, "floordiv": lambda a, b: np.floor(a / b),
    "floormod": lambda a, b: a - np.floor(a / b) * b,
}


@pytest.mark.parametrize("op", list(FLOAT_BINOPS))
def test_float_binops_round_in_float32(op):
    a = RNG.uniform(0.5, 3, 16).astype(np.float32)
    b = RNG.uniform(-2, 2, 16).astype(np.float32)
    got = _run_elementwise(lambda x, y: E.binop(op, x, y), [a, b], "float32")
    np.testing.assert_array_equal(got, FLOAT_BINOPS[op](a, b).astype(np.float32), err_msg=op)


@pytest.mark.parametrize("op", E.COMPARE_OPS)
def test_comparisons(op):
    a, b = np.array([1, 2, 3], np.int32), np.array([2, 2, 2], np.int32)
    ref = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}[op]
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: E.binop(op, x, y), [a, b], "bool"), ref(a, b))


def test_logic_ops():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: x & y, [a, b], "bool"), a & b)
    np.testing.assert_array_equal(_run_elementwise(lambda x, y: x | y, [a, b], "bool"), a | b)
    np.testing.assert_array_equal(_run_elementwise(lambda x: ~x, [a], "bool"), ~a)


def _np_erf(x):
    return np.array([math.erf(v) for v in x.astype(np.float64)])


INTRINSICS = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "erf": _np_erf, "abs": np.abs, "floor": np.floor,
    "ceil": np.ceil, "round": np.round, "sin": np.sin, "cos": np.cos, "trunc": np.trunc,
    "log2": np.log2, "exp2": np.exp2, "sign": np.sign, "exp_bounded": np.exp,
}


def test_every_math_intrinsic_is_known():
    assert set(INTRINSICS) | {"not", "isnan"} == set(E.MATH_INTRINSICS)


@pytest.mark.parametrize("name", list(INTRINSICS))
def test_math_intrinsics(name):
    x = np.array([0.25, 0.5, 1.5, 2.5, 3.0, -0.0 if name not in ("log", "sqrt", "rsqrt", "log2") else 4.0],
                 np.float32)
    if name not in ("log", "sqrt", "rsqrt", "log2"):
        x = np.concatenate([x, -x])
    got = _run_elementwise(lambda v: E.call(name, v), [x], "float32")
    assert got.dtype == np.float32
    want = INTRINSICS[name](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7, err_msg=name)


def test_round_is_half_to_even_and_isnan_is_bool():
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, np.nan], np.float32)
    np.testing.assert_array_equal(_run_elementwise(lambda v: E.call("round", v), [x], "float32")[:6],
                                  [-2, -2, -0, 0, 2, 2])
    np.testing.assert_array_equal(_run_elementwise(lambda v: E.call("isnan", v, dtype="bool"), [x], "bool"),
                                  np.isnan(x))


def test_casts_truncate_and_wrap_like_c():
    x = np.array([-2.7, -0.5, 0.5, 2.7, 300.0], np.float32)
    np.testing.assert_array_equal(_run_elementwise(lambda v: E.cast("int32", v), [x], "int32"),
                                  [-2, 0, 0, 2, 300])
    y = np.array([250, 256, -1], np.int32)
    np.testing.assert_array_equal(_run_elementwise(lambda v: E.cast("uint8", v), [y], "uint8"), [250, 0, 255])


def test_float32_accumulation_rounds_like_compiled_code():
    n = 1000
    a = np.full(n, 0.1, np.float32)
    k = te.reduce_axis((0, n), name="k")
    A = te.placeholder((n,), name="A")
    B = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="B")
    func = nnvm.lower(te.create_schedule(B.op), [A, B])
    out = np.zeros(1, np.float32)
    run_primfunc(func, [a, out])
    acc = np.float32(0)
    for v in a:
        acc = np.float32(acc + v)
    assert out[0] == acc and out[0] != np.float32(np.sum(a.astype(np.float64)))


# ---------------------------------------------------------------------------------------------------
# statements and vectors


def test_lowered_matmul_with_every_loop_kind():
    n, m, kk = 6, 8, 5
    A, B, C, k = gemm(n, m, kk)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)  # 4 does not divide 6: a guard
    jo, ji = s[C].split(j, factor=4)
    s[C].reorder(io, jo, k, ii, ji)
    s[C].parallel(io)
    s[C].unroll(ii)
    s[C].vectorize(ji)
    s[C].bind(jo, "threadIdx.x")
    a, b = RNG.standard_normal((n, kk)).astype(np.float32), RNG.standard_normal((kk, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    run_primfunc(nnvm.lower(s, [A, B, C]), [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_allocate_let_if_select_and_attr():
    i, t = E.Var("i"), E.Var("t")
    tmp = _buf("tmp", 4, "float32", "local")
    a, out = _buf("A", 4), _buf("out", 4)
    fill = _loop(i, 4, S.Store(tmp, i, E.Load(tmp, i, "float32") + E.Load(a, i, "float32") * 2.0))
    x = E.Load(tmp, i, "float32")
    choose = S.IfThenElse(i < 2, S.Store(out, i, E.Let(t, x + 1.0, t * t, "float32")),
                          S.Store(out, i, E.select(x > 0.0, x, E.const(-1.0, "float32"))))
    body = S.Allocate(tmp, S.seq(fill, S.AttrStmt("pragma", 1, S.LetStmt(E.Var("unused"), E.const(3), _loop(
        i, 4, choose)))))
    av = np.array([1, -2, 3, -4], np.float32)
    res = np.zeros(4, np.float32)
    run_primfunc(S.PrimFunc("f", (a, out), body), [av, res])
    np.testing.assert_array_equal(res, [9, 9, 6, -1])


def test_allocations_start_zeroed_every_time():
    i, j = E.Var("i"), E.Var("j")
    tmp, out = _buf("tmp", 1, "int32"), _buf("out", 3, "int32")
    zero = E.const(0, "int32")
    inner = S.seq(S.Store(tmp, zero, E.Load(tmp, zero, "int32") + E.cast("int32", j)),
                  S.Store(out, i, E.Load(tmp, zero, "int32")))
    body = _loop(i, 3, S.Allocate(tmp, _loop(j, 3, inner)))
    res = np.zeros(3, np.int32)
    run_primfunc(S.PrimFunc("f", (out,), body), [res])
    np.testing.assert_array_equal(res, [3, 3, 3])


def test_vector_ramp_broadcast_and_predicated_store():
    a, out = _buf("A", 8), _buf("out", 8)
    idx = E.Ramp(E.const(0), E.const(2), 4, "int64x4")  # 0, 2, 4, 6
    value = E.binop("mul", E.Load(a, idx, "float32x4"), E.Broadcast(E.const(3.0, "float32"), 4, "float32x4"))
    pred = E.binop("lt", idx, E.Broadcast(E.const(5), 4, "int64x4"))
    body = S.Store(out, E.binop("add", idx, E.Broadcast(E.const(1), 4, "int64x4")), value, pred)
    av = np.arange(8, dtype=np.float32)
    res = np.zeros(8, np.float32)
    run_primfunc(S.PrimFunc("f", (a, out), body), [av, res])
    np.testing.assert_array_equal(res, [0, 0, 0, 6, 0, 12, 0, 0])


def test_if_then_else_only_evaluates_the_chosen_side():
    """Padding's guarded read: out of bounds only on the side that is not taken, scalar and vector."""
    a, out = _buf("A", 4), _buf("out", 6)
    i = E.Var("i")
    inside = (i >= 1) & (i < 5)
    scalar = _loop(i, 6, S.Store(out, i, E.if_then_else(inside, E.Load(a, i - 1, "float32"), 0.0)))
    av = np.array([1, 2, 3, 4], np.float32)
    res = np.zeros(6, np.float32)
    run_primfunc(S.PrimFunc("f", (a, out), scalar), [av, res])
    np.testing.assert_array_equal(res, [0, 1, 2, 3, 4, 0])
    lanes = E.Ramp(E.const(0), E.const(1), 6, "int64x6")
    one, five = E.Broadcast(E.const(1), 6, "int64x6"), E.Broadcast(E.const(5), 6, "int64x6")
    cond = E.binop("and", E.binop("ge", lanes, one), E.binop("lt", lanes, five))
    zero = E.Broadcast(E.const(0.0, "float32"), 6, "float32x6")
    vec = S.Store(out, lanes, E.if_then_else(cond, E.Load(a, E.binop("sub", lanes, one), "float32x6"), zero))
    res[:] = -1
    run_primfunc(S.PrimFunc("f", (a, out), vec), [av, res])
    np.testing.assert_array_equal(res, [0, 1, 2, 3, 4, 0])


def test_thread_bound_loops_run_every_iteration():
    tx, out = E.Var("tx"), _buf("out", 4, "int64")
    body = _loop(tx, 4, S.seq(S.Evaluate(E.call("barrier", E.const(0))), S.Store(out, tx, tx * tx)),
                 S.ForKind.THREAD_BINDING, "threadIdx.x")
    res = np.zeros(4, np.int64)
    run_primfunc(S.PrimFunc("f", (out,), body), [res])
    np.testing.assert_array_equal(res, [0, 1, 4, 9])


def _reverse_through_shared(extra=None):
    """out[tx] = A[3 - tx] via a shared buffer written by every thread before a barrier."""
    tx = E.Var("tx")
    a, out, shared = _buf("A", 4), _buf("out", 4), _buf("sh", 4, "float32", "shared")
    body = S.seq(S.Store(shared, tx, E.Load(a, tx, "float32")),
                 S.Evaluate(E.call("barrier", E.const(0))),
                 S.Store(out, tx, E.Load(shared, 3 - tx, "float32")))
    if extra is not None:
        body = extra(tx, body)
    threads = _loop(tx, 4, body, S.ForKind.THREAD_BINDING, "threadIdx.x")
    return S.PrimFunc("f", (a, out), S.Allocate(shared, threads))


def test_threads_synchronize_at_barriers():
    av, res = np.arange(4, dtype=np.float32) + 1, np.zeros(4, np.float32)
    run_primfunc(_reverse_through_shared(), [av, res])
    np.testing.assert_array_equal(res, [4, 3, 2, 1])


def test_barriers_inside_serial_loops_and_nested_thread_loops():
    """Two rounds (a serial loop around the barrier), and a threadIdx.y loop around threadIdx.x."""
    ko = E.Var("ko")
    twice = _reverse_through_shared(lambda tx, body: _loop(ko, 2, body))
    ty = E.Var("ty")
    nested = S.PrimFunc("f", twice.params, S.Allocate(twice.body.buffer, _loop(
        ty, 1, twice.body.body, S.ForKind.THREAD_BINDING, "threadIdx.y")))
    for func in (twice, nested):
        av, res = np.arange(4, dtype=np.float32) + 1, np.zeros(4, np.float32)
        run_primfunc(func, [av, res])
        np.testing.assert_array_equal(res, [4, 3, 2, 1])


def test_local_buffers_are_private_to_each_thread():
    tx = E.Var("tx")
    a, out, local = _buf("A", 4), _buf("out", 4), _buf("acc", 1, "float32", "local")
    zero = E.const(0)
    body = S.seq(S.Store(local, zero, E.Load(a, tx, "float32")), S.Evaluate(E.call("barrier", E.const(0))),
                 S.Store(out, tx, E.Load(local, zero, "float32")))
    func = S.PrimFunc("f", (a, out), S.Allocate(local, _loop(tx, 4, body, S.ForKind.THREAD_BINDING,
                                                               "threadIdx.x")))
    av, res = np.arange(4, dtype=np.float32) + 1, np.zeros(4, np.float32)
    run_primfunc(func, [av, res])
    np.testing.assert_array_equal(res, av)


def test_a_barrier_in_divergent_code_is_an_error():
    func = _reverse_through_shared(lambda tx, body: S.IfThenElse(tx < 2, body, None))
    with pytest.raises(nnvm.Error, match="only 2 of 4 threads of threadIdx.x .* reached a barrier"):
        run_primfunc(func, [np.zeros(4, np.float32), np.zeros(4, np.float32)])


def test_a_vector_condition_around_a_barrier_is_an_error():
    """The lockstep threads check an if's condition as the serial interpreter does."""
    cond = E.Broadcast(E.const(True), 4, "boolx4")
    func = _reverse_through_shared(lambda tx, body: S.IfThenElse(cond, body, None))
    with pytest.raises(nnvm.Error, match="an if statement needs a scalar condition"):
        run_primfunc(func, [np.zeros(4, np.float32), np.zeros(4, np.float32)])


@pytest.mark.parametrize("with_barrier", [False, True])
def test_an_inner_let_or_loop_shadows_an_outer_one_only_inside_its_body(with_barrier):
    """out = [2, 1, 7, 1]: after the inner ``let x = 2`` and the inner loop over ``x``, the outer
    ``x = 1`` is back (plain statements and, around a barrier, lockstep ones)."""
    x, tx = E.Var("x"), E.Var("tx")
    out = _buf("out", 4, "int64")
    sync = [S.Evaluate(E.call("barrier", E.const(0)))] if with_barrier else []
    inner = S.seq(S.LetStmt(x, E.const(2), S.seq(*sync, S.Store(out, E.const(0), x))),
                  S.Store(out, E.const(1), x),
                  S.For(x, E.const(7), E.const(1), S.ForKind.SERIAL,
                        S.seq(*sync, S.Store(out, E.const(2), x))),
                  S.Store(out, E.const(3), x))
    body = _loop(tx, 1, S.LetStmt(x, E.const(1), inner), S.ForKind.THREAD_BINDING, "threadIdx.x")
    res = np.zeros(4, np.int64)
    run_primfunc(S.PrimFunc("f", (out,), body), [res])
    np.testing.assert_array_equal(res, [2, 1, 7, 1])


# ---------------------------------------------------------------------------------------------------
# safety checks


def test_out_of_bounds_load_names_the_buffer_index_and_loop():
    i = E.Var("i")
    a, out = _buf("A", 5), _buf("out", 5)
    func = S.PrimFunc("f", (a, out), _loop(i, 5, S.Store(out, i, E.Load(a, i + 1, "float32"))))
    want = r"^out-of-bounds load from buffer A \(size 5\) at index 5 \(with i=4\)$"
    with pytest.raises(nnvm.Error, match=want):
        run_primfunc(func, [np.zeros(5, np.float32), np.zeros(5, np.float32)])


def test_out_of_bounds_store_and_vector_access():
    i = E.Var("i")
    out = _buf("out", 3)
    func = S.PrimFunc("f", (out,), _loop(i, 4, S.Store(out, i, E.const(1.0, "float32"))))
    with pytest.raises(nnvm.Error, match=r"out-of-bounds store to buffer out \(size 3\) at index 3"):
        run_primfunc(func, [np.zeros(3, np.float32)])
    ramp = E.Ramp(E.const(1), E.const(1), 4, "int64x4")
    vec = S.Store(out, ramp, E.Broadcast(E.const(1.0), 4, "float32x4"))
    with pytest.raises(nnvm.Error, match=r"buffer out \(size 3\) at index 3 of vector index \[1, 2, 3, 4\]"):
        run_primfunc(S.PrimFunc("f", (out,), vec), [np.zeros(3, np.float32)])


def test_dtype_and_argument_checks():
    out = _buf("out", 2, "float32")
    bad = S.PrimFunc("f", (out,), S.Store(out, E.const(0), E.const(1, "int32")))
    with pytest.raises(nnvm.Error, match="store to buffer out: a int32 access to a float32 buffer"):
        run_primfunc(bad, [np.zeros(2, np.float32)])
    ok = S.PrimFunc("f", (out,), S.Store(out, E.const(0), E.const(1.0, "float32")))
    with pytest.raises(nnvm.Error, match=r"argument out must hold 2 elements of float32, got float64\[2\]"):
        run_primfunc(ok, [np.zeros(2, np.float64)])
    with pytest.raises(nnvm.Error, match="f takes 1 arrays"):
        run_primfunc(ok, [])
    with pytest.raises(nnvm.Error, match="must be C-contiguous"):
        run_primfunc(ok, [np.zeros(4, np.float32)[::2]])


def test_unknown_nodes_and_free_variables_are_errors():
    out = _buf("out", 1)
    with pytest.raises(nnvm.Error, match="does not know the intrinsic 'frobnicate'"):
        run_primfunc(S.PrimFunc("f", (out,), S.Store(out, E.const(0), E.call("frobnicate", E.const(1.0)))),
                     [np.zeros(1, np.float32)])
    v = E.Var("v")
    with pytest.raises(nnvm.Error, match="variable v is used outside the loop or let that defines it"):
        run_primfunc(S.PrimFunc("f", (out,), S.Store(out, v, E.const(1.0))), [np.zeros(1, np.float32)])

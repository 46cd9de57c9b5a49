"""Loop partitioning: the guards of non-divisible splits leave the main iterations of their loop.

Checks the printed program (no ``if`` in the main loop, the guarded tail after it) and the numbers,
run by the loop-program interpreter (which bounds-checks every access) against numpy.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nnvm
from nnvm import te
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.interpreter import run_primfunc
from nnvm.tir.lower import partition_loops


def _block(text: str, header: str) -> list[str]:
    """The lines of the loop whose header line is exactly ``header`` (after indentation), with its body."""
    lines = text.splitlines()
    for k, line in enumerate(lines):
        if line.strip() == header:
            indent = len(line) - len(line.lstrip())
            out = [line]
            for body in lines[k + 1:]:
                if len(body) - len(body.lstrip()) <= indent:
                    break
                out.append(body)
            return out
    raise AssertionError(f"no loop {header!r} in the program:\n{text}")


def _guards(lines: list[str]) -> list[str]:
    return [x.strip() for x in lines if x.strip().startswith("if ")]


def _elementwise(n: int, factor: int):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].split(B.op.axis[0], factor=factor)
    return s, [A, B]


def _matmul(n: int, tile: int, kfactor: int, parallel: bool = False):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], tile, tile)
    ko, ki = s[C].split(k, factor=kfactor)
    s[C].reorder(ko, xi, ki, yi)
    s[C].unroll(ki)
    if parallel:
        s[C].parallel(xo)
    return s, [A, B, C]


def _run(func, arrays):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    run_primfunc(func, arrays)
    return arrays


def test_split_by_4_of_10_has_unguarded_main_loop_and_guarded_tail():
    s, args = _elementwise(10, 4)
    func = lower_schedule(s, args)
    text = str(func)
    main = _block(text, "for i.outer in range(2):")
    assert _guards(main) == [], f"the main loop still has a guard:\n{text}"
    tail = _block(text, "for i.outer in range(2, 2 + 1):")
    assert _guards(tail) == ["if (((i.outer * 4) + i.inner) < 10):"], text
    a = np.arange(10, dtype="float32")
    _, b = _run(func, [a, np.full(10, np.nan, "float32")])
    np.testing.assert_allclose(b, a * 2 + 1, err_msg="split 10 by 4, partitioned")


def test_divisible_split_is_left_alone():
    s, args = _elementwise(12, 4)
    text = str(nnvm.lower(s, args))
    assert "if " not in text and text.count("for i.outer") == 1, text


def test_matmul_reduction_and_spatial_guards_leave_main_loops():
    n, tile, kf = 10, 4, 3
    s, args = _matmul(n, tile, kf)
    func = lower_schedule(s, args)
    text = str(func)
    # i.outer runs 0..1 unguarded, then the tail i.outer = 2 where i.inner < 2 is checked
    main = _block(text, "for i.outer in range(2):")
    assert not any("i.outer" in g for g in _guards(main)), f"an i guard in the main i loop:\n{text}"
    assert not any("j.outer" in g for g in _guards(_block(text, "for j.outer in range(2):"))), text
    assert not any("k.outer" in g for g in _guards(_block(text, "for k.outer in range(3):"))), text
    assert "for i.outer in range(2, 2 + 1):" in text and "for k.outer in range(3, 3 + 1):" in text
    # the unrolled copies of k.inner beyond n vanish from the k tail: 10 = 3*3 + 1
    k_tail = _block(text, "for k.outer in range(3, 3 + 1):")
    assert sum("* B[" in line for line in k_tail) == 1, "\n".join(k_tail)
    r = np.random.default_rng(0)
    a, b = (r.standard_normal((n, n)).astype("float32") for _ in range(2))
    _, _, c = _run(func, [a, b, np.full((n, n), np.nan, "float32")])
    want = a.astype("float64") @ b.astype("float64")
    np.testing.assert_allclose(c, want, rtol=1e-4, atol=1e-4, err_msg="matmul 10, tiles 4, k by 3")


def test_parallel_loop_stays_whole_and_inner_loops_are_partitioned():
    n = 10
    s, args = _matmul(n, 4, 3, parallel=True)
    func = lower_schedule(s, args)
    text = str(func)
    assert text.count("# parallel") == 1 and "for i.outer in range(3):  # parallel" in text, text
    assert "for k.outer in range(3):" in text and "for k.outer in range(3, 3 + 1):" in text, text
    r = np.random.default_rng(1)
    a, b = (r.standard_normal((n, n)).astype("float32") for _ in range(2))
    _, _, c = _run(func, [a, b, np.zeros((n, n), "float32")])
    np.testing.assert_allclose(c, a.astype("float64") @ b, rtol=1e-4, atol=1e-4, err_msg="parallel matmul")


def _guarded_loop(cond_of, extent=5, inner=3, kind=S.ForKind.SERIAL):
    """``for o in range(extent): for i in range(inner): if cond_of(o, i): X[o*inner + i] = 1``."""
    X = S.Buffer("X", (E.const(extent * inner),), "float32")
    o, i = E.Var("o"), E.Var("i")
    store = S.Store(X, o * inner + i, E.const(1.0, "float32"))
    body = S.For(o, E.const(0), E.const(extent), kind,
                 S.For(i, E.const(0), E.const(inner), S.ForKind.SERIAL, S.IfThenElse(cond_of(o, i), store)))
    return X, o, i, body


def _count(stmt, cls) -> int:
    from nnvm.tir.visit import walk

    found = []
    walk(stmt, lambda node: found.append(node) if isinstance(node, cls) else None)
    return len(found)


def test_partition_point_is_exact():
    # o*3 + i < 13 holds for every i in 0..2 exactly when o <= 3
    X, o, i, body = _guarded_loop(lambda o, i: o * 3 + i < 13)
    out = partition_loops(body)
    assert isinstance(out, S.Seq) and len(out.stmts) == 2
    main, tail = out.stmts
    assert (main.min.value, main.extent.value, tail.min.value, tail.extent.value) == (0, 4, 4, 1)
    assert _count(main, S.IfThenElse) == 0 and _count(tail, S.IfThenElse) == 1
    func = S.PrimFunc("f", (X,), out)
    (x,) = _run(func, [np.zeros(15, "float32")])
    np.testing.assert_array_equal(x, (np.arange(15) < 13).astype("float32"))


def test_le_and_gt_forms():
    _, _, _, body = _guarded_loop(lambda o, i: o * 3 + i <= 12)
    assert partition_loops(body).stmts[0].extent.value == 4
    _, _, _, body = _guarded_loop(lambda o, i: E.const(13) > o * 3 + i)
    assert partition_loops(body).stmts[0].extent.value == 4


def test_guards_that_are_not_split_tails_are_kept():
    cases = {
        "lower bound": lambda o, i: o * 3 + i >= 4,  # the failing iterations come first
        "dead tail": lambda o, i: o < 3,  # trimming the loop, not partitioning it
        "non-linear": lambda o, i: (o * 3 + i) // 2 < 6,
    }
    for name, cond in cases.items():
        _, _, _, body = _guarded_loop(cond)
        out = partition_loops(body)
        assert isinstance(out, S.For) and out.extent.value == 5, f"{name}: partitioned:\n{out}"
    for kind in (S.ForKind.PARALLEL, S.ForKind.VECTORIZED):
        _, _, _, body = _guarded_loop(lambda o, i: o * 3 + i < 13, kind=kind)
        assert isinstance(partition_loops(body), S.For), f"a {kind} loop was cut in two"


def test_a_constant_loop_is_cut_at_a_dims_limit():
    """The last chunk of a symbolic row count: ``o*3 + i < n`` in a loop of constant extent gives a main
    loop up to ``n // 3`` without the guard and the guarded tail, the same stores for every ``n``."""
    from nnvm.tir.visit import substitute

    n = E.Var("n")
    X, o, i, body = _guarded_loop(lambda o, i: o * 3 + i < n)
    out = partition_loops(body)
    assert isinstance(out, S.Seq) and len(out.stmts) == 2, f"not cut:\n{out}"
    main, tail = out.stmts
    assert _count(main, S.IfThenElse) == 0 and _count(tail, S.IfThenElse) >= 1, f"{out}"
    for value in range(0, 18):
        got, want = (np.zeros(15, "float32") for _ in range(2))
        for stmt, arr in ((out, got), (body, want)):
            _run(S.PrimFunc("f", (X,), substitute(stmt, {n: E.const(value)})), [arr])
        np.testing.assert_array_equal(got, want, err_msg=f"n = {value}\n{out}")


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n=st.integers(1, 23), factor=st.integers(1, 8), inner=st.integers(1, 5))
def test_partitioned_splits_compute_the_same(n, factor, inner):
    """A two-level split of a 2-d elementwise op, interpreted (bounds-checked) against numpy."""
    A = te.placeholder((n, inner + 1), name="A")
    B = te.compute((n, inner + 1), lambda i, j: A[i, j] - 3.0, name="B")
    s = te.create_schedule(B.op)
    io, ii = s[B].split(B.op.axis[0], factor=factor)
    iio, iii = s[B].split(ii, factor=max(1, factor // 2))
    jo, ji = s[B].split(B.op.axis[1], factor=inner)
    s[B].reorder(io, jo, iio, ji, iii)
    func = lower_schedule(s, [A, B])
    a = np.random.default_rng(n * 31 + factor).standard_normal((n, inner + 1)).astype("float32")
    _, b = _run(func, [a, np.full_like(a, np.nan)])
    np.testing.assert_allclose(b, a - 3.0, err_msg=f"n={n} factor={factor} inner={inner}\n{func}")


def test_an_unrolled_copy_leaves_out_the_untaken_sides_of_selects():
    """Unrolling substitutes the loop index; a select chain on it (Winograd's transform rows) keeps only
    the side its now constant condition takes, in selects and ``if_then_else`` calls alike."""
    from nnvm.tir.lower import unrolled_copy
    from nnvm.tir.printer import stmt_str

    i, j = E.Var("i"), E.Var("j")
    src = S.Buffer("src", (E.const(64),), "float32")
    dst = S.Buffer("dst", (E.const(4),), "float32")
    load = [E.Load(src, j * 4 + k, "float32") for k in range(3)]
    inner = E.Call("if_then_else", (E.BinOp("eq", i, E.const(1), "bool"), load[1], load[2]), "float32")
    chain = E.Select(E.BinOp("eq", i, E.const(0), "bool"), load[0], inner, "float32")
    body = S.Store(dst, i, chain)
    for value in range(3):
        kept = f"((j * 4) + {value})]"
        text = stmt_str(unrolled_copy(body, i, value))
        assert "select" not in text and "if_then_else" not in text and text.count("src[") == 1, text
        assert f"dst[{value}]" in text and kept in text, text
    # a condition that stays symbolic keeps its select, with the index substituted
    other = S.Store(dst, i, E.Select(E.BinOp("lt", j, i, "bool"), load[0], load[1], "float32"))
    assert "select((j < 2)" in stmt_str(unrolled_copy(other, i, 2))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.integers(-9, 9), st.integers(-9, 9), st.integers(1, 3))
def test_at_most_is_sound_over_floor_divisions(m1, m2, a1, a2, k):
    """``_at_most(x, y)`` (``x <= y`` for every value of the dims, floor divisions relaxed to fractions)
    is only ever claimed where it holds: checked for ``k * ((s + a1) // m1) <= k * ((s + a2) // m2) *
    m1 // m1`` shapes at every ``s`` in a range, and it proves the case the row tiles need."""
    from nnvm.tir.lower import _at_most

    s = E.Var("s", "int64")
    x = E.binop("floordiv", s + a1, E.const(m1, "int64")) * k
    y = E.binop("floordiv", s + a2, E.const(m2, "int64")) * (k * m2 // m1 if m2 % m1 == 0 else k)
    if _at_most(x, y):
        ky = k * m2 // m1 if m2 % m1 == 0 else k
        for v in range(-40, 200):
            assert k * ((v + a1) // m1) <= ky * ((v + a2) // m2), (v, m1, m2, a1, a2, k)
    tiles = E.binop("floordiv", s + 3, E.const(4, "int64"))
    padded = E.binop("floordiv", s + 7, E.const(8, "int64")) * 2
    assert _at_most(tiles, padded) and not _at_most(padded, tiles)

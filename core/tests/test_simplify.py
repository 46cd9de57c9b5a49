"""The simplifier must preserve values: checked on random integer environments (hypothesis)."""

from __future__ import annotations

import itertools
import operator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.tir import expr as E
from nnvm.tir.simplify import simplify

VARS = [E.Var(n) for n in ("a", "b", "c")]
RANGES = {VARS[0]: (0, 7), VARS[1]: (0, 15), VARS[2]: (-5, 20)}


def _eval(e, env):
    if isinstance(e, E.Var):
        return env[e]
    if isinstance(e, E.Const):
        return e.value
    if isinstance(e, E.BinOp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        return {
            "add": operator.add, "sub": operator.sub, "mul": operator.mul,
            "floordiv": operator.floordiv, "floormod": operator.mod, "min": min, "max": max,
            "lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge,
            "eq": operator.eq, "ne": operator.ne,
            "and": lambda x, y: bool(x) and bool(y), "or": lambda x, y: bool(x) or bool(y),
        }[e.op](a, b)
    if isinstance(e, E.Select):
        return _eval(e.true_value, env) if _eval(e.cond, env) else _eval(e.false_value, env)
    raise AssertionError(f"unexpected node {e!r}")


def int_exprs():
    leaves = st.one_of(st.sampled_from(VARS), st.integers(-9, 9).map(E.const))

    def extend(children):
        arith = st.tuples(st.sampled_from(["add", "sub", "mul", "min", "max"]), children, children).map(
            lambda t: E.binop(t[0], t[1], t[2]))
        divmod_ = st.tuples(st.sampled_from(["floordiv", "floormod"]), children, st.integers(1, 9)).map(
            lambda t: E.binop(t[0], t[1], E.const(t[2])))
        return st.one_of(arith, divmod_)

    return st.recursive(leaves, extend, max_leaves=10)


envs = st.fixed_dictionaries({v: st.integers(lo, hi) for v, (lo, hi) in RANGES.items()})


@settings(max_examples=300, deadline=None, derandomize=True)
@given(int_exprs(), st.lists(envs, min_size=4, max_size=4))
def test_simplify_preserves_integer_values(expr, environments):
    simple = simplify(expr, RANGES)
    for env in environments:
        assert _eval(simple, env) == _eval(expr, env), f"{expr} simplified to {simple} differs at {env}"


@settings(max_examples=200, deadline=None, derandomize=True)
@given(int_exprs(), int_exprs(), st.sampled_from(["lt", "le", "eq", "ne", "ge"]), st.lists(envs, min_size=4,
                                                                                          max_size=4))
def test_simplify_preserves_comparisons(a, b, op, environments):
    expr = E.binop(op, a, b)
    simple = simplify(expr, RANGES)
    for env in environments:
        assert bool(_eval(simple, env)) == bool(_eval(expr, env)), f"{expr} -> {simple} at {env}"


def test_split_and_fuse_index_arithmetic_collapses():
    i, j = E.Var("i"), E.Var("j")
    ranges = {i: (0, 9), j: (0, 3)}
    assert str(simplify((i * 4 + j) // 4, ranges)) == "i"
    assert str(simplify((i * 4 + j) % 4, ranges)) == "j"
    f = E.Var("f")
    assert str(simplify((f // 8) * 8 + f % 8, {f: (0, 47)})) == "f"
    assert str(simplify(i * 4 + j < 40, ranges)) == "True"


def test_constant_folding_and_identities():
    x = E.Var("x", "float32")
    assert str(simplify(E.const(3) * 4 + 2)) == "14"
    assert simplify(x * 1.0) is x
    assert simplify(x + 0.0) is x
    assert str(simplify(E.select(E.const(True), x, x * 2.0))) == "x"


def test_min_and_max_of_terms_a_constant_apart_pick_one():
    """A region read twice at the same rows (GELU reads its input twice) unions to min(i, i) and
    max(i, i): unsimplified, bound inference widened the rows to the whole axis (ViT: 197 rows unrolled)."""
    i = E.Var("i")
    ranges = {i: (0, 196)}
    assert str(simplify(E.binop("min", i, i), ranges)) == "i"
    assert str(simplify(E.binop("max", i * 2 + 3, i * 2 + 1), ranges)) == str(simplify(i * 2 + 3, ranges))
    assert str(simplify(E.binop("max", i, i) - E.binop("min", i, i) + 1, ranges)) == "1"


# -- (c*x + r) // k with c dividing k and 0 <= r < c: a slice of a flattened tensor read through a reshape


def test_slice_of_a_reshape_is_contiguous_in_its_lane():
    """ViT's query copy: rows of 64 at a stride of 12608 in [3, 8, 3, 197, 64], the first third."""
    f, i, j = E.Var("f"), E.Var("i"), E.Var("j")
    ranges = {f: (0, 23), i: (0, 196), j: (0, 63)}
    flat = f * 12608 + i * 64 + j
    index = (flat // 37824) * 37824 + (f % 3) * 12608 + i * 64 + j
    assert str(simplify(index, ranges)) == str(simplify(flat, ranges))
    assert str(simplify(flat % 37824, ranges)) == str(simplify((f % 3) * 12608 + i * 64 + j, ranges))


def test_a_rest_that_reaches_c_is_left_alone():
    """r up to c (not below it): the rule must not apply, and the value is kept."""
    f, j = E.Var("f"), E.Var("j")
    ranges = {f: (0, 5), j: (0, 4)}
    expr = (f * 4 + j) // 8  # j reaches 4 == c
    simple = simplify(expr, ranges)
    for fv, jv in itertools.product(range(6), range(5)):
        assert _eval(simple, {f: fv, j: jv}) == (fv * 4 + jv) // 8


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.integers(2, 12), st.integers(2, 6), st.integers(-3, 3), st.integers(-20, 20),
       st.integers(0, 11), st.integers(-6, 6), st.sampled_from(["floordiv", "floormod"]))
def test_factored_forms_keep_their_values(c, m, a, const, rest_hi, x_lo, op):
    """(c*(a*x + y) + const + r) op (c*m) over every point of small ranges, x possibly negative."""
    x, y, r = E.Var("x"), E.Var("y"), E.Var("r")
    ranges = {x: (x_lo, x_lo + 7), y: (0, 3), r: (0, rest_hi)}
    expr = E.binop(op, (x * a + y) * c + r + const, E.const(c * m))
    simple = simplify(expr, ranges)
    for env in itertools.product(range(x_lo, x_lo + 8), range(4), range(rest_hi + 1)):
        env = dict(zip((x, y, r), env))
        assert _eval(simple, env) == _eval(expr, env), f"{expr} -> {simple} at {env}"


def test_a_select_on_a_constant_condition_simplifies_only_the_chosen_side(monkeypatch):
    """Winograd's transforms pick a matrix row through a chain of selects on the unrolled tile index;
    both sides of every select are shared subtrees here, so simplifying the untaken ones too would visit
    2**depth nodes (how ResNet-18 spent 7 of its 11 s of compile time)."""
    from nnvm.tir.simplify import Simplifier

    a, b = VARS[0], VARS[1]
    e = a + b
    for depth in range(20):
        e = E.Select(E.BinOp("eq", E.const(depth % 3), E.const(1), "bool"), e + 1, e * 2, "int64")
    visits = []
    node = Simplifier._node
    monkeypatch.setattr(Simplifier, "_node", lambda self, x: visits.append(x) or node(self, x))
    out = simplify(e, RANGES)
    env = {a: 3, b: 5}
    expected = 8
    for depth in range(20):
        expected = expected + 1 if depth % 3 == 1 else expected * 2
    assert _eval(out, env) == expected
    assert len(visits) < 400


def test_does_nothing_agrees_with_simplifying_to_nothing():
    """Loop partitioning asks whether a tail runs anything without simplifying its whole body."""
    from nnvm.tir import stmt as S
    from nnvm.tir.simplify import Simplifier

    i, j = E.Var("i"), E.Var("j")
    buf = S.Buffer("out", (E.const(64),), "float32")
    store = S.Store(buf, i * 4 + j, E.const(1.0, "float32"))
    cases = [
        S.IfThenElse(E.BinOp("lt", i, E.const(4), "bool"), store, None),
        S.IfThenElse(E.BinOp("lt", i, E.const(4), "bool"), store, store),
        S.For(j, E.const(0), E.const(4), S.ForKind.SERIAL,
              S.IfThenElse(E.BinOp("lt", i + j, E.const(6), "bool"), store, None)),
        S.For(j, E.const(0), E.const(0), S.ForKind.SERIAL, store),
        S.seq(S.IfThenElse(E.BinOp("ge", i, E.const(9), "bool"), store, None),
              S.IfThenElse(E.BinOp("lt", i, E.const(2), "bool"), store, None)),
        S.IfThenElse(E.BinOp("lt", j, E.const(2), "bool"), store, None),
    ]
    for lo, hi in ((0, 3), (4, 7), (2, 8), (9, 12)):
        for case in cases:
            expected = Simplifier({i: (lo, hi), j: (0, 3)}).stmt(case) is None
            assert Simplifier({i: (lo, hi), j: (0, 3)}).does_nothing(case) == expected, (lo, hi, case)


def test_a_fused_index_over_a_symbolic_extent_is_merged_back():
    """A loop fused over a symbolic extent ``seq`` (issue 39's GPU kernels) indexes ``(f // seq) * seq +
    f % seq``: the same ``f``, without two 64-bit divisions an element; unequal coefficients stay."""
    from nnvm.graph.dims import dim_var

    seq, f, t = dim_var("seq"), E.Var("f", "int64"), E.Var("t", "int64")
    row = ((f // seq) * seq) * 256 + (f % seq) * 256 + t * 4
    assert str(simplify(row)) == "((f * 256) + (t * 4))"
    assert str(simplify(seq * (f // seq) + f % seq)) == "f"
    kept = simplify((f // seq) * seq + (f % seq) * 2)
    assert "//" in str(kept) and "%" in str(kept)
    for fv, sv in itertools.product(range(0, 40, 3), (1, 5, 7)):  # the identity the rewrite relies on
        assert (fv // sv) * sv + fv % sv == fv


# -- a requantize read back by a dequantize in the same kernel: the 8-bit round trip dropped


def _requantize_dequantize(v, zp: int, lo: int, hi: int, dtype: str, added: float | None = None):
    """``float32(int32(dtype(round(clamp(v)) + zp)) - zp)``: what a fused requantize -> dequantize
    lowers to (``ops/quant.py``'s saturate-round, then the dequantize's centring)."""
    clamped = E.binop("min", E.const(float(hi - zp), "float32"), E.binop("max", E.const(float(lo - zp),
                                                                                       "float32"), v))
    r = E.call("round", clamped, dtype="float32")
    q = E.cast(dtype, r + E.const(float(zp if added is None else added), "float32"))
    return E.cast("float32", E.cast("int32", q) - E.const(zp, "int32"))


def _np_value(e, x: np.ndarray) -> np.ndarray:
    """``e`` over float32 ``x`` (the Var ``v``) with numpy's casts: the reference the rewrite must equal."""
    if isinstance(e, E.Var):
        return x
    if isinstance(e, E.Const):
        return np.asarray(e.value, dtype=e.dtype)
    if isinstance(e, E.Cast):
        return _np_value(e.value, x).astype(e.dtype)
    if isinstance(e, E.Call):
        assert e.name == "round", e
        return np.rint(_np_value(e.args[0], x))
    a, b = _np_value(e.a, x), _np_value(e.b, x)
    op = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum}[e.op]
    return op(a, b).astype(e.dtype)


def _casts(e) -> int:
    if isinstance(e, (E.Var, E.Const)):
        return 0
    inner = (e.value,) if isinstance(e, E.Cast) else e.args if isinstance(e, E.Call) else (e.a, e.b)
    return int(isinstance(e, E.Cast)) + sum(_casts(x) for x in inner)


@pytest.mark.parametrize("zp, lo, hi, dtype", [(143, 0, 255, "uint8"), (0, 0, 255, "uint8"),
                                               (3, 3, 200, "uint8"), (-5, -128, 127, "int8"),
                                               (0, -128, 127, "int8")])
def test_an_8bit_round_trip_in_float_is_dropped_exactly(zp, lo, hi, dtype):
    """The rounded value itself, with the same bits as the casts give (numpy's, on values around every
    bound, halves included): no conversion is left."""
    v = E.Var("v", "float32")
    e = _requantize_dequantize(v, zp, lo, hi, dtype)
    simple = simplify(e)
    assert _casts(simple) == 0, f"{e} simplified to {simple}"
    edges = [lo - zp - 0.5, hi - zp + 0.5, 1e9, -1e9]
    x = np.concatenate([np.arange(-300, 300, 0.25), edges]).astype(np.float32)
    np.testing.assert_array_equal(_np_value(simple, x), _np_value(e, x))


def test_a_round_trip_that_could_change_the_value_is_kept():
    """Kept where the casts do something: a clamp wider than the 8-bit type (it would wrap), no clamp, a
    zero point added that is not the one taken off again is kept as a float add (checked exactly)."""
    v = E.Var("v", "float32")
    wide = _requantize_dequantize(v, 0, -10, 255, "uint8")  # -10 does not fit uint8
    assert _casts(simplify(wide)) == _casts(wide)
    unclamped = E.cast("float32", E.cast("int32", E.cast("uint8", E.call("round", v, dtype="float32"))))
    assert _casts(simplify(unclamped)) == _casts(unclamped)
    fractional = E.cast("float32", E.cast("int32", E.cast("uint8", v + E.const(0.5, "float32"))))
    assert _casts(simplify(fractional)) == _casts(fractional)
    shifted = _requantize_dequantize(v, 10, 10, 200, "uint8", added=12.0)  # two more than it takes off
    simple = simplify(shifted)
    assert _casts(simple) == 0
    x = np.arange(-50, 300, 0.25, dtype=np.float32)
    np.testing.assert_array_equal(_np_value(simple, x), _np_value(shifted, x))


def test_three_fused_axes_read_back_as_one_row():
    """``((f // 3136) * 56 + (f // 56) % 56) * 56 + f % 56`` (an image's [1, 56, 56] rows flattened and
    read back per axis) is ``f``: the quotient's remainder merges with ``f // 3136``, which the simplifier
    has already written for ``(f // 56) // 56``."""
    from nnvm.tir import expr as E
    from nnvm.tir.simplify import simplify

    f = E.Var("f", "int64")

    def c(v):
        return E.const(v, "int64")

    image_row = E.binop("floormod", E.binop("floordiv", f, c(56)), c(56))
    e = (E.binop("floordiv", f, c(3136)) * 56 + image_row) * 56 + E.binop("floormod", f, c(56))
    assert str(simplify(e)) == "f"

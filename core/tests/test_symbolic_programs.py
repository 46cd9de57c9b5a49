"""The shape programs an exported symbolic module carries (``nnvm.runtime.symbolic``): a dim written as
postfix words over the dim vector evaluates to what Python's own arithmetic gives, and the section read
back binds a run's dims with the compiled module's sentences. The C runtime evaluates the same words
(tests/test_symbolic_export.py runs it on models)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnvm.errors import Error, InputError
from nnvm.graph.dims import Dim
from nnvm.runtime.symbolic import DimSignature, describe, evaluate, program, read_description

DIMS = ["batch", "seq", "past"]


def _dims_and_python(draw, depth: int):
    """(a dim or int built of + - * // %, the same as a Python expression text) drawn recursively."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            name = draw(st.sampled_from(DIMS))
            return Dim.named(name), name
        c = draw(st.integers(0, 9))
        return c, str(c)
    a, ta = _dims_and_python(draw, depth - 1)
    op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
    if op in ("//", "%"):  # a positive constant divisor, as shapes divide
        c = draw(st.integers(1, 7))
        b, tb = c, str(c)
    else:
        b, tb = _dims_and_python(draw, depth - 1)
    value = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b, "//": lambda: a // b,
             "%": lambda: a % b}[op]()
    return value, f"({ta} {op} {tb})"


@st.composite
def expressions(draw):
    return _dims_and_python(draw, 4)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(expr=expressions(), values=st.lists(st.integers(0, 50), min_size=3, max_size=3))
def test_a_program_evaluates_as_python_does(expr, values):
    d, text = expr
    env = dict(zip(DIMS, values))
    want = eval(text, {}, env)  # noqa: S307  (our own generated arithmetic)
    assert evaluate(program(d, DIMS), values) == want, (text, program(d, DIMS))
    if isinstance(d, Dim):
        assert d.evaluate(env) == want


def test_a_dim_outside_the_vector_is_refused():
    with pytest.raises(Error, match="the dim other is not one of the module's dims"):
        program(Dim.named("other") + 1, DIMS)


def test_a_section_read_back_binds_with_the_same_sentences():
    """``describe`` then ``read_description`` (what ``nnvm.load`` does): inputs, bounds, ``past + seq``
    and a requirement, each mistake the sentence of the signature it was written from."""
    seq, past = Dim.named("seq"), Dim.named("past")
    inputs = {"ids": ("batch", "seq"), "mask": ("batch", "past + seq"), "cache": ("batch", 4, "past")}
    sig = DimSignature(inputs, {"batch": (1, 4), "seq": (1, 64), "past": (0, 32)},
                       [(past + seq, 40, "node Slice")])
    desc = describe(sig, DIMS, [("y", (Dim.named("batch"), past + seq, 8))])
    back, dims, outputs = read_description(desc)
    assert dims == DIMS
    shapes = {"ids": (2, 3), "mask": (2, 8), "cache": (2, 4, 5)}
    assert back.bind(shapes) == sig.bind(shapes) == {"batch": 2, "seq": 3, "past": 5}
    assert [d if isinstance(d, int) else d.evaluate({"batch": 2, "seq": 3, "past": 5})
            for d in outputs[0]] == [2, 8, 8]
    for wrong in ({"mask": (2, 9)}, {"ids": (5, 3), "mask": (5, 8), "cache": (5, 4, 5)},
                  {"cache": (2, 4, 33)}, {"cache": (2, 3, 5)}, {"ids": (2, 3, 1)},
                  {"ids": (2, 20), "mask": (2, 50), "cache": (2, 4, 30)}):
        given_shapes = {**shapes, **wrong}
        with pytest.raises(InputError) as want:
            sig.bind(given_shapes)
        with pytest.raises(InputError) as got:
            back.bind(given_shapes)
        assert str(got.value) == str(want.value)


def test_a_malformed_section_is_refused_when_read():
    """``nnvm.load`` turns these into one sentence (the section is corrupt) before any run."""
    sig = DimSignature({"x": ("N", 4)}, {"N": (1, 8)})
    good = describe(sig, ["N"], [("y", (Dim.named("N") * 2, 4))])
    read_description(good)
    for bad in ([0, 1, 2], [2], [1, 5], [0, 4, 0, 0, 5]):  # a stray word, an op with no operands, dim 5, // 0
        broken = {**good, "outputs": [{**good["outputs"][0], "programs": [bad, [0, 4]]}]}
        with pytest.raises((ValueError, IndexError, ZeroDivisionError)):
            read_description(broken)

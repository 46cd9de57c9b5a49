"""Symbolic dims in the graph IR (``nnvm.graph.dims``): a normal form, so equal dims compare equal however
they were written; no value at compile time, ever; shapes holding them in types and graph JSON."""

from __future__ import annotations

import pytest

from nnvm.graph.dims import Dim, SymbolicDimError, is_symbolic, parse_dim
from nnvm.graph.ir import Graph, Node, TensorType

batch, seq = Dim.named("batch"), Dim.named("seq")


def test_equal_dims_compare_equal_whatever_their_order():
    assert batch * seq == seq * batch and hash(batch * seq) == hash(seq * batch)
    assert (seq + 1) - 1 == seq and seq * 4 + seq == 5 * seq
    assert (batch * seq * 64) // 16 == batch * seq * 4
    assert (batch * seq * 64) // (seq * 4) == batch * 16  # exact division by a monomial
    assert (batch * seq * 64) % (seq * 4) == 0 and seq - seq == 0  # constants come back as ints
    assert batch != seq and batch != 1 and (batch, seq) != (seq, batch)
    assert {batch * seq: "x"}[seq * batch] == "x"


def test_exact_division_by_a_sum_of_dims():
    """A KV cache's reshape: ``(batch, 2, past + seq, 32)`` to ``(-1, past + seq, 32)`` divides by a sum."""
    past = Dim.named("past")
    assert (batch * 2 * (past + seq) * 32) // ((past + seq) * 32) == batch * 2
    assert (batch * 2 * (past + seq) * 32) % ((past + seq) * 32) == 0
    assert (past * past - seq * seq) // (past - seq) == past + seq
    inexact = (batch * (past + seq)) // (past + seq + 1)  # no quotient: kept as a division
    assert isinstance(inexact, Dim) and inexact.evaluate({"batch": 2, "past": 3, "seq": 4}) == 1


def test_a_dim_has_no_value_at_compile_time():
    for use in (int, lambda d: range(d), lambda d: d < 5, lambda d: d >= 1):
        with pytest.raises(SymbolicDimError, match="the symbolic dim seq has no value at compile time"):
            use(seq)


def test_evaluate_and_text_round_trip():
    d = (seq + 15) // 16 * batch + 3
    assert d.evaluate({"seq": 17, "batch": 5}) == 13
    assert set(d.names) == {"seq", "batch"}
    assert parse_dim(str(d)) == d
    with pytest.raises(SymbolicDimError, match="needs batch"):
        d.evaluate({"seq": 3})


def test_types_and_graph_json_hold_dims():
    ty = TensorType((batch, seq, 64), "float32")
    assert ty.symbolic and is_symbolic(ty.shape) and not TensorType((2, 3), "float32").symbolic
    assert ty.size == batch * seq * 64 and ty.nbytes == batch * seq * 256
    assert str(ty) == "float32[batch, seq, 64]"
    g = Graph([Node("relu", "r", ["x"], ["y"])], ["x"], ["y"], {}, {"x": ty, "y": ty})
    back = Graph.from_json(g.to_json())
    assert back.types["y"] == ty

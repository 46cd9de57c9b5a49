"""``rewrite`` copies a changed node without calling its constructor (``visit._replaced``): that is only
the same as ``dataclasses.replace`` while no node class computes anything at construction."""

import dataclasses
import inspect

from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.visit import rewrite


def _node_classes():
    for module in (E, S):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if dataclasses.is_dataclass(cls) and issubclass(cls, E.Expr | S.Stmt):
                yield cls


def test_node_classes_compute_nothing_at_construction():
    for cls in _node_classes():
        assert not hasattr(cls, "__post_init__"), f"{cls.__name__} has __post_init__: rewrite would skip it"
        assert not hasattr(cls, "__slots__") or "__dict__" in cls.__slots__, f"{cls.__name__} has slots"
        for f in dataclasses.fields(cls):
            assert f.init, f"{cls.__name__}.{f.name} is init=False: rewrite would copy a stale value"


def test_rewrite_keeps_unchanged_subtrees_and_replaces_changed_ones():
    x, y = E.Var("x", "int32"), E.Var("y", "int32")
    left = x + E.const(1)
    tree = left * (y + E.const(2))
    same = rewrite(tree, lambda n: None)
    assert same is tree
    swapped = rewrite(tree, lambda n: E.const(5) if n is y else None)
    assert swapped is not tree and swapped.a is left and type(swapped) is type(tree)
    assert "y" not in str(swapped) and "5" in str(swapped) and swapped.dtype == tree.dtype

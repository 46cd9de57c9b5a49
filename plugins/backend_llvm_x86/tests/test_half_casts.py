"""Casts to and from float16 from every float width, which x86 needs library helpers for (double to
half is ``__truncdfhf2`` in libgcc): numbers equal numpy's, and the process survives the call."""

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder


@pytest.mark.parametrize("src,dst", [("float64", "float16"), ("float32", "float16"),
                                     ("float16", "float64"), ("float16", "float32")])
def test_cast_through_half_matches_numpy(src, dst):
    b = GraphBuilder(name="cast")
    x = b.input("x", (5, 7), src)
    b.output(b.node("cast", [x], {"dtype": dst}, name="c")[0])
    xv = (np.random.default_rng(0).standard_normal((5, 7)) * 100).astype(src)
    (y,) = nnvm.compile(b.build(), target="llvm").run(xv)
    assert y.dtype == np.dtype(dst)
    np.testing.assert_array_equal(y, xv.astype(dst))

"""Groups share a kernel only when they compute the same function: ``x * x`` is not ``a * b``."""

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_input_read_twice_gets_its_own_kernel(opt_level):
    b = GraphBuilder(name="g")
    x = b.input("x", (3, 4), "float32")
    w = b.input("w", (3, 4), "float32")
    sq = b.node("multiply", [x, x], {}, name="sq")[0]
    e = b.node("exp", [sq], {}, name="e")[0]
    b.output(b.node("multiply", [e, w], {}, name="mw")[0])
    rng = np.random.default_rng(0)
    xv, wv = (rng.standard_normal((3, 4)).astype("float32") for _ in range(2))
    (y,) = nnvm.compile(b.build(), target="llvm", opt_level=opt_level).run(xv, wv)
    np.testing.assert_allclose(y, np.exp(xv * xv) * wv, rtol=1e-5, atol=1e-6)

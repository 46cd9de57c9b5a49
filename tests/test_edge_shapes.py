"""Shapes at the edges: empty tensors compile and run to numpy's answer."""

import numpy as np

import nnvm
from nnvm.graph.builder import GraphBuilder


def test_reshape_of_an_empty_tensor():
    b = GraphBuilder(name="g")
    x = b.input("x", (0, 4), "float32")
    b.output(b.node("reshape", [x], {"newshape": (4, 0)}, name="r")[0])
    xv = np.zeros((0, 4), np.float32)
    (y,) = nnvm.compile(b.build(), target="llvm").run(xv)
    assert y.shape == xv.reshape(4, 0).shape

"""A symbolic batch as a loop over the batch-1 kernel (``nnvm.batch_loop``, ``tir.lower.batch_loop``):
which groups qualify, and that the looped program computes what numpy does at any batch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from nnvm import te
from nnvm.batch_loop import loop_dim
from nnvm.graph.dims import dim_var
from nnvm.te.lower import lower_schedule
from nnvm.tir import expr as E
from nnvm.tir import stmt as S
from nnvm.tir.interpreter import run_primfunc
from nnvm.tir.lower import batch_loop
from nnvm.tir.visit import rewrite, substitute

N = dim_var("batch")


def _dense_relu(batch):
    """[batch, 8] x [4, 8]^T, padded by one zero column on each side, then ReLU: [batch, 6]."""
    x = te.placeholder((batch, 8), name="x")
    w = te.placeholder((4, 8), name="w")
    k = te.reduce_axis((0, 8), name="k")
    y = te.compute((batch, 4), lambda n, o: te.sum(x[n, k] * w[o, k], axis=k), name="y")
    p = te.compute((batch, 6), lambda n, o: te.if_then_else(te.all_of(o >= 1, o < 5), y[n, o - 1], 0.0),
                   name="pad")
    r = te.compute((batch, 6), lambda n, o: te.max(p[n, o], te.const(0.0, "float32")), name="relu")
    return x, w, y, r


def test_a_per_image_group_loops_over_its_batch():
    x, w, _, r = _dense_relu(N)
    assert loop_dim([x, w], [r]) is N


@pytest.mark.parametrize("case", ["sum_over_batch", "next_image", "index_as_value", "batch_not_leading",
                                  "batch_in_weight", "another_symbolic_dim"])
def test_a_group_mixing_images_is_not_looped(case):
    x = te.placeholder((N, 8), name="x")
    if case == "sum_over_batch":  # BatchNorm statistics in training, a mean over axis 0
        b = te.reduce_axis((0, N), name="b")
        y = te.compute((1, 8), lambda i, c: te.sum(x[b, c], axis=b), name="y")
    elif case == "next_image":
        y = te.compute((N, 8), lambda n, c: x[te.max(n - 1, E.const(0, n.dtype)), c], name="y")
    elif case == "index_as_value":
        y = te.compute((N, 8), lambda n, c: x[n, c] * te.cast("float32", n), name="y")
    elif case == "another_symbolic_dim":  # [batch, seq, 8]: one image's size is not known
        x = te.placeholder((N, dim_var("seq"), 8), name="x")
        y = te.compute(x.shape, lambda n, s, c: x[n, s, c] * 2.0, name="y")
    elif case == "batch_not_leading":
        y = te.compute((8, N), lambda c, n: x[n, c], name="y")
    else:  # a second input whose batch is not its leading axis
        w = te.placeholder((8, N), name="w")
        y = te.compute((N, 8), lambda n, c: x[n, c] + w[c, n], name="y")
        assert loop_dim([x, w], [y]) is None
        return
    assert loop_dim([x], [y]) is None


@pytest.mark.parametrize("batch", [1, 3])
def test_the_looped_batch_1_program_matches_numpy(batch):
    x1, w1, _, r1 = _dense_relu(1)
    s = te.create_schedule(r1.op)
    oo, oi = s[r1].split(r1.op.axis[1], factor=4)  # a tail (6 = 4 + 2): guards inside the image
    s[r1].parallel(oo)
    one = lower_schedule(s, [x1, w1, r1], "k")
    x, w, _, r = _dense_relu(N)
    full = tuple(S.Buffer(t.name, tuple(E.convert(d) for d in t.shape), t.dtype) for t in (x, w, r))
    func = batch_loop(one, full, N)
    assert [d.name for d in func.dims] == ["batch"] and isinstance(func.body, S.Allocate | S.For)

    rng = np.random.default_rng(batch)
    xa = rng.standard_normal((batch, 8)).astype(np.float32)
    wa = rng.standard_normal((4, 8)).astype(np.float32)
    out = np.full((batch, 6), np.nan, np.float32)
    # the interpreter takes no dims: the run's batch put in as a constant
    value = {N: E.const(batch, N.dtype)}
    params = tuple(S.Buffer(b.name, tuple(substitute(d, value) for d in b.shape), b.dtype)
                   for b in func.params)
    bufs = dict(zip(func.params, params))
    body = rewrite(substitute(func.body, value),
                   lambda n: replace(n, buffer=bufs[n.buffer]) if isinstance(n, E.Load | S.Store)
                   and n.buffer in bufs else None)
    run_primfunc(S.PrimFunc("k", params, body), [xa, wa, out])
    want = np.maximum(np.pad(xa @ wa.T, ((0, 0), (1, 1))), 0)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)

"""Hypothesis strategies for tensor expressions: random small computations and random valid schedules.

Shared by the property tests of lowering through the reference interpreter (``core/tests``) and
through each backend (``plugins/*/tests``), so every backend is checked on the same programs. Shapes
stay tiny (extents up to 9) so that one example costs milliseconds to run and the cost of a property
is the compiler's, not the kernel's.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from nnvm import te
from nnvm.te.tensor import ComputeOp

# 200 examples per property in CI (the root conftest's "ci" profile derandomizes them).
SETTINGS = settings(max_examples=200, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

KINDS = ("elementwise", "broadcast", "reduction", "conv", "chain")
PRIMITIVES = ("split", "nparts", "fuse", "reorder", "unroll", "vectorize", "parallel")


def definitions(data):
    """A random small computation: ``(inputs, output tensor, numpy reference function)``.

    Kinds: elementwise, broadcast, reduction (a matmul against a transposed weight), conv-like with
    zero padding (an ``if_then_else`` guarded read), and a chain of two stages.
    """
    kind = data.draw(st.sampled_from(KINDS))
    dims = st.integers(1, 7)
    if kind == "elementwise":
        shape = tuple(data.draw(st.lists(dims, min_size=1, max_size=3)))
        A = te.placeholder(shape, name="A")
        B = te.compute(shape, lambda *i: A[i] * 2.0 + 1.0, name="B")
        return [A], B, lambda a: a * 2 + 1
    if kind == "broadcast":
        m, n = data.draw(dims), data.draw(dims)
        A = te.placeholder((m, n), name="A")
        V = te.placeholder((n,), name="V")
        B = te.compute((m, n), lambda i, j: te.maximum(A[i, j] - V[j], 0.0), name="B")
        return [A, V], B, lambda a, v: np.maximum(a - v, 0)
    if kind == "reduction":
        m, n, k = data.draw(dims), data.draw(dims), data.draw(dims)
        A = te.placeholder((m, k), name="A")
        W = te.placeholder((n, k), name="W")
        r = te.reduce_axis((0, k), name="r")
        B = te.compute((m, n), lambda i, j: te.sum(A[i, r] * W[j, r], axis=r), name="B")
        return [A, W], B, lambda a, w: a @ w.T
    if kind == "conv":
        n = data.draw(st.integers(2, 9))
        kw = data.draw(st.integers(1, min(3, n)))
        pad = data.draw(st.integers(0, 2))
        A = te.placeholder((n,), name="A")
        P = te.compute((n + 2 * pad,), lambda i: te.if_then_else(
            te.all_of(i >= pad, i < n + pad), A[i - pad], 0.0), name="P")
        W = te.placeholder((kw,), name="W")
        r = te.reduce_axis((0, kw), name="r")
        out = n + 2 * pad - kw + 1
        B = te.compute((out,), lambda i: te.sum(P[i + r] * W[r], axis=r), name="B")
        return [A, W], B, lambda a, w: np.convolve(np.pad(a, pad), w[::-1], mode="valid")
    m, n = data.draw(dims), data.draw(dims)
    A = te.placeholder((m, n), name="A")
    T = te.compute((m, n), lambda i, j: A[i, j] * 3.0, name="T")
    B = te.compute((m, n), lambda i, j: T[i, j] + T[i, n - 1 - j], name="B")
    return [A], B, lambda a: 3 * a + 3 * a[:, ::-1]


def random_schedule(data, s, out) -> None:
    """Up to five random primitives on the output's stage (split by factor or nparts, fuse, reorder,
    unroll, vectorize the innermost loop, parallel the outermost); every other compute stage inlined,
    left at root, or computed at a random loop of the output."""
    stage = s[out]
    for _ in range(data.draw(st.integers(0, 5))):
        leaves = list(stage.leaf_iter_vars)
        prim = data.draw(st.sampled_from(PRIMITIVES))
        if prim == "split":
            stage.split(data.draw(st.sampled_from(leaves)), factor=data.draw(st.integers(1, 5)))
        elif prim == "nparts":
            stage.split(data.draw(st.sampled_from(leaves)), nparts=data.draw(st.integers(1, 4)))
        elif prim == "fuse" and len(leaves) >= 2:
            k = data.draw(st.integers(0, len(leaves) - 2))
            if leaves[k].kind == leaves[k + 1].kind:
                stage.fuse(leaves[k], leaves[k + 1])
        elif prim == "reorder":
            stage.reorder(*data.draw(st.permutations(leaves)))
        elif prim == "unroll":
            stage.unroll(data.draw(st.sampled_from(leaves)))
        elif prim == "vectorize":
            stage.vectorize(leaves[-1])
        elif prim == "parallel":
            stage.parallel(leaves[0])
    for st_ in s.stages:
        if isinstance(st_.op, ComputeOp) and st_ is not stage:
            how = data.draw(st.sampled_from(["root", "inline", "at"]))
            if how == "inline":
                st_.compute_inline()
            elif how == "at":
                st_.compute_at(stage, data.draw(st.sampled_from(list(stage.leaf_iter_vars))))


def random_inputs(inputs: list, seed: int = 0) -> list:
    """Standard-normal float32 arrays shaped like the placeholders ``inputs``."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([int(x.value) for x in t.shape]).astype(np.float32) for t in inputs]


def empty_output(out) -> np.ndarray:
    """The output array, filled with NaN so that an element the program forgets to write shows."""
    return np.full([int(x.value) for x in out.shape], np.nan, np.float32)

"""Kernels over symbolic extents (issue 39, docs/dynamic-shapes.md): a ``te.var`` in a shape lowers to loops
over expressions of it, a constant split guards its tail, the LLVM code generator takes the dims after the
buffers, and one built function runs every size; numbers against numpy."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.generic_schedule import generic_schedule
from nnvm.graph.dims import Dim, shape_exprs
from nnvm.graph.ir import TensorType
from nnvm.ops.common import shape_of
from nnvm.ops.registry import get_op


def test_elementwise_split_by_a_constant_guards_the_tail():
    n = te.var("n")
    a = te.placeholder((n, 24), name="A")
    b = te.compute((n, 24), lambda i, j: a[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(b.op)
    outer, inner = s[b].split(s[b].fuse(*b.op.axis), factor=16)
    s[b].vectorize(inner)
    s[b].parallel(outer)
    func = nnvm.lower(s, [a, b])
    assert [d.name for d in func.dims] == ["n"]
    assert "< (n * 24)" in str(func), str(func)  # the tail's guard
    f = nnvm.build(s, [a, b], target="llvm")
    rng = np.random.default_rng(0)
    for rows in (1, 2, 3, 17):
        x = rng.normal(size=(rows, 24)).astype(np.float32)
        y = np.zeros_like(x)
        f(x, y)
        np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-6, err_msg=f"{rows} rows")


def test_dense_with_symbolic_rows_tiled_by_constants():
    m, n, k = te.var("m"), 48, 40
    a = te.placeholder((m, k), name="A")
    w = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[j, r], axis=r), name="C")
    s = te.create_schedule(c.op)
    io, ii = s[c].split(c.op.axis[0], factor=8)
    jo, ji = s[c].split(c.op.axis[1], factor=16)
    s[c].reorder(io, jo, r, ii, ji)
    s[c].vectorize(ji)
    s[c].parallel(io)
    f = nnvm.build(s, [a, w, c], target="llvm")
    rng = np.random.default_rng(1)
    wv = rng.normal(size=(n, k)).astype(np.float32)
    for rows in (1, 7, 8, 33):
        x = rng.normal(size=(rows, k)).astype(np.float32)
        out = np.zeros((rows, n), np.float32)
        f(x, wv, out)
        np.testing.assert_allclose(out, x @ wv.T, rtol=1e-4, atol=1e-5, err_msg=f"{rows} rows")


def test_batch_matmul_with_symbolic_m_n_k():
    """Attention's two products: every extent of the product symbolic."""
    m, n, k = te.var("M"), te.var("N"), te.var("K")
    x = te.placeholder((3, m, k), name="X")
    y = te.placeholder((3, k, n), name="Y")
    r = te.reduce_axis((0, k), name="r")
    z = te.compute((3, m, n), lambda b, i, j: te.sum(x[b, i, r] * y[b, r, j], axis=r), name="Z")
    s = generic_schedule([z])
    f = nnvm.build(s, [x, y, z], target="llvm")
    rng = np.random.default_rng(2)
    for mm, nn, kk in ((1, 1, 1), (7, 7, 16), (33, 5, 64)):
        xv = rng.normal(size=(3, mm, kk)).astype(np.float32)
        yv = rng.normal(size=(3, kk, nn)).astype(np.float32)
        zv = np.zeros((3, mm, nn), np.float32)
        f(xv, yv, zv)
        np.testing.assert_allclose(zv, xv @ yv, rtol=1e-4, atol=1e-5, err_msg=f"{(mm, nn, kk)}")


def test_softmax_rows_with_symbolic_extents_on_the_generic_schedule():
    rows, cols = te.var("rows"), te.var("cols")
    x = te.placeholder((rows, cols), name="X")
    k1, k2 = te.reduce_axis((0, cols), name="k1"), te.reduce_axis((0, cols), name="k2")
    mx = te.compute((rows,), lambda i: te.max(x[i, k1], axis=k1), name="mx")
    e = te.compute((rows, cols), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    total = te.compute((rows,), lambda i: te.sum(e[i, k2], axis=k2), name="total")
    y = te.compute((rows, cols), lambda i, j: e[i, j] / total[i], name="Y")
    f = nnvm.build(generic_schedule([y]), [x, y], target="llvm")
    rng = np.random.default_rng(3)
    for shape in ((1, 1), (3, 7), (40, 33)):
        xv = rng.normal(size=shape).astype(np.float32)
        yv = np.zeros_like(xv)
        f(xv, yv)
        want = np.exp(xv - xv.max(1, keepdims=True))
        np.testing.assert_allclose(yv, want / want.sum(1, keepdims=True), rtol=1e-5, err_msg=f"{shape}")


def test_arguments_must_agree_on_a_dim():
    n = te.var("n")
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] + 1.0, name="B")
    f = nnvm.build(te.create_schedule(b.op), [a, b], target="llvm")
    with pytest.raises(nnvm.InputError, match=r"argument B dim 0 \(n\) is 4, but an earlier argument has n"):
        f(np.zeros(3, np.float32), np.zeros(4, np.float32))


def _loops(text: str) -> list[list[str]]:
    """The top-level loops of a printed function, each as its lines."""
    out: list[list[str]] = []
    for line in text.splitlines()[1:]:
        if line.startswith("  for "):
            out.append([line])
        elif out and line.startswith("   "):
            out[-1].append(line)
    return out


def test_a_constant_split_of_a_dim_gets_an_unguarded_main_loop():
    """Loop partitioning over a symbolic extent: the main loop runs ``n // 16`` whole vectors without a
    guard, the tail keeps it; every size from one element to several vectors and a part."""
    n = te.var("n")
    a = te.placeholder((n,), name="A")
    b = te.compute((n,), lambda i: a[i] * 2.0 + 1.0, name="B")
    s = te.create_schedule(b.op)
    _, inner = s[b].split(b.op.axis[0], factor=16)
    s[b].vectorize(inner)
    text = str(nnvm.lower(s, [a, b]))
    main, tail = _loops(text)
    assert "(n // 16)" in main[0] and not any("if " in line for line in main), text
    assert any("if (((i.outer * 16) + i.inner) < n)" in line for line in tail), text
    f = nnvm.build(s, [a, b], target="llvm")
    for size in (1, 15, 16, 17, 40):
        x = np.arange(size, dtype=np.float32)
        y = np.full_like(x, np.nan)
        f(x, y)
        np.testing.assert_array_equal(y, x * 2 + 1, err_msg=f"n = {size}")


def test_a_specialised_case_runs_for_its_dim_values_only():
    """``te.Specialised``: a case for ``m == 1`` (its loops those of the static kernel: no tail) under a
    test of the dim, the general schedule for every other value; one function, the same numbers."""
    m, n, k = te.var("m"), 32, 24
    a = te.placeholder((m, k), name="A")
    w = te.placeholder((n, k), name="W")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * w[j, r], axis=r), name="C")

    def tiled(rows: int):
        s = te.create_schedule(c.op)
        io, ii = s[c].split(c.op.axis[0], factor=rows)
        jo, ji = s[c].split(c.op.axis[1], factor=16)
        s[c].reorder(io, jo, r, ii, ji)
        s[c].vectorize(ji)
        return s

    sch = te.Specialised(tiled(8), [({"m": 1}, tiled(1))])
    func = nnvm.lower(sch, [a, w, c])
    text = str(func)
    assert text.splitlines()[1].strip() == "if (m == 1):", text
    case = text.split("else:")[0]
    assert " m" not in case.split("if (m == 1):")[1] and "if " not in case.split("if (m == 1):")[1], text
    f = nnvm.build(sch, [a, w, c], target="llvm")
    rng = np.random.default_rng(4)
    wv = rng.normal(size=(n, k)).astype(np.float32)
    for rows in (1, 2, 9):
        x = rng.normal(size=(rows, k)).astype(np.float32)
        out = np.zeros((rows, n), np.float32)
        f(x, wv, out)
        np.testing.assert_allclose(out, x @ wv.T, rtol=1e-4, atol=1e-5, err_msg=f"{rows} rows")


def test_gqa_repeat_kv_and_key_transpose_divide_by_no_dim():
    """Llama's ``repeat_kv`` and the reshapes around ``K^T`` (the ops' own computes over the dims
    ``batch`` and ``past``): each reshape maps runs of axes with the same product, so the only divisions
    left are by constants (a reshape flattened whole divided by ``past`` per element: the decode step's
    key packing was 0.9 ms a layer); numbers against numpy at several sizes."""
    b, p = Dim.named("batch"), Dim.named("past")

    def apply(op, x, **attrs):
        opdef = get_op(op)
        attrs = opdef.normalize_attrs(attrs)
        types = opdef.infer_type([TensorType(shape_of(x), "float32")], attrs)
        return opdef.compute([x], attrs, types)[0]

    k = te.placeholder(shape_exprs((b, 2, p, 8)), name="K")
    x = apply("reshape", k, newshape=(b, 2, 1, p, 8))
    x = apply("broadcast_to", x, shape=(b, 2, 3, p, 8))
    x = apply("reshape", x, newshape=(b, 6, p, 8))
    x = apply("reshape", x, newshape=(b * 6, p, 8))
    x = apply("transpose", x, axes=(0, 2, 1))
    out = apply("reshape", x, newshape=(b, 6, 8, p))
    s = te.create_schedule(out.op)
    for stage in s.stages:
        if stage.op is not out.op and hasattr(stage.op, "body"):
            stage.compute_inline()
    text = str(nnvm.lower(s, [k, out]))
    body = text.split("\n", 1)[1]
    for dim in ("batch", "past"):
        assert f"// {dim}" not in body and f"% {dim}" not in body and f"// ({dim}" not in body, text
    f = nnvm.build(s, [k, out], target="llvm")
    rng = np.random.default_rng(5)
    for batch, past in ((1, 1), (1, 33), (2, 7)):
        kv = rng.normal(size=(batch, 2, past, 8)).astype(np.float32)
        got = np.zeros((batch, 6, 8, past), np.float32)
        f(kv, got)
        want = np.repeat(kv, 3, axis=1).transpose(0, 1, 3, 2)
        np.testing.assert_array_equal(got, want, err_msg=f"batch {batch}, past {past}")


def test_attention_products_have_a_one_query_row_case(build_all):
    """A decode step's ``Q @ K^T`` (``dense_packed`` by the batched, packed keys; query rows ``seq``, keys
    ``past + seq``): the packed template, for an explicit target, has a case for ``seq == 1`` whose tile
    is one row (the general program computes tiles of 8 padded query rows, 8 times a decode step's work).
    Numbers against numpy with and without the case, the keys and their blocks dims of their own (a
    built function's parameters take a single dim)."""
    from nnvm.compiler import GroupCompute
    from nnvm.cpu.schedule_dense import dense_packed_template
    from nnvm.graph.ir import Node
    from nnvm.target import parse_target

    batch, seq, past, blocks, keys = (Dim.named(d) for d in ("batch", "seq", "past", "blocks", "keys"))
    op = get_op("dense_packed")

    def group_for(k_shape, units):
        attrs = op.normalize_attrs({"units": units} if units is not None else {}, "qk")
        q_shape = (batch, 2, seq, 64)
        q = te.placeholder(shape_exprs(q_shape), "float32", "q")
        k = te.placeholder(shape_exprs(k_shape), "float32", "k")
        types = op.infer_type([TensorType(q_shape, "float32"), TensorType(k_shape, "float32")], attrs)
        (out,) = op.compute([q, k], attrs, types)
        node = Node("dense_packed", "qk", ("q", "k"), ("s",), attrs)
        return GroupCompute(0, [node], node, [("q", q), ("k", k)], [out], ["s"]), [q, k, out]

    decode, _ = group_for((batch, 2, (past + seq + 15) // 16, 64, 16), past + seq)
    template = dense_packed_template(parse_target("llvm -mcpu=znver5"), decode)
    sch = template.build(template.fallback)
    assert isinstance(sch, te.Specialised) and [values for values, _ in sch.cases] == [{"seq": 1}]
    assert template.fallback["mb"] == 8
    group, tensors = group_for((batch, 2, blocks, 64, 16), keys)
    host = dense_packed_template(parse_target("llvm"), group)
    assert [values for values, _ in host.build(host.fallback).cases] == [{"seq": 1}]
    fn = build_all([("qk", host.build(host.fallback), tensors)])["qk"]
    rng = np.random.default_rng(8)
    for b, s, n in ((1, 1, 41), (2, 1, 1), (1, 3, 32), (1, 9, 70)):
        nb = -(-n // 16)
        qv = rng.standard_normal((b, 2, s, 64)).astype(np.float32)
        kv = rng.standard_normal((b, 2, n, 64)).astype(np.float32)
        padded = np.pad(kv, [(0, 0), (0, 0), (0, 16 * nb - n), (0, 0)], mode="edge")
        packed = np.ascontiguousarray(padded.reshape(b, 2, nb, 16, 64).transpose(0, 1, 2, 4, 3))
        got = np.full((b, 2, s, n), np.nan, np.float32)
        fn(qv, packed, got)
        np.testing.assert_allclose(got, qv @ kv.transpose(0, 1, 3, 2), rtol=1e-5, atol=1e-5,
                                   err_msg=f"batch {b}, seq {s}, {n} keys")


def _shared_dense(x_shape: tuple, w_shape: tuple = (3, 64, 16)):
    """A ``dense_packed`` group of ``x_shape`` data (dims allowed) by a shared packed weight, and its
    tensors ``(x, w, out)``."""
    from nnvm.compiler import GroupCompute
    from nnvm.graph.ir import Node

    op = get_op("dense_packed")
    attrs = op.normalize_attrs({}, "fc")
    x = te.placeholder(shape_exprs(x_shape), "float32", "x")
    w = te.placeholder(w_shape, "float32", "w")
    types = op.infer_type([TensorType(x_shape, "float32"), TensorType(w_shape, "float32")], attrs)
    (out,) = op.compute([x, w], attrs, types)
    node = Node("dense_packed", "fc", ("x", "w"), ("y",), attrs)
    return GroupCompute(0, [node], node, [("x", x), ("w", w)], [out], ["y"]), (x, w, out)


def test_the_one_row_case_only_where_the_rows_are_one():
    """A shared weight's ``dense_packed`` over ``[batch, S, K]`` data: with ``S`` a dim the rows are
    ``batch * seq`` and the template carries the GEMV case for ``batch == seq == 1``; with ViT's 197
    tokens the rows at batch 1 are 197, so no case (its one-row tile made ViT-B/16's unbound module 2.3x
    its bound one at batch 1). Decided for an explicit target."""
    from nnvm.cpu.schedule_dense import dense_packed_template
    from nnvm.target import parse_target

    batch, seq = Dim.named("batch"), Dim.named("seq")

    def template_for(rows):
        group, _ = _shared_dense((batch, rows, 64))
        template = dense_packed_template(parse_target("llvm -mcpu=znver5"), group)
        return template.build(template.fallback)

    text = template_for(seq)
    assert isinstance(text, te.Specialised) and [v for v, _ in text.cases] == [{"batch": 1, "seq": 1}]
    assert not isinstance(template_for(197), te.Specialised)


@pytest.mark.parametrize("lead", [(), (1,)], ids=["seq", "1-seq"])
def test_a_partial_row_tile_keeps_its_reduction_unguarded(build_all, lead):
    """Symbolic rows of a shared weight's ``dense_packed`` run in chunks of row tiles: the chunk's guard
    (a tile inside the padded rows) bounds every store, so the loop is cut there and only the crop
    stores keep the true row count's guards. Before, a tile past the last full one (7 tokens: the only
    tile) ran its whole reduction under both guards: GPT-2's head at 7 tokens 1.5x its bound kernel.
    ``[1, seq]`` rows (a batch of one fixed, fused outside the row panels) too: the fused loop's
    ``f % panels`` kept the guard there (768 x 3072 at 7 rows 4.8x the ``[batch, seq]`` kernel).
    Numbers against numpy at row counts on and off the tile."""
    from nnvm.cpu.schedule_dense import dense_packed_template
    from nnvm.target import parse_target
    from nnvm.tir import stmt as S
    from nnvm.tir.visit import walk

    w_shape = (3, 64, 16)
    group, (x, w, out) = _shared_dense((*lead, Dim.named("seq"), 64), w_shape)
    template = dense_packed_template(parse_target("llvm -mcpu=znver5"), group)
    general = template.build(template.fallback).general  # the one-row case aside
    guarded_reductions = []

    def visit(node):
        if isinstance(node, S.For) and node.var.name == "k":
            walk(node.body, lambda n: guarded_reductions.append(n) if isinstance(n, S.IfThenElse) else None)

    walk(nnvm.lower(general, [x, w, out]).body, visit)
    assert not guarded_reductions, guarded_reductions[0]
    fn = build_all([("fc", template.build(template.fallback), [x, w, out])])["fc"]
    rng = np.random.default_rng(9)
    wv = rng.standard_normal(w_shape).astype(np.float32)
    dense_w = wv.transpose(1, 0, 2).reshape(64, 48)
    for rows in (1, 7, 8, 9, 23):
        xv = rng.standard_normal((*lead, rows, 64)).astype(np.float32)
        got = np.zeros((*lead, rows, 48), np.float32)
        fn(xv, wv, got)
        np.testing.assert_allclose(got, xv @ dense_w, rtol=1e-4, atol=1e-4, err_msg=f"{rows} rows")

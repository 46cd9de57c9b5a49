"""Groups that only move data (``schedule_injective.py``): a ShuffleNet channel shuffle between grouped
convolutions, and layout transforms, against onnxruntime; which groups the schedule takes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import group_compute, optimized_graph
from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.cpu.schedule_injective import schedule_index_remap, unblocking_block


def _shuffle_model(path, c=48, hw=7, g=3):
    """grouped 1x1 c -> c/4 + relu, channel shuffle, depthwise 3x3, grouped 1x1 -> c, residual add."""
    rng = np.random.default_rng(3)
    m = c // 4
    inits = {"w1": rng.standard_normal((m, c // g, 1, 1)).astype(np.float32) * 0.2,
             "wd": rng.standard_normal((m, 1, 3, 3)).astype(np.float32) * 0.3,
             "w2": rng.standard_normal((c, m // g, 1, 1)).astype(np.float32) * 0.2,
             "s1": np.array([1, g, m // g, hw, hw], np.int64), "s2": np.array([1, m, hw, hw], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], group=g), helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Reshape", ["r1", "s1"], ["a"]),
             helper.make_node("Transpose", ["a"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t", "s2"], ["b"]),
             helper.make_node("Conv", ["b", "wd"], ["cd"], group=m, pads=[1] * 4),
             helper.make_node("Conv", ["cd", "w2"], ["c2"], group=g),
             helper.make_node("Add", ["c2", "x"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "shuffle", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def test_channel_shuffle_matches_onnxruntime(tmp_path):
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path)
    x = np.random.default_rng(4).standard_normal((1, 48, 7, 7)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm", opt_level=3).run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"max relative error {err:.2e} against onnxruntime"


def test_only_data_movement_groups_are_taken(tmp_path, cpu_switch):
    # The shuffle chain as it is (not one channel_shuffle_nchwc, shuffle.py): what this schedule serves
    # when the pattern does not fit.
    cpu_switch("shuffle", "0")
    path = str(tmp_path / "shuffle.onnx")
    _shuffle_model(path)
    graph, tgt, *_ = optimized_graph(path, "llvm")
    by_name = {n.name: n for n in graph.nodes}
    taken = {}
    for k, names in enumerate(graph.groups):
        members = [by_name[n] for n in names]
        ops = tuple(n.op for n in members)
        taken[ops] = schedule_index_remap(tgt, group_compute(graph, k, members)) is not None
    shuffle = next(ops for ops in taken if "transpose" in ops)
    assert taken[shuffle], taken
    assert not any(v for ops, v in taken.items() if {"conv2d", "conv2d_nchwc"} & set(ops)), taken
    # The model's output leaves NCHW16c (NCHW8c with AVX2; 48 channels, whole blocks either way): the
    # block-walking transform.
    lanes = vector_lanes(tgt)
    back = [k for k, names in enumerate(graph.groups) if len(names) == 1
            and by_name[names[0]].attrs.get("src_layout") == f"NCHW{lanes}c"]
    assert back, graph.groups
    group = group_compute(graph, back[0], [by_name[graph.groups[back[0]][0]]])
    assert unblocking_block(group, [1, 48, 7, 7]) == lanes


def test_cropping_transform_walks_blocks(build_all):
    """NCHW16c with a partial last block (136 channels in 9 blocks: ShuffleNet's) back to NCHW: the
    block-walking schedule, the split guarding the last block's lanes, against numpy."""
    from nnvm import te
    from nnvm.compiler import GroupCompute
    from nnvm.graph.ir import Node, TensorType
    from nnvm.ops.registry import get_op
    from nnvm.target import parse_target

    op = get_op("layout_transform")
    for c, n in ((136, 1), (136, 3), (68, 2)):
        shape = (n, -(-c // 16), 5, 7, 16)
        attrs = {"src_layout": "NCHW16c", "dst_layout": "NCHW", "shape": (n, c, 5, 7)}
        attrs = op.normalize_attrs(attrs, "lt")
        node = Node("layout_transform", "lt", ("x",), ("y",), attrs)
        x = te.placeholder(shape, "float32", "x")
        (out,) = op.compute([x], attrs, op.infer_type([TensorType(shape, "float32")], attrs))
        group = GroupCompute(0, [node], node, [("x", x)], [out], ["y"])
        assert unblocking_block(group, [n, c, 5, 7]) == 16
        sch = schedule_index_remap(parse_target("llvm"), group)
        fn = build_all([("crop", sch, [x, out])])["crop"]
        data = np.random.default_rng(c + n).standard_normal(shape).astype(np.float32)
        got = np.full((n, c, 5, 7), np.nan, np.float32)
        fn(data, got)
        want = np.concatenate([data[:, k] for k in range(shape[1])], axis=-1)[..., :c].transpose(0, 3, 1, 2)
        np.testing.assert_array_equal(got, want)


def test_a_lone_pack_over_a_symbolic_cache_is_an_index_remap(build_all):
    """GPT-2's ``present`` value packed for ``softmax @ V`` (``batched_weight_pack`` alone in its group,
    ``[batch, 12, past, 64] -> [batch, 12, 4, past, 16]``): with symbolic dims the rows-apart nest (heads
    and blocks parallel, a loop over the cache rows, 16 lanes vectorized; the generic schedule fused every
    axis and divided by ``past`` per vector), for an explicit target; a bound pack keeps the generic
    schedule (None here). Numbers against numpy at several cache lengths."""
    from nnvm import te
    from nnvm.compiler import GroupCompute
    from nnvm.graph.dims import Dim, shape_exprs
    from nnvm.graph.ir import Node, TensorType
    from nnvm.ops.registry import get_op
    from nnvm.target import parse_target

    op = get_op("batched_weight_pack")
    attrs = op.normalize_attrs({"block": 16}, "pack")
    node = Node("batched_weight_pack", "pack", ("v",), ("p",), attrs)
    target = parse_target("llvm -mcpu=znver5")
    batch, past = Dim.named("batch"), Dim.named("past")
    for shape, symbolic in (((batch, 3, past, 64), True), ((1, 3, 40, 64), False)):
        x = te.placeholder(shape_exprs(shape), "float32", "v")
        (out,) = op.compute([x], attrs, op.infer_type([TensorType(shape, "float32")], attrs))
        group = GroupCompute(0, [node], node, [("v", x)], [out], ["p"])
        sch = schedule_index_remap(target, group)
        if not symbolic:
            assert sch is None
            continue
        text = str(nnvm.lower(sch, [x, out]))
        assert "// past" not in text and "% past" not in text, text
        assert "for i3 in range(past)" in text and "# vectorized" in text, text
        fn = build_all([("pack", schedule_index_remap(parse_target("llvm"), group), [x, out])])["pack"]
        rng = np.random.default_rng(7)
        for b, p in ((1, 1), (1, 33), (2, 5)):
            data = rng.standard_normal((b, 3, p, 64)).astype(np.float32)
            got = np.full((b, 3, 4, p, 16), np.nan, np.float32)
            fn(data, got)
            want = data.reshape(b, 3, p, 4, 16).transpose(0, 1, 3, 2, 4)
            np.testing.assert_array_equal(got, want, err_msg=f"batch {b}, past {p}")


def test_heads_merged_over_a_symbolic_seq_read_whole_rows(build_all):
    """Attention's heads merged back (``[batch, 12, seq, 64] -> [batch, seq, 768]``) over symbolic dims:
    the innermost axis split by the heads' row length, so each row of 64 is one contiguous vector copy
    (the whole 768 as one vectorized loop was a gather over ``seq`` that LLVM's loop vectorizer gave up
    on, printing "loop not vectorized"), batch and seq fused and parallel, for an explicit target; the
    numbers against numpy at several shapes."""
    from nnvm import te
    from nnvm.compiler import GroupCompute
    from nnvm.graph.dims import Dim, shape_exprs
    from nnvm.graph.ir import Node
    from nnvm.target import parse_target

    batch, seq = Dim.named("batch"), Dim.named("seq")
    x = te.placeholder(shape_exprs((batch, 12, seq, 64)), "float32", "v")
    b_, s_ = shape_exprs((batch, seq))
    out = te.compute((b_, s_, 768), lambda b, s, j: x[b, j // 64, s, j % 64], name="merged")
    node = Node("reshape", "merge", ("v",), ("m",), {})
    group = GroupCompute(0, [node], node, [("v", x)], [out], ["m"])
    text = str(nnvm.lower(schedule_index_remap(parse_target("llvm -mcpu=znver5"), group), [x, out]))
    assert "for j.inner in range(64):  # vectorized" in text and "// 64" not in text, text
    fn = build_all([("merge", schedule_index_remap(parse_target("llvm"), group), [x, out])])["merge"]
    rng = np.random.default_rng(3)
    for b, s in ((1, 1), (1, 7), (3, 33)):
        data = rng.standard_normal((b, 12, s, 64)).astype(np.float32)
        got = np.full((b, s, 768), np.nan, np.float32)
        fn(data, got)
        want = data.transpose(0, 2, 1, 3).reshape(b, s, 768)
        np.testing.assert_array_equal(got, want, err_msg=f"batch {b}, seq {s}")

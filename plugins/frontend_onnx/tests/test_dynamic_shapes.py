"""Symbolic dims (issue 39, docs/dynamic-shapes.md): one ``nnvm.compile`` with named dims or bounds, runs
at many shapes matching onnxruntime, and one sentence naming the input and the dim for a shape that does
not fit."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.dynamic import SymbolicModule
from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime
from nnvm_testing.frontend_onnx.shape_models import dynamic_encoder, dynamic_mlp

NNVM_PLUGINS = "onnx,llvm-x86"


@pytest.fixture(scope="module")
def encoder():
    model = dynamic_encoder()
    return model, nnvm.compile(model, target="llvm", bounds={"seq": (1, 256)}, tuning_log=False)


def _tokens(batch: int, seq: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    return {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "attention_mask": mask}


@pytest.mark.parametrize("batch,seq", [(1, 1), (1, 7), (4, 33), (2, 128), (8, 256), (1, 7)])
def test_encoder_compiled_once_matches_onnxruntime_at_every_shape(encoder, batch, seq):
    model, mod = encoder
    feeds = _tokens(batch, seq, seed=batch * 1000 + seq)
    (got,) = mod.run(**feeds)
    (want,) = run_onnxruntime(model, feeds)
    assert got.shape == want.shape == (batch, seq, 64)
    err = relative_error(got, want)
    assert err < 1e-4, f"encoder at (batch, seq) = ({batch}, {seq}): relative error {err:.2e}"


def test_encoder_compiles_once_into_kernels_taking_the_dims(encoder):
    """No compile per shape: every run plans memory for its binding over the same kernels and weights."""
    _, mod = encoder
    assert isinstance(mod, SymbolicModule)
    assert mod.input_shapes == {"input_ids": ("batch", "seq"), "attention_mask": ("batch", "seq")}
    stats = mod.stats()
    assert stats["symbolic"]["dims"] == {"batch": [1, None], "seq": [1, 256]}
    assert stats["symbolic"]["mode"] == "kernels", stats["symbolic"]["why_per_binding"]
    assert stats["kernels"] > 0 and stats["fused_groups"]
    one, other = mod.specialised({"batch": 1, "seq": 3}), mod.specialised({"batch": 2, "seq": 5})
    assert one.library is other.library and one.params["word"] is other.params["word"]
    assert one.plan["arena_bytes"] < other.plan["arena_bytes"]
    # the position table is sliced to seq: a requirement on seq checked at each run, the table's rows
    assert [(str(d), limit) for d, limit, _ in mod.requirements] == [("seq", 512)]


def test_the_symbolic_products_run_the_packed_template(encoder):
    """Issue 39 stage 3: every MatMul of the unbound encoder (the q, k, v projections as one product,
    ``combine_parallel_matmuls``, whose slices start their readers' kernels; the output projection, the
    feed-forward pair, attention's Q @ K^T and scores @ V) is a packed product over symbolic rows, as in a
    bound compile, not the generic schedule's matmul."""
    _, mod = encoder
    calls = mod.specialised({"batch": 2, "seq": 5}).plan["calls"]
    matmuls = [c for c in calls if c["group"][0].startswith("MatMul")
               and not c["group"][0].endswith("_slice")]
    products = {c["kernel"] for c in matmuls}
    assert len(matmuls) == 6, [c["group"] for c in calls]
    assert products and all(k.endswith("_dense_packed") for k in products), sorted(products)
    slices = [c["group"] for c in calls if any(n.endswith("_slice") for n in c["group"])]
    assert len(slices) == 3 and all(len(g) > 1 for g in slices), slices  # none a kernel alone


def test_parallel_projections_are_one_product_only_when_symbolic():
    """``combine_parallel_matmuls``, for an explicit target: the encoder's q, k, v projections (one input,
    three constant 64 x 64 weights) become one product by a 64 x 192 weight and three slices where the
    dims are symbolic; a bound compile keeps its three products."""
    from nnvm.compiler import optimized_graph
    from nnvm.frontend.convert import DimBinding, binding_dims

    model = dynamic_encoder()
    with binding_dims(DimBinding({}, symbolic=True)):
        graph, *_ = optimized_graph(model, "llvm -mcpu=znver5")
    combined = [n for n in graph.nodes if n.name.endswith("_combined")]
    # the 64 x 192 weight packed for the 16 lanes of AVX-512: 12 blocks
    assert len(combined) == 1 and graph.types[combined[0].inputs[1]].shape == (12, 64, 16), combined
    assert [n.op for n in graph.nodes if n.name.endswith("_slice")] == ["strided_slice"] * 3
    bound, *_ = optimized_graph(model, "llvm -mcpu=znver5", {"input_ids": (2, 5), "attention_mask": (2, 5)})
    assert not [n for n in bound.nodes if "_combined" in n.name]


def test_a_run_past_a_requirement_names_the_node_and_the_input():
    model = dynamic_encoder()
    mod = nnvm.compile(model, target="llvm", shapes={"input_ids": ("batch", "seq")}, tuning_log=False)
    feeds = {"input_ids": np.zeros((1, 600), np.int64), "attention_mask": np.ones((1, 600), np.int64)}
    want = (r"node Slice_6 \(Slice, opset 17\) slices axis 0 of size 512 to seq: seq must be at most 512, "
            r"and the inputs give seq = 600 \(input 'input_ids'\)")
    with pytest.raises(nnvm.InputError, match=want):
        mod.run(**feeds)


def test_a_model_the_symbolic_path_cannot_take_yet_compiles_per_binding():
    """A ``Trilu`` over a symbolic row count (its mask is built as a constant of that size): the module
    says why, and compiles each binding it runs. (A ``Range`` by 2 up to a symbolic dim, the example here
    before, now runs on the host between two compiled stages: ``test_data_dependent``.)"""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Trilu", ["x"], ["y"], upper=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    mod = nnvm.compile(model, target="llvm", shapes={"x": ("n", 3)}, tuning_log=False)
    info = mod.stats()["symbolic"]
    assert info["mode"] == "per binding"
    assert "node Trilu_0 (Trilu, opset 17): the symbolic dim n has no value" in info["why_per_binding"]
    for n in (1, 4, 5):
        x = np.random.default_rng(n).standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(mod.run(x)[0], np.triu(x))


@pytest.mark.parametrize("feeds,message", [
    ({"input_ids": np.zeros((1, 300), np.int64), "attention_mask": np.ones((1, 300), np.int64)},
     r"input 'input_ids' dim 1 \(seq\) is 300, outside its bounds \[1, 256\]"),
    ({"input_ids": np.zeros((2, 7), np.int64), "attention_mask": np.ones((2, 9), np.int64)},
     r"input 'attention_mask' dim 1 \(seq\) is 9, but input 'input_ids' has seq = 7"),
    ({"input_ids": np.zeros((3, 7), np.int64), "attention_mask": np.ones((2, 7), np.int64)},
     r"input 'attention_mask' dim 0 \(batch\) is 2, but input 'input_ids' has batch = 3"),
    ({"input_ids": np.zeros((7,), np.int64), "attention_mask": np.ones((1, 7), np.int64)},
     r"input 'input_ids' must have rank 2 \(batch, seq\), got shape \[7\]"),
    ({"input_ids": np.zeros((1, 7), np.int64)}, r"missing input 'attention_mask' \(batch, seq\)"),
])
def test_shapes_that_do_not_fit_are_one_sentence(encoder, feeds, message):
    _, mod = encoder
    with pytest.raises(nnvm.InputError, match=message):
        mod.run(**feeds)


def test_a_symbolic_module_with_an_unbounded_dim_refuses_export(encoder, tmp_path):
    """An exported module plans its memory once, for the largest binding (tests/test_symbolic_export.py)."""
    _, mod = encoder
    with pytest.raises(nnvm.Error, match=r"symbolic dims \(batch, seq\), and 'batch' has no upper bound"):
        mod.export(tmp_path / "m.so")


def test_mlp_with_a_symbolic_batch():
    """``shapes=`` naming the batch keeps it symbolic; static dims are still checked."""
    model = dynamic_mlp()
    mod = nnvm.compile(model, target="llvm", shapes={"x": ("N", 32)}, tuning_log=False)
    rng = np.random.default_rng(3)
    for batch in (1, 3, 8):
        x = rng.normal(size=(batch, 32)).astype(np.float32)
        (got,) = mod.run(x)
        (want,) = run_onnxruntime(model, {"x": x})
        assert got.shape == (batch, 10)
        assert relative_error(got, want) < 1e-5, f"batch {batch}"
    assert mod.stats()["symbolic"]["mode"] == "kernels"
    with pytest.raises(nnvm.InputError, match=r"input 'x' dim 1 must be 32 \(N, 32\), got 31"):
        mod.run(np.zeros((2, 31), np.float32))


def test_inputs_read_and_outputs_written_in_place_are_the_callers():
    """A symbolic run points the kernels at the caller's inputs and at fresh output arrays (no copy
    through the arena): an input is never written (an elementwise op on it computes into a buffer of
    its own), an output that is an input itself stays a copy through the arena, and two runs' outputs
    never share memory; numbers against onnxruntime."""
    from onnx import TensorProto, helper

    n = helper.make_node
    graph = helper.make_graph(
        [n("Relu", ["b"], ["r"]), n("Add", ["r", "x"], ["y"]), n("Identity", ["x"], ["same"])], "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, ["N", 16]) for k in ("x", "b")],
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, ["N", 16]) for k in ("y", "same")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    mod = nnvm.compile(model, target="llvm", shapes={"x": ("N", 16), "b": ("N", 16)}, tuning_log=False)
    rng = np.random.default_rng(6)
    runs = []
    for batch in (3, 1, 3):
        feeds = {k: rng.normal(size=(batch, 16)).astype(np.float32) for k in ("x", "b")}
        kept = {k: v.copy() for k, v in feeds.items()}
        got = mod.run(**feeds)
        in_place = {d["name"] for d in mod.plan["inputs"] + mod.plan["outputs"] if "uses" in d}
        assert in_place == {"b", "y"}, in_place  # x is also the output "same": one storage, copied
        for k in feeds:
            np.testing.assert_array_equal(feeds[k], kept[k], err_msg=f"input {k} was written")
        want = run_onnxruntime(model, kept)
        for g, w in zip(got, want):
            assert g.shape == w.shape and relative_error(g, w) < 1e-6
            assert not any(np.shares_memory(g, v) for v in feeds.values())
        runs.append(got)
    assert not any(np.shares_memory(a, b) for a in runs[0] for b in runs[2])


def test_a_large_output_written_in_place_reuses_a_dropped_buffer():
    """An output of a megabyte or more is written into a buffer an earlier run handed out once nothing
    holds it (a fresh one is page-faulted in by the kernel's stores), never into one still held."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    mod = nnvm.compile(model, target="llvm", shapes={"x": ("N", 64)}, tuning_log=False)
    rng = np.random.default_rng(9)
    # 1.3 MB outputs, one plan (the bucket of 5056 rows) for the three runs
    xs = [rng.normal(size=(n, 64)).astype(np.float32) for n in (5000, 5040, 5000)]
    (a,) = mod.run(xs[0])
    (b,) = mod.run(xs[1])
    assert mod.plan["dims"] == {"N": 5056} and "uses" in mod.plan["outputs"][0]
    assert not np.shares_memory(a, b)
    where = a.ctypes.data
    want = [run_onnxruntime(model, {"x": x})[0] for x in xs]
    np.testing.assert_array_equal(a, want[0])
    del a
    (c,) = mod.run(xs[2])
    assert c.ctypes.data == where and not np.shares_memory(b, c)
    np.testing.assert_array_equal(b, want[1])
    np.testing.assert_array_equal(c, want[2])


def test_without_names_or_bounds_the_compile_stays_bound():
    """The default is what it always was: a batch-named dim becomes 1, a plain Module."""
    mod = nnvm.compile(dynamic_mlp(), target="llvm", tuning_log=False)
    assert not isinstance(mod, SymbolicModule)
    assert mod.run(np.zeros((1, 32), np.float32))[0].shape == (1, 10)
    with pytest.raises(nnvm.InputError, match="must have shape"):
        mod.run(np.zeros((2, 32), np.float32))


def test_a_model_whose_dims_cannot_be_bound_compiles_symbolic():
    """``seq`` has no default (it was an error): the model's own dim_params are kept, unbounded."""
    mod = nnvm.compile(dynamic_encoder(), target="llvm", tuning_log=False)
    assert isinstance(mod, SymbolicModule) and mod.bounds == {"batch": (1, None), "seq": (1, None)}
    assert mod.run(**_tokens(3, 5, seed=0))[0].shape == (3, 5, 64)


def test_bounds_errors_name_the_dim():
    with pytest.raises(nnvm.InputError, match=r"bounds= names 'sq', which is no symbolic dim of the model's "
                                              r"inputs \(dims: batch, seq\)"):
        nnvm.compile(dynamic_encoder(), target="llvm", bounds={"sq": (1, 8)}, tuning_log=False)
    with pytest.raises(nnvm.InputError, match=r"dim 'seq' the empty or negative range \[4, 2\]"):
        nnvm.compile(dynamic_encoder(), target="llvm", bounds={"seq": (4, 2)}, tuning_log=False)


def _graph_model(nodes, inputs: dict, output: str, consts: dict):
    """A one-output ONNX model of ``nodes``: float inputs by name and shape, int64 constants."""
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    graph = helper.make_graph(
        [helper.make_node(op, ins, outs, **attrs) for op, ins, outs, attrs in nodes], "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, s) for k, s in inputs.items()],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compiled_symbolic(model, shapes: dict):
    mod = nnvm.compile(model, target="llvm", shapes=shapes, tuning_log=False)
    info = mod.stats()["symbolic"]
    assert info["mode"] == "kernels", info["why_per_binding"]
    return mod


def test_tile_by_a_symbolic_batch_matches_onnxruntime():
    """DeBERTa's relative-position table, one copy per batch entry: ``Tile`` whose repeats come from the
    input's shape stays symbolic (a dim rep), no compile per binding."""
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    model = _graph_model([
        ("Shape", ["x"], ["s"], {"end": 1}), ("Concat", ["s", "one"], ["reps"], {"axis": 0}),
        ("Tile", ["table", "reps"], ["tiled"], {}), ("Add", ["tiled", "bias"], ["y"], {}),
    ], {"x": ["batch", 5]}, "y", {"one": np.array([1], np.int64), "table": table,
                                  "bias": np.float32([[0.5, -1.0, 2.0]])})
    mod = _compiled_symbolic(model, {"x": ("batch", 5)})
    for batch in (1, 3, 8):
        feeds = {"x": np.zeros((batch, 5), np.float32)}
        (got,), (want,) = mod.run(**feeds), run_onnxruntime(model, feeds)
        assert got.shape == want.shape == (2 * batch, 3)
        np.testing.assert_array_equal(got, want)


def test_a_constant_slice_end_over_a_symbolic_axis_is_required_at_each_run(tmp_path):
    """``positions[:, :1]`` over a symbolic ``seq`` (GPT-2's dynamo export): the slice keeps one column,
    and an axis too short for the constant end is one sentence naming the node, not a shorter answer;
    the exported module checks it too."""
    model = _graph_model([("Slice", ["x", "zero", "two", "one"], ["y"], {})], {"x": ["batch", "seq"]}, "y",
                         {"zero": np.array([0], np.int64), "two": np.array([2], np.int64),
                          "one": np.array([1], np.int64)})
    mod = _compiled_symbolic(model, {"x": ("batch", "seq")})
    for batch, seq in ((1, 2), (3, 7)):
        feeds = {"x": np.random.default_rng(seq).standard_normal((batch, seq)).astype(np.float32)}
        (got,), (want,) = mod.run(**feeds), run_onnxruntime(model, feeds)
        np.testing.assert_array_equal(got, want)
    want = (r"node Slice_0 \(Slice, opset 17\) slices axis 1 of size seq to 2: 2 must be at most 1, and the "
            r"inputs give seq = 1 \(input 'x'\)")
    with pytest.raises(nnvm.InputError, match=want):
        mod.run(x=np.zeros((2, 1), np.float32))
    bounded = nnvm.compile(model, target="llvm", shapes={"x": ("batch", "seq")}, tuning_log=False,
                           bounds={"batch": (1, 4), "seq": (1, 16)})  # an export plans for the largest
    bounded.export(tmp_path / "slice.so")
    loaded = nnvm.load(tmp_path / "slice.so")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(loaded.run(x=x)[0], x[:, :2])
    with pytest.raises(nnvm.InputError, match=want):
        loaded.run(x=np.zeros((2, 1), np.float32))


def test_gather_nd_of_indices_built_from_the_shape_matches_onnxruntime():
    """The padding mask transformers' vmapped mask code exports under torch.export: ``GatherND`` of
    ``mask[b, k]`` at indices made of ``Range`` over the dims, expanded to ``[batch, seq, 2]``; its strides
    are the dims themselves (values computed at each run)."""
    model = _graph_model([
        ("Shape", ["m"], ["s"], {}), ("Gather", ["s", "i0"], ["b"], {"axis": 0}),
        ("Gather", ["s", "i1"], ["n"], {"axis": 0}),
        ("Range", ["i0", "b", "i1"], ["rb"], {}), ("Range", ["i0", "n", "i1"], ["rs"], {}),
        ("Unsqueeze", ["rb", "ax1"], ["ub"], {}), ("Unsqueeze", ["rs", "ax0"], ["us"], {}),
        ("Add", ["ub", "us"], ["grid"], {}), ("Shape", ["grid"], ["gs"], {}),
        ("Expand", ["ub", "gs"], ["eb"], {}), ("Expand", ["us", "gs"], ["es"], {}),
        ("Unsqueeze", ["eb", "last"], ["ib"], {}), ("Unsqueeze", ["es", "last"], ["is"], {}),
        ("Concat", ["ib", "is"], ["idx"], {"axis": -1}), ("GatherND", ["m", "idx"], ["y"], {}),
    ], {"m": ["batch", "seq"]}, "y", {"i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
                                      "ax0": np.array([0], np.int64), "ax1": np.array([1], np.int64),
                                      "last": np.array([-1], np.int64)})
    mod = _compiled_symbolic(model, {"m": ("batch", "seq")})
    for batch, seq in ((1, 1), (2, 5), (4, 33)):
        feeds = {"m": np.random.default_rng(seq).standard_normal((batch, seq)).astype(np.float32)}
        (got,), (want,) = mod.run(**feeds), run_onnxruntime(model, feeds)
        assert got.shape == want.shape == (batch, seq)
        np.testing.assert_array_equal(got, want)

"""Data-dependent output shapes (issue 39, docs/dynamic-shapes.md): a model whose NonZero input, TopK k,
Range bounds, Compress condition or Unique input is computed at run time compiles ONCE (cut into stages
at that node, ``nnvm.staged``) and matches onnxruntime on inputs whose output lengths differ."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import nnvm
from nnvm.errors import Error, InputError
from nnvm.staged import StagedModule
from nnvm_testing.frontend_onnx import shape_models
from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime

NNVM_PLUGINS = "onnx,llvm-x86"


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "datadep", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _check(mod, model, feeds, what):
    got = mod.run(**feeds)
    want = run_onnxruntime(model, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{what}, output {k}: shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype, f"{what}, output {k}: dtype {g.dtype}, onnxruntime {w.dtype}"
        if np.issubdtype(w.dtype, np.floating):
            assert relative_error(g, w) < 1e-5, f"{what}, output {k}: relative error {relative_error(g, w)}"
        else:
            assert np.array_equal(g, w), f"{what}, output {k}: {g} != {w}"
    return got


@pytest.fixture(scope="module")
def mask_select():
    model = shape_models.mask_select()
    return model, nnvm.compile(model, target="llvm", bounds={"count": (1, 64)}, tuning_log=False)


@pytest.mark.parametrize("n,seed", [(5, 1), (17, 2), (40, 3), (17, 4), (3, 5)])
def test_mask_nonzero_gather_compiled_once(mask_select, n, seed):
    model, mod = mask_select
    rng = np.random.default_rng(seed)
    feeds = {"boxes": rng.standard_normal((n, 4)).astype(np.float32),
             "scores": rng.random(n).astype(np.float32)}
    if seed == 5:
        feeds["scores"][:] = 0.1  # nothing selected: an empty selection
    _check(mod, model, feeds, f"n={n}")


def test_mask_select_stats_say_what_was_staged(mask_select):
    model, mod = mask_select
    assert isinstance(mod, StagedModule)
    rng = np.random.default_rng(7)
    scores = rng.random(20).astype(np.float32)
    mod.run(boxes=rng.standard_normal((20, 4)).astype(np.float32), scores=scores)
    sym = mod.stats()["symbolic"]
    assert sym["mode"] == "stages"
    assert sym["dims"]["nonzero_0"] == [0, 64]  # bounded by the input's size at its bound
    kinds = [s["kind"] for s in sym["stages"]]
    assert kinds == ["compiled", "host", "compiled"]
    host = sym["stages"][1]
    assert (host["op"], host["dim"], host["last"]) == ("NonZero", "nonzero_0", int((scores > 0.5).sum()))
    assert sym["stages"][2]["mode"] == "kernels"  # the rest: one compile over n and nonzero_0
    assert set(sym["stages"][2]["dims"]) == {"count", "nonzero_0"}


def test_a_staged_module_runs_from_several_threads_at_once(mask_select):
    """``mod.run`` is safe from several threads: each run's values live in that run alone."""
    from concurrent.futures import ThreadPoolExecutor

    model, mod = mask_select
    cases = [(n, seed) for n, seed in zip((3, 9, 30, 64, 12, 50, 7, 21), range(10, 18))]

    def one(case):
        n, seed = case
        rng = np.random.default_rng(seed)
        feeds = {"boxes": rng.standard_normal((n, 4)).astype(np.float32),
                 "scores": rng.random(n).astype(np.float32)}
        return feeds, mod.run(**feeds)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, cases))
    for feeds, got in results:
        for g, w in zip(got, run_onnxruntime(model, feeds)):
            assert g.shape == w.shape and relative_error(g, w) < 1e-5


def test_a_staged_module_exports_and_loads_back_bit_equal(mask_select, tmp_path):
    """The export (``nnvm.runtime.staged_file``) loaded in this process; tests/test_staged_export.py loads
    it with the core alone and checks every staged operator against onnxruntime."""
    model, mod = mask_select
    mod.export(str(tmp_path / "m.so"))
    loaded = nnvm.load(str(tmp_path / "m.so"))
    rng = np.random.default_rng(7)
    feeds = {"boxes": rng.standard_normal((31, 4)).astype(np.float32),
             "scores": rng.random(31).astype(np.float32)}
    for g, m in zip(loaded.run(**feeds), _check(mod, model, feeds, "n=31")):
        assert g.shape == m.shape and g.dtype == m.dtype and np.array_equal(g, m)


def topk_min_shape_model():
    """TopK with k = min(seq, 5), computed from the input's shape, as exported generation code does."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["seq"]),
        helper.make_node("Min", ["seq", "five"], ["k"]),
        helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=1),
        helper.make_node("Mul", ["values", "two"], ["doubled"]),
    ]
    inits = [helper.make_tensor("one", T.INT64, [1], [1]), helper.make_tensor("five", T.INT64, [1], [5]),
             helper.make_tensor("two", T.FLOAT, [], [2.0])]
    return _model(nodes, [_vi("x", T.FLOAT, ["batch", "seq"])],
                  [_vi("doubled", T.FLOAT, None), _vi("indices", T.INT64, None)], inits)


def test_topk_with_k_from_min_of_shape():
    model = topk_min_shape_model()
    mod = nnvm.compile(model, target="llvm", bounds={"seq": (1, 32)}, tuning_log=False)
    for batch, seq in [(1, 2), (3, 4), (2, 9), (1, 32)]:
        rng = np.random.default_rng(batch * 100 + seq)
        x = rng.standard_normal((batch, seq)).astype(np.float32)
        got = _check(mod, model, {"x": x}, f"(batch, seq) = ({batch}, {seq})")
        assert got[0].shape == (batch, min(seq, 5))


def topk_input_model(largest: int):
    nodes = [helper.make_node("Neg", ["x"], ["y"]),
             helper.make_node("TopK", ["y", "k"], ["values", "indices"], axis=0, largest=largest),
             helper.make_node("Add", ["values", "values"], ["twice"])]
    return _model(nodes, [_vi("x", T.FLOAT, [10, 3]), _vi("k", T.INT64, [1])],
                  [_vi("twice", T.FLOAT, None), _vi("indices", T.INT64, None)])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk_with_k_a_graph_input(largest):
    model = topk_input_model(largest)
    mod = nnvm.compile(model, target="llvm", tuning_log=False)
    rng = np.random.default_rng(largest)
    x = rng.standard_normal((10, 3)).astype(np.float32)
    x[4] = x[7]  # ties go to the lower index
    for k in (1, 4, 10, 0):
        _check(mod, model, {"x": x, "k": np.array([k], np.int64)}, f"k={k}")
    with pytest.raises(InputError, match=r"^node TopK_1 \(TopK\): k = 11 is outside \[0, 10\], the length of "
                                         r"axis 0$"):
        mod.run(x=x, k=np.array([11], np.int64))


def range_model(elem):
    nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Mul", ["r", "r"], ["squared"]),
             helper.make_node("Add", ["squared", "r"], ["out"])]
    return _model(nodes, [_vi("start", elem, []), _vi("limit", elem, []), _vi("delta", elem, [])],
                  [_vi("out", elem, None)])


@pytest.mark.parametrize("elem,dtype", [(T.FLOAT, np.float32), (T.INT64, np.int64)])
def test_range_over_run_time_bounds(elem, dtype):
    model = range_model(elem)
    mod = nnvm.compile(model, target="llvm", tuning_log=False)
    cases = [(0, 10, 1), (3, -4, -2), (-2.5, 7, 1.5), (5, 5, 1), (1, 30, 7), (4, 9, -1)]
    for start, limit, delta in cases:
        feeds = {k: np.array(v, dtype) for k, v in zip(("start", "limit", "delta"), (start, limit, delta))}
        _check(mod, model, feeds, f"Range({start}, {limit}, {delta})")
    with pytest.raises(InputError, match=r"^node Range_0 \(Range\): delta is 0$"):
        mod.run(start=np.array(0, dtype), limit=np.array(3, dtype), delta=np.array(0, dtype))


def test_range_length_beyond_a_user_bound_is_one_sentence():
    model = range_model(T.INT64)
    mod = nnvm.compile(model, target="llvm", bounds={"range_0": (0, 16)}, tuning_log=False)
    feeds = {"start": np.array(0, np.int64), "limit": np.array(16, np.int64), "delta": np.array(1, np.int64)}
    _check(mod, model, feeds, "16 elements")
    assert mod.stats()["symbolic"]["dims"]["range_0"] == [0, 16]
    with pytest.raises(InputError, match=r"^node Range_0 \(Range\) gives range_0 = 17, outside its bounds "
                                         r"\[0, 16\]$"):
        mod.run(start=np.array(0, np.int64), limit=np.array(17, np.int64), delta=np.array(1, np.int64))


def compress_unique_model():
    """Compress by a computed condition, and Unique of a computed tensor, each feeding arithmetic."""
    nodes = [
        helper.make_node("Greater", ["c", "zero"], ["cond"]),
        helper.make_node("Compress", ["x", "cond"], ["kept"], axis=0),
        helper.make_node("Relu", ["kept"], ["kept_relu"]),
        helper.make_node("Add", ["ids", "ids"], ["ids2"]),
        helper.make_node("Unique", ["ids2"], ["u", "first", "inverse", "counts"], sorted=1),
        helper.make_node("Mul", ["u", "counts"], ["weighted"]),
    ]
    inits = [helper.make_tensor("zero", T.FLOAT, [], [0.0])]
    return _model(nodes, [_vi("x", T.FLOAT, [8, 3]), _vi("c", T.FLOAT, [8]), _vi("ids", T.INT64, [12])],
                  [_vi("kept_relu", T.FLOAT, None), _vi("weighted", T.INT64, None),
                   _vi("first", T.INT64, None), _vi("inverse", T.INT64, None)], inits)


def test_compress_and_unique_chained_stages():
    """Two data-dependent nodes: the rest after the first is cut again at the second."""
    model = compress_unique_model()
    mod = nnvm.compile(model, target="llvm", tuning_log=False)
    for seed in range(4):
        rng = np.random.default_rng(seed)
        feeds = {"x": rng.standard_normal((8, 3)).astype(np.float32),
                 "c": rng.standard_normal(8).astype(np.float32),
                 "ids": rng.integers(0, 3 + 3 * seed, 12).astype(np.int64)}
        _check(mod, model, feeds, f"seed {seed}")
    sym = mod.stats()["symbolic"]
    assert set(sym["dims"]) == {"compress_0", "unique_0"}
    assert [s["op"] for s in _host_stages(sym["stages"])] == ["Compress", "Unique"]


def _host_stages(stages):
    for s in stages:
        if s["kind"] == "host":
            yield s
        yield from _host_stages(s.get("stages", []))


STAGED_NODE_CASES = [
    "test_compress_0", "test_compress_1", "test_compress_default_axis", "test_compress_negative_axis",
    "test_nonzero_example", "test_range_float_type_positive_delta", "test_range_int32_type_negative_delta",
    "test_range_float16_type_positive_delta", "test_top_k", "test_top_k_negative_axis",
    "test_top_k_same_values", "test_top_k_same_values_2d", "test_top_k_same_values_largest",
    "test_top_k_smallest", "test_top_k_uint64", "test_unique_length_1", "test_unique_not_sorted_without_axis",
    "test_unique_sorted_with_axis", "test_unique_sorted_with_axis_3d",
    "test_unique_sorted_with_negative_axis", "test_unique_sorted_without_axis",
]


@pytest.mark.parametrize("name", STAGED_NODE_CASES)
def test_onnx_node_cases_with_every_input_at_run_time(name):
    """ONNX's node cases for these operators through ``nnvm.compile`` with no input specialized on (the
    backend runner specializes): the deciding input is a graph input, so the node runs between stages;
    checked against the case's expected outputs."""
    from nnvm_testing.frontend_onnx import node_cases

    model, sets, rtol, atol = node_cases.load_case(name)
    mod = nnvm.compile(model, target="llvm", tuning_log=False)
    assert isinstance(mod, StagedModule)
    names = [vi.name for vi in model.graph.input]
    for inputs, expected in sets:
        got = mod.run(**dict(zip(names, inputs)))
        for k, (g, w) in enumerate(zip(got, expected)):
            assert g.shape == w.shape and g.dtype == w.dtype, f"{name} output {k}: {g.shape} {g.dtype}, " \
                                                              f"expected {w.shape} {w.dtype}"
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name} output {k}")


def test_range_by_two_up_to_a_symbolic_dim_is_one_compile():
    """``Range(0, n, 2)`` with ``n`` from ``Shape``: its length is no dim expression the ``arange`` op
    takes (before, a compile per binding); now stage 1 computes ``n``, the host the range."""
    from onnx import numpy_helper

    consts = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("i0", 0), ("two", 2))]
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "i0"], ["n"]),
             helper.make_node("Range", ["i0", "n", "two"], ["r"]),
             helper.make_node("Cast", ["r"], ["y"], to=1)]
    model = _model(nodes, [_vi("x", T.FLOAT, ["n", 3])], [_vi("y", T.FLOAT, [None])], consts)
    mod = nnvm.compile(model, target="llvm", shapes={"x": ("n", 3)}, tuning_log=False)
    assert mod.stats()["symbolic"]["mode"] == "stages"
    for n in (1, 4, 5):
        _check(mod, model, {"x": np.zeros((n, 3), np.float32)}, f"n={n}")


def test_a_data_dependent_node_inside_a_subgraph_is_one_sentence():
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["a"])], "then", [],
                             [_vi("a", T.INT64, None)])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["nx"]),
                               helper.make_node("NonZero", ["nx"], ["b"])], "else", [],
                              [_vi("b", T.INT64, None)])
    model = _model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                   [_vi("x", T.FLOAT, [4]), _vi("c", T.BOOL, [])], [_vi("y", T.INT64, None)])
    with pytest.raises(Error, match=r"^node If_0/then/NonZero_0 \(NonZero, opset 17\): the input is computed "
                                    r"at run time \(its values decide the output shape\); it lies inside a "
                                    r"subgraph, where the model cannot be cut into stages$"):
        nnvm.compile(model, target="llvm", tuning_log=False)


def test_host_topk_matches_onnxruntime_on_ties_ranks_and_dtypes():
    """The host TopK (a partition, then a sort of k) against onnxruntime on seeded random cases full of
    ties: every rank, axis, k (0 to the axis length), largest or smallest, four dtypes."""
    from nnvm.runtime.host_ops import topk

    rng = np.random.default_rng(39)
    for trial in range(80):
        shape = tuple(int(d) for d in rng.integers(1, 7, rng.integers(1, 4)))
        axis = int(rng.integers(0, len(shape)))
        k, largest = int(rng.integers(0, shape[axis] + 1)), int(rng.integers(0, 2))
        dtype = [np.float32, np.int64, np.int32, np.uint8][trial % 4]
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        x = rng.integers(0, 4, shape).astype(dtype)
        model = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
                       [_vi("x", elem, shape), _vi("k", T.INT64, [1])],
                       [_vi("v", elem, None), _vi("i", T.INT64, None)])
        want = run_onnxruntime(model, {"x": x, "k": np.array([k], np.int64)})
        got = topk(x, k, axis, bool(largest))
        for g, w in zip(got, want):
            assert np.array_equal(g, w), f"TopK of {x} along {axis}, k={k}, largest={largest}: {g} != {w}"


def _topk_model(shape, elem, axis, largest):
    return _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)],
                  [_vi("x", elem, list(shape)), _vi("k", T.INT64, [1])],
                  [_vi("v", elem, None), _vi("i", T.INT64, None)])


def test_host_topk_screened_long_rows_match_onnxruntime():
    """Long rows (at least 8k keys: the screen by folded group minima, then a sort of the candidates)
    against onnxruntime: ties everywhere (a few distinct values), signed zeros, one row or many, the last
    axis or another, four dtypes, k from 1 to an eighth of the axis."""
    from nnvm.runtime.host_ops import topk

    rng = np.random.default_rng(24)
    for trial in range(24):
        n = int(rng.integers(40, 700))
        rows = [1, 1, 3, 17][trial % 4]
        axis = int(rng.integers(0, 2)) if trial % 3 == 0 else 1
        shape = (rows, n) if axis == 1 else (n, rows)
        k, largest = int(rng.integers(1, n // 8 + 1)), int(rng.integers(0, 2))
        dtype = [np.float32, np.int64, np.int32, np.uint8][trial % 4]
        x = rng.integers(0, [3, 9, 200][trial % 3], shape).astype(dtype)
        if dtype == np.float32:
            x *= np.where(rng.random(shape) < 0.5, -1, 1).astype(np.float32)  # -0.0 ties 0.0
        model = _topk_model(shape, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), axis, largest)
        want = run_onnxruntime(model, {"x": x, "k": np.array([k], np.int64)})
        got = topk(x, k, axis, bool(largest))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w), f"TopK of {shape} along {axis}, k={k}, " \
                                                               f"largest={largest}, {dtype.__name__}"


def test_host_topk_k_zero_and_a_row_with_nan():
    """k = 0 gives empty outputs as onnxruntime does; a row holding a NaN (which the screen cannot order)
    is answered by the partition, NaN last as numpy's stable sort puts it (onnxruntime's own order of NaN
    differs run to run of its heap and is no reference)."""
    from nnvm.runtime.host_ops import topk

    x = np.random.default_rng(5).standard_normal((2, 64)).astype(np.float32)
    want = run_onnxruntime(_topk_model(x.shape, T.FLOAT, 1, 1), {"x": x, "k": np.array([0], np.int64)})
    for g, w in zip(topk(x, 0, 1, True), want):
        assert g.shape == w.shape == (2, 0) and g.dtype == w.dtype
    x[1, [3, 40]] = np.nan
    for largest in (True, False):
        values, index = topk(x, 6, 1, largest)
        order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :6]
        assert np.array_equal(index, order) and np.array_equal(values, np.take_along_axis(x, order, 1))


def test_host_nonzero_matches_onnxruntime_ranks_empty_and_scalar():
    """The host NonZero (flat positions divided down per axis from 1025 elements) against onnxruntime:
    ranks 0 to 5, small and large, all zeros, a dim of size 0, four dtypes, NaN counted as nonzero and
    -0.0 as zero."""
    from nnvm.runtime.host_ops import nonzero

    rng = np.random.default_rng(11)
    cases = [np.float32(0), np.float32(2), np.zeros((3, 4), np.float32), np.ones((2, 0, 3), np.int64),
             np.array([0.0, -0.0, np.nan, 1.0], np.float32), np.zeros((1, 3, 24, 24), bool),
             rng.random((1, 3, 24, 24)) < 0.3,
             (rng.random((7, 40, 9)) * (rng.random((7, 40, 9)) < 0.5)).astype(np.float32)]
    for trial in range(12):
        shape = tuple(int(d) for d in rng.integers(1, 6, trial % 5 + 1))
        values = rng.integers(0, 3, shape) * (rng.random(shape) < 0.4)
        cases.append(values.astype([np.float32, np.int64, np.uint8, bool][trial % 4]))
    for x in cases:
        x = np.asarray(x)
        elem = helper.np_dtype_to_tensor_dtype(x.dtype)
        model = _model([helper.make_node("NonZero", ["x"], ["y"])], [_vi("x", elem, list(x.shape))],
                       [_vi("y", T.INT64, None)])
        want = run_onnxruntime(model, {"x": x})[0]
        got = nonzero(x)
        assert got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want), x.shape


def test_a_bound_naming_no_dim_is_one_sentence():
    with pytest.raises(InputError, match=r"^bounds= names 'bogus', which is no symbolic dim of the model's "
                                         r"inputs \(dims: count, nonzero_0\)$"):
        nnvm.compile(shape_models.mask_select(), target="llvm", bounds={"bogus": (1, 4)}, tuning_log=False)
    alone = _model([helper.make_node("NonZero", ["x"], ["nz"])], [_vi("x", T.FLOAT, [3, 4])],
                   [_vi("nz", T.INT64, None)])  # nothing after the node
    with pytest.raises(InputError, match=r"^bounds= names 'bogus', which is no dim of the model \(dims: "
                                         r"nonzero_0\)$"):
        nnvm.compile(alone, target="llvm", bounds={"bogus": (1, 4)}, tuning_log=False)

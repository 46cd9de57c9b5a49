"""One ONNX node at a time, compared with onnxruntime: the converters whose semantics are easy to get wrong.

Each case builds a single-node model (``testing.check.single_node_model``); inputs listed as
constants become initializers, as shape-deciding inputs are in real models.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm_frontend_onnx import load_onnx
from nnvm_testing.frontend_onnx.check import assert_matches_onnxruntime, single_node_model

I64_MAX = np.iinfo(np.int64).max


def randn(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def check(op_type, inputs, attrs=None, *, constants=(), opset=13, n_outputs=1, rtol=1e-5):
    model = single_node_model(op_type, inputs, attrs, constants=constants, opset=opset, n_outputs=n_outputs)
    feeds = {name: np.asarray(v) for name, v in inputs if name and name not in constants}
    return assert_matches_onnxruntime(model, feeds, rtol=rtol)


def ints(*values):
    return np.array(values, dtype=np.int64)


# -- convolution and pooling ------------------------------------------------------------------------
@pytest.mark.parametrize("attrs", [
    {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"auto_pad": "SAME_UPPER", "kernel_shape": [3, 3]},
    {"auto_pad": "VALID", "strides": [2, 1]},
    {"auto_pad": "NOTSET", "pads": [1, 0, 2, 1]},
    {"pads": [1, 2, 1, 2], "strides": [2, 3], "dilations": [1, 2]},
])
def test_conv_padding(attrs):
    check("Conv", [("x", randn(1, 3, 9, 10)), ("w", randn(4, 3, 3, 3, seed=1))], attrs, constants={"w"})


def test_conv_groups_and_bias():
    check("Conv", [("x", randn(2, 6, 8, 8)), ("w", randn(9, 2, 3, 3, seed=1)), ("b", randn(9, seed=2))],
          {"group": 3, "pads": [1, 1, 1, 1]}, constants={"w", "b"})


def test_depthwise_conv_same_upper():
    check("Conv", [("x", randn(1, 8, 7, 7)), ("w", randn(8, 1, 3, 3, seed=1))],
          {"group": 8, "auto_pad": "SAME_UPPER", "strides": [2, 2]}, constants={"w"})


def test_conv_1d():
    check("Conv", [("x", randn(2, 3, 11)), ("w", randn(5, 3, 3, seed=1)), ("b", randn(5, seed=2))],
          {"pads": [2, 1], "strides": [2]}, constants={"w", "b"})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
    {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
    {"kernel_shape": [2, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [3, 3], "pads": [0, 1, 2, 1], "count_include_pad": 1},
])
def test_pool(op, attrs):
    if op == "MaxPool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    check(op, [("x", randn(1, 2, 8, 9))], attrs)


def test_max_pool_dilations_and_1d():
    check("MaxPool", [("x", randn(1, 2, 9, 9))], {"kernel_shape": [2, 2], "dilations": [2, 2]})
    check("AveragePool", [("x", randn(1, 2, 9))], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (2, 3, 7)])
def test_global_pool(op, shape):
    check(op, [("x", randn(*shape))])


# -- dense ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [(5,), (3, 5), (1, 5), ()])
def test_gemm_flags(trans_a, trans_b, c_shape):
    a = randn(*((4, 3) if trans_a else (3, 4)))
    b = randn(*((5, 4) if trans_b else (4, 5)), seed=1)
    check("Gemm", [("a", a), ("b", b), ("c", randn(*c_shape, seed=2))],
          {"transA": trans_a, "transB": trans_b, "alpha": 0.5, "beta": 2.0}, constants={"b", "c"})


def test_gemm_runtime_weight_no_bias():
    check("Gemm", [("a", randn(3, 4)), ("b", randn(4, 6, seed=1))], {"alpha": 1.5}, opset=11)


@pytest.mark.parametrize("shapes", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)),
                                    ((4,), (4, 3))])
def test_matmul(shapes):
    check("MatMul", [("a", randn(*shapes[0])), ("b", randn(*shapes[1], seed=1))])


# -- softmax ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2])
def test_softmax_opset_semantics(op, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    check(op, [("x", randn(2, 3, 4, 5))], attrs, opset=opset)


def test_softmax_opset11_coerces_to_2d():
    """Before opset 13, Softmax on axis 1 of a 4-D input normalizes over all trailing dimensions."""
    x = randn(2, 3, 4, 5)
    (got,) = check("Softmax", [("x", x)], {"axis": 1}, opset=11)
    assert np.allclose(got.reshape(2, -1).sum(axis=1), 1.0, atol=1e-5)


# -- normalization ----------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_normalization(opset):
    c = 4
    stats = [("scale", np.linspace(0.5, 1.5, c, dtype=np.float32)), ("bias", randn(c, seed=1)),
             ("mean", randn(c, seed=2)), ("var", np.linspace(0.2, 2.0, c, dtype=np.float32))]
    check("BatchNormalization", [("x", randn(2, c, 5, 5))] + stats, {"epsilon": 1e-3}, opset=opset,
          constants={"scale", "bias", "mean", "var"})


def test_batch_normalization_2d_runtime_stats():
    c = 6
    check("BatchNormalization", [("x", randn(3, c)), ("scale", randn(c, seed=1)), ("bias", randn(c, seed=2)),
                                 ("mean", randn(c, seed=3)), ("var", np.abs(randn(c, seed=4)) + 0.5)])


@pytest.mark.parametrize("axis", [-1, 1, 2])
def test_layer_normalization(axis):
    x = randn(2, 3, 4, 5)
    shape = x.shape[axis:] if axis >= 0 else x.shape[axis:]
    check("LayerNormalization", [("x", x), ("scale", randn(*shape, seed=1)), ("b", randn(*shape, seed=2))],
          {"axis": axis, "epsilon": 1e-4}, opset=17, constants={"scale", "b"})


def test_layer_normalization_without_bias():
    check("LayerNormalization", [("x", randn(4, 8)), ("scale", randn(8, seed=1))], opset=17,
          constants={"scale"})


def test_instance_normalization_and_lrn():
    check("InstanceNormalization",
          [("x", randn(2, 3, 4, 5)), ("s", randn(3, seed=1)), ("b", randn(3, seed=2))],
          {"epsilon": 1e-3}, constants={"s", "b"})
    check("LRN", [("x", randn(1, 7, 4, 4))], {"size": 3, "alpha": 1e-2, "beta": 0.6, "bias": 2.0})


# -- shapes -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(0, -1), (-1, 5), (2, 0, -1), (0, 0, 5, 4), (120,)])
def test_reshape_zero_and_minus_one(shape):
    check("Reshape", [("x", randn(2, 3, 5, 4)), ("s", ints(*shape))], constants={"s"})


def test_reshape_opset1_attribute():
    graph = load_onnx(single_node_model("Reshape", [("x", randn(2, 3, 4))], {"shape": [0, -1]}, opset=1))
    assert graph.types[graph.outputs[0]].shape == (2, 12)


@pytest.mark.parametrize("axis", [0, 1, 2, 4, -1, -3])
def test_flatten_axis(axis):
    check("Flatten", [("x", randn(2, 3, 4, 5))], {"axis": axis})


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_unsqueeze_axes_as_attribute_or_input(opset):
    x = randn(2, 1, 3, 1)
    if opset < 13:
        check("Squeeze", [("x", x)], {"axes": [1, -1]}, opset=opset)
        check("Unsqueeze", [("x", x)], {"axes": [0, -1]}, opset=opset)
    else:
        check("Squeeze", [("x", x), ("a", ints(1, -1))], constants={"a"}, opset=opset)
        check("Unsqueeze", [("x", x), ("a", ints(0, -1))], constants={"a"}, opset=opset)
    check("Squeeze", [("x", x)], opset=opset)


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ((1, 0), (3, 4), None, None),
    ((-3,), (-1,), (1,), None),
    ((0,), (I64_MAX,), (2,), (2,)),
    ((-1,), (-I64_MAX,), (1,), (-1,)),
    ((3, 4), (0, 1), (0, -1), (-2, -1)),
    ((10,), (-10,), (2,), (-3,)),
    ((2,), (2,), (0,), None),
])
def test_slice(starts, ends, axes, steps):
    inputs = [("x", randn(4, 5, 6)), ("s", ints(*starts)), ("e", ints(*ends))]
    inputs += [("a", ints(*axes)) if axes is not None else ("", None)]
    if steps is not None:
        inputs += [("t", ints(*steps))]
    while inputs[-1][0] == "":
        inputs.pop()
    check("Slice", inputs, constants={"s", "e", "a", "t"})


def test_slice_opset9_attributes():
    check("Slice", [("x", randn(4, 5))], {"starts": [1, -2], "ends": [100, -1], "axes": [0, 1]}, opset=9)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_modes(mode):
    inputs = [("x", randn(1, 2, 4, 5)), ("p", ints(0, 0, 1, 2, 0, 1, 2, 1))]
    if mode == "constant":
        inputs.append(("v", np.array(1.5, np.float32)))
    check("Pad", inputs, {"mode": mode}, constants={"p", "v"})


def test_pad_legacy_attribute_negative_and_axes():
    check("Pad", [("x", randn(3, 4))], {"pads": [1, 0, 0, 2], "value": -1.0}, opset=2)
    check("Pad", [("x", randn(3, 6)), ("p", ints(1, -2, 0, 1))], constants={"p"}, opset=13)
    check("Pad", [("x", randn(2, 3, 4)), ("p", ints(1, 2)), ("", None), ("a", ints(-1))],
          constants={"p", "a"}, opset=18)


@pytest.mark.parametrize("opset,attrs,split", [
    (11, {"axis": 1}, None),
    (11, {"axis": 1, "split": [1, 3, 2]}, None),
    (13, {"axis": -1}, (2, 2, 2)),
    (13, {"axis": 1}, (4, 0, 2)),
    (18, {"axis": 1, "num_outputs": 3}, None),
])
def test_split_variants(opset, attrs, split):
    x = randn(2, 6, 6)
    inputs = [("x", x)] + ([("split", ints(*split))] if split is not None else [])
    check("Split", inputs, attrs, opset=opset, constants={"split"}, n_outputs=3)


def test_split_uneven_num_outputs():
    check("Split", [("x", randn(7, 2))], {"num_outputs": 3}, opset=18, n_outputs=3)


def test_concat_transpose_expand_tile():
    check("Concat", [("a", randn(2, 3)), ("b", randn(2, 1, seed=1)), ("c", randn(2, 2, seed=2))],
          {"axis": -1})
    check("Transpose", [("x", randn(2, 3, 4))], {"perm": [1, 2, 0]})
    check("Transpose", [("x", randn(2, 3, 4))])
    check("Expand", [("x", randn(3, 1)), ("s", ints(2, 1, 4))], constants={"s"})
    check("Tile", [("x", randn(2, 3)), ("r", ints(2, 3))], constants={"r"})


def test_gather_negative_indices_and_runtime_indices():
    check("Gather", [("x", randn(5, 4)), ("i", ints(-1, 0, 2))], {"axis": 0}, constants={"i"})
    check("Gather", [("x", randn(3, 5)), ("i", ints([1, 4], [0, 0]))], {"axis": 1})


def test_depth_to_space_and_back():
    for mode in ("DCR", "CRD"):
        check("DepthToSpace", [("x", randn(1, 8, 2, 3))], {"blocksize": 2, "mode": mode})
    check("SpaceToDepth", [("x", randn(1, 2, 4, 6))], {"blocksize": 2})


# -- reductions -------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceL2",
                                "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes,keepdims", [((1,), 1), ((0, -1), 0), (None, 1), (None, 0)])
def test_reduce_axes_attribute_or_input(op, axes, keepdims):
    x = randn(3, 4, 5)
    attr_form = op != "ReduceSum"  # ReduceSum took axes as an input at opset 13, the others at 18
    attrs = {"keepdims": keepdims}
    if attr_form and axes is not None:
        attrs["axes"] = list(axes)
    inputs = [("x", x)] + ([("a", ints(*axes))] if axes is not None and not attr_form else [])
    check(op, inputs, attrs, constants={"a"})
    inputs = [("x", x)] + ([("a", ints(*axes))] if axes is not None else [])
    check(op, inputs, {"keepdims": keepdims}, constants={"a"}, opset=18)


def test_reduce_noop_with_empty_axes():
    check("ReduceSum", [("x", randn(2, 3)), ("a", np.zeros((0,), np.int64))], {"noop_with_empty_axes": 1},
          constants={"a"})


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_arg_reductions(op):
    x = np.array([[1, 3, 3, 0], [2, 2, 0, 0]], np.float32)
    check(op, [("x", x)], {"axis": 1, "keepdims": 0})
    check(op, [("x", x)], {"axis": -1, "select_last_index": 1})


# -- elementwise ------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Exp", "Abs", "Neg", "Floor", "Ceil", "Round",
                                "Erf", "Sign", "Softplus", "Sin", "Cos", "HardSwish", "Softsign", "Identity"])
def test_unary(op):
    check(op, [("x", randn(3, 4) * 3)], opset=14)


def test_unary_positive_domain():
    x = np.abs(randn(3, 4)) + 0.1
    for op in ("Log", "Sqrt", "Reciprocal"):
        check(op, [("x", x)])


@pytest.mark.parametrize("op,attrs,opset", [
    ("LeakyRelu", {"alpha": 0.2}, 13), ("Elu", {"alpha": 0.7}, 13), ("Selu", {}, 13),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, 13), ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20),
    ("Clip", {"min": -0.5, "max": 0.7}, 6), ("Dropout", {"ratio": 0.3}, 10),
])
def test_activation_attributes(op, attrs, opset):
    check(op, [("x", randn(3, 4) * 2)], attrs, opset=opset)


def test_clip_bounds_as_inputs():
    x = randn(3, 4) * 5
    check("Clip", [("x", x), ("lo", np.float32(0.0)), ("hi", np.float32(6.0))], constants={"lo", "hi"})
    check("Clip", [("x", x), ("", None), ("hi", np.float32(1.0))], constants={"hi"})
    check("Clip", [("x", x)])
    check("Clip", [("x", x), ("lo", np.float32(-1.0)), ("hi", np.float32(2.0))])  # run-time bounds


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "LessOrEqual",
                                "GreaterOrEqual"])
def test_binary_broadcasting(op):
    a = np.abs(randn(2, 3, 4)) + 0.5
    b = np.abs(randn(3, 1, seed=1)) + 0.5
    check(op, [("a", a), ("b", b)], opset=16)


def test_pow_integer_exponent_mod_where_logical():
    check("Pow", [("a", randn(3, 4)), ("b", np.array([2, 3, 1, 0], np.int64))], constants={"b"})
    x, y = randn(3, 4) * 4, np.abs(randn(4, seed=1)) * 3 + 0.5
    check("Mod", [("a", x), ("b", y)], {"fmod": 1})
    xi, yi = np.array([-7, 7, 5, -3], np.int64), np.array([3, -3, 2, 2], np.int64)
    check("Mod", [("a", xi), ("b", yi)])
    check("Where", [("c", randn(3, 4) > 0), ("a", randn(3, 4)), ("b", randn(4, seed=1))])
    p, q = randn(3, 4) > 0, randn(3, 4, seed=1) > 0
    for op in ("And", "Or", "Xor"):
        check(op, [("p", p), ("q", q)])
    check("Not", [("p", p)])


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic(op):
    check(op, [("a", randn(2, 3)), ("b", randn(3, seed=1)), ("c", randn(2, 1, seed=2))])
    check(op, [("a", randn(2, 3))])


def test_prelu_cast_isnan():
    check("PRelu", [("x", randn(2, 3, 4, 4)), ("s", randn(3, 1, 1, seed=1))], constants={"s"})
    check("Cast", [("x", randn(3, 4) * 5)], {"to": 6})
    check("Cast", [("x", np.array([0, 1, 2], np.int64))], {"to": 1})

    check("IsNaN", [("x", np.array([0.0, np.nan, 1.0], np.float32))])


def test_legacy_broadcast_attribute():
    """Opset < 7 ``Add(broadcast=1, axis=1)`` aligns B with A from axis 1 (onnxruntime no longer runs it)."""
    from nnvm.graph.evaluate import evaluate_graph

    a, b = randn(2, 3, 4, 5), randn(3, seed=1)
    model = single_node_model("Add", [("a", a), ("b", b)], {"broadcast": 1, "axis": 1}, opset=6)
    graph = load_onnx(model)
    (got,) = evaluate_graph(graph, {"a": a, "b": b})
    np.testing.assert_allclose(got, a + b.reshape(3, 1, 1), rtol=1e-6)


# -- shape computations -----------------------------------------------------------------------------
def test_shape_chain_folds_to_constants():
    """PyTorch's ``x.view(x.size(0), -1)``: Shape -> Gather -> Unsqueeze -> Concat -> Reshape."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Constant", [], ["zero"], name="zero", value=numpy_helper.from_array(ints(0))),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Constant", [], ["minus1"], name="minus1", value_ints=[-1]),
        helper.make_node("Concat", ["batch", "minus1"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("ConstantOfShape", ["target_shape"], ["ones"], name="ones",
                         value=numpy_helper.from_array(np.array([2.0], np.float32))),
        helper.make_node("Size", ["x"], ["size"], name="size"),
        helper.make_node("Cast", ["size"], ["size_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["flat", "ones"], ["scaled"], name="mul"),
        helper.make_node("Div", ["scaled", "size_f"], ["y"], name="div"),
    ]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(ints(3, 20), "target_shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    assert_matches_onnxruntime(model, {"x": randn(3, 4, 5)})
    ops = [n.op for n in load_onnx(model).nodes]
    assert ops == ["reshape", "multiply", "divide"], ops


def test_range_and_constant_forms():
    from onnx import TensorProto, helper

    nodes = [
        helper.make_node("Constant", [], ["start"], value_float=1.0),
        helper.make_node("Constant", [], ["limit"], value_float=4.0),
        helper.make_node("Constant", [], ["delta"], value_float=0.5),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Add", ["x", "r"], ["y"]),
    ]
    graph = helper.make_graph(nodes, "range", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    assert_matches_onnxruntime(model, {"x": randn(2, 6)})


def test_scalar_gather_unsqueeze_and_outputs_that_are_constants_or_inputs():
    """A scalar Gather index (PyTorch's ``x.size(0)``) and outputs that need no computation at all."""
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "i"], ["dim"], axis=0),
        helper.make_node("Unsqueeze", ["dim", "zero"], ["dim1"]),
        helper.make_node("Identity", ["x"], ["same"]),
        helper.make_node("Reshape", ["x", "shape"], ["reshaped"]),
    ]
    graph = helper.make_graph(
        nodes, "aliases", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_empty_tensor_value_info(n) for n in ("dim1", "same", "reshaped")],
        initializer=[numpy_helper.from_array(np.array(-1, np.int64), "i"),
                     numpy_helper.from_array(ints(0), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    dim, same, reshaped = assert_matches_onnxruntime(model, {"x": randn(3, 4)})
    assert dim.tolist() == [4]
    g = load_onnx(model)
    assert g.outputs == ("dim1", "same", "reshaped") and all(n.op == "copy" for n in g.nodes)


def test_cast_like_and_model_local_functions_are_inlined():
    """What PyTorch's dynamo exporter writes: CastLike of constants, and model-local functions."""
    from onnx import TensorProto, helper

    relu6 = helper.make_function(
        "custom.fn", "Relu6", ["x"], ["y"],
        [helper.make_node("Constant", [], ["lo"], value_float=0.0),
         helper.make_node("Constant", [], ["hi"], value_float=6.0),
         helper.make_node("CastLike", ["lo", "x"], ["lo_c"]),
         helper.make_node("CastLike", ["hi", "x"], ["hi_c"]),
         helper.make_node("Clip", ["x", "lo_c", "hi_c"], ["y"])],
        opset_imports=[helper.make_opsetid("", 18)])
    nodes = [helper.make_node("Relu6", ["x"], ["r"], domain="custom.fn", name="act"),
             helper.make_node("CastLike", ["r", "like"], ["y"], name="castlike")]
    graph = helper.make_graph(nodes, "fn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
                                            helper.make_tensor_value_info("like", TensorProto.DOUBLE, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("custom.fn", 1)]
    model = helper.make_model(graph, functions=[relu6], opset_imports=opsets)
    model.ir_version = 8
    assert_matches_onnxruntime(model, {"x": randn(3, 4) * 8, "like": np.zeros(1)})
    assert [n.op for n in load_onnx(model).nodes] == ["clip", "cast"]


def test_dead_nodes_are_ignored():
    """Nodes no output depends on (an unused MaxPool Indices chain, an unsupported op) are skipped."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("MaxPool", ["x"], ["y", "indices"], name="pool", kernel_shape=[2, 2]),
             helper.make_node("TopK", ["indices", "k"], ["v", "i"], name="dead_topk"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4]),
              helper.make_tensor_value_info("k", TensorProto.INT64, [1])]
    graph = helper.make_graph(nodes, "dead", inputs, [helper.make_empty_tensor_value_info("out")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    g = load_onnx(model)
    assert [n.op for n in g.nodes] == ["max_pool2d", "relu"]


def test_gru_linear_before_reset_with_recurrent_biases():
    """linear_before_reset=1 still adds Rbz and Rbr to the z and r gates (only Rbh moves inside r * ())."""
    h = 4
    check("GRU", [("x", randn(3, 2, 5)), ("w", randn(1, 3 * h, 5, seed=1)), ("r", randn(1, 3 * h, h, seed=2)),
                  ("b", randn(1, 6 * h, seed=3))],
          {"hidden_size": h, "linear_before_reset": 1}, constants={"w", "r", "b"}, n_outputs=2, rtol=1e-4)

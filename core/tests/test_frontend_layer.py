"""The shared frontend layer (``nnvm.frontend``): converter table, conversion loop, shape binding,
padding rules and layout helpers, checked against numpy references of the formats' definitions."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.errors import InputError, NodeError, UnsupportedOperatorError
from nnvm.frontend import (
    ConversionContext,
    ConvertError,
    ConverterTable,
    FailedConversionError,
    bind_input,
    call_converter,
    check_shape_keys,
    check_supported,
)
from nnvm.frontend.channels_last import (
    channels_first_axes,
    channels_last_axes,
    depthwise_to_oihw,
    hwio_to_oihw,
    to_channels_first,
    to_channels_last,
)
from nnvm.frontend.convert import DimBinding, binding_dims
from nnvm.frontend.padding import explicit_pads, full_pooling_pads, pool_out_size, same_pads
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.evaluate import evaluate_graph


# -- converter table --------------------------------------------------------------------------------
def test_table_versions_and_duplicates():
    table = ConverterTable("TEST")

    @table.register("Op", until=10)
    def old(ctx, inputs):
        return "old"

    @table.register("Op", since=11)
    def new(ctx, inputs):
        return "new"

    assert table.lookup("Op", 5) is old and table.lookup("Op", 11) is new and table.lookup("Op") is new
    assert "Op" in table and table["Op"] is new and table.keys() == ["Op"]
    assert table.lookup("Other") is None and not table.supports("Other")
    with pytest.raises(RuntimeError, match="TEST converter for Op is defined twice"):
        table.register("Op", since=12)(old)
    part = ConverterTable("P")
    part.register("Q", since=7)(old)
    assert not part.supports("Q", 6) and part.supports("Q", 7)


# -- the conversion loop ----------------------------------------------------------------------------
def test_all_unsupported_operators_in_one_sentence():
    nodes = [("Conv", "c1"), ("Frob", "f1"), ("Relu", "r1"), ("Frob", "f2"), ("Zap", "z1")]
    with pytest.raises(UnsupportedOperatorError) as info:
        check_supported(nodes, {"Conv", "Relu"}.__contains__, "TEST", "m.json")
    msg = str(info.value)
    assert msg == ("the TEST model in m.json uses 2 unsupported operators: Frob (nodes: f1, f2); "
                   "Zap (nodes: z1)")
    assert info.value.missing == {"Frob": ["f1", "f2"], "Zap": ["z1"]}
    check_supported(nodes[:1], {"Conv"}.__contains__, "TEST")  # all supported: no error


def test_builder_errors_are_structured_and_name_the_source_node():
    b = GraphBuilder()
    x, y = b.input("x", (2, 3)), b.input("y", (4, 5))
    with pytest.raises(NodeError) as info:
        b.node1("add", [x, y], name="bad_add")
    assert info.value.node == "bad_add" and info.value.op == "add" and "bad_add" not in info.value.reason
    with pytest.raises(NodeError) as info:
        b.node1("relu", [x], {"alpha": 1.0}, name="r")
    assert info.value.reason.startswith("unknown attribute 'alpha'")

    ctx = ConversionContext(b)
    ctx.begin("plus7", "elemwise_add", {})
    with pytest.raises(FailedConversionError) as info:
        call_converter(ctx, lambda c, ins: c.op("add", ins), [x, y])
    assert str(info.value).startswith("node plus7 (elemwise_add): ") and "(add)" not in str(info.value)
    with pytest.raises(FailedConversionError, match=r"plus7 \(elemwise_add\): cannot convert \(KeyError"):
        call_converter(ctx, lambda c, ins: {}["num_hidden"], [x])
    with pytest.raises(ConvertError, match=r"^node plus7 \(elemwise_add\): axis 5 is out of range"):
        call_converter(ctx, lambda c, ins: c.normalize_axis(5, 2), [x])
    assert call_converter(ctx, lambda c, ins: c.op("relu", ins), [x])[0].startswith("plus7")


def test_shape_binding():
    assert bind_input("data", (1, 3, 8, 8), {}, "m") == (1, 3, 8, 8)
    assert bind_input("data", ("N", 3, 8, 8), {}, "m") == (1, 3, 8, 8)
    assert bind_input("data", ("N", 3, 8, 8), {"data": (4, 3, 9, 9)}, "m") == (4, 3, 9, 9)
    assert bind_input("data", None, {"data": [2, 5]}, "m") == (2, 5)
    with pytest.raises(InputError, match="symbolic dimension 2 \\('h'\\)"):
        bind_input("data", ("N", 3, "h", 8), {}, "m")
    with pytest.raises(InputError, match="declares rank 4"):
        bind_input("data", (1, 3, 8, 8), {"data": (3, 8, 8)}, "m")
    with pytest.raises(InputError, match="no declared shape"):
        bind_input("data", None, {}, "m")
    with pytest.raises(InputError, match=r"shapes= names 'dat', which is not an input of m \(inputs: data\)"):
        check_shape_keys({"dat": (1,)}, ["data"], "m")


def test_bind_input_in_a_dim_binding_keeps_dims_by_name():
    """Inside ``binding_dims`` every symbolic dim takes the binding's value (the model's names, names
    given in shapes=, ``<input>:<axis>`` for an unnamed one) and each input's symbolic shape is recorded."""
    binding = DimBinding({"seq": 7}, default=lambda dim: 1)
    with binding_dims(binding):
        assert bind_input("ids", ("batch", "seq"), {}, "m") == (1, 7)
        assert bind_input("x", ("N", 3, "?", 8), {"x": ("N", None, None, 8)}, "m") == (1, 3, 1, 8)
        assert bind_input("y", (2, 5), {"y": ("rows", 5)}, "m") == (1, 5)
    assert binding.declared == {"ids": ("batch", "seq"), "x": ("N", 3, "x:2", 8), "y": ("rows", 5)}
    assert binding.values == {"batch": 1, "seq": 7, "N": 1, "x:2": 1, "rows": 1}
    with binding_dims(DimBinding({})), pytest.raises(InputError, match=r"input 'ids' dim 1 \(seq\)"):
        bind_input("ids", (1, "seq"), {}, "m")
    assert bind_input("data", ("N", 3), {}, "m") == (1, 3)  # outside the block: bound as before


# -- padding ----------------------------------------------------------------------------------------
def _tf_same(size, k, s, d):
    """TensorFlow's documented SAME rule: out = ceil(size / s), the odd pixel of padding at the end."""
    out = -(-size // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
    return total // 2, total - total // 2, out


@pytest.mark.parametrize("size,k,s,d", [(7, 3, 2, 1), (8, 3, 2, 1), (9, 4, 3, 1), (5, 1, 2, 1),
                                        (10, 3, 1, 2), (4, 5, 1, 1), (224, 7, 2, 1)])
def test_same_pads(size, k, s, d):
    lo, hi, out = _tf_same(size, k, s, d)
    assert same_pads([size], [k], [s], [d]) == ([lo], [hi])
    assert same_pads([size], [k], [s], [d], upper=False) == ([hi], [lo])
    assert pool_out_size(size, k, s, d, lo, hi, False) == out


def test_explicit_pads():
    assert explicit_pads([1, 2, 3, 4], 2) == ([1, 2], [3, 4])
    assert explicit_pads([1, 2], 2) == ([1, 2], [1, 2])
    with pytest.raises(nnvm.Error, match="should have 2 or 4 values"):
        explicit_pads([1, 2, 3], 2)


def _mxnet_full_max_pool_1d(x, k, s, p):
    """MXNet's pooling_convention='full' max pooling (pool.h): out = 1 + ceil((n + 2p - k) / s); a
    window clipped to the input; an empty window gives the lowest float."""
    n = len(x)
    out = 1 + int(np.ceil((n + 2 * p - k) / s))
    y = np.empty(out, np.float32)
    for i in range(out):
        lo, hi = max(i * s - p, 0), min(i * s - p + k, n)
        y[i] = x[lo:hi].max() if hi > lo else np.finfo(np.float32).min
    return y


@pytest.mark.parametrize("n,k,s,p", [(6, 3, 2, 0), (7, 3, 2, 0), (7, 3, 2, 1), (5, 2, 2, 1), (6, 2, 2, 1),
                                     (8, 3, 3, 1), (4, 3, 2, 2), (13, 3, 2, 1), (5, 3, 3, 2)])
def test_full_pooling_matches_mxnet_rule(n, k, s, p):
    x = np.random.default_rng(n * 100 + k * 10 + s + p).standard_normal(n).astype(np.float32)
    want = _mxnet_full_max_pool_1d(x, k, s, p)
    before, after, ceil_mode, padding_window = full_pooling_pads(n, k, s, p)
    assert pool_out_size(n, k, s, 1, before, after, ceil_mode) == len(want)
    assert padding_window == bool((len(want) - 1) * s >= n + p)
    b = GraphBuilder()
    v = b.input("x", (1, 1, 1, n))
    if padding_window:  # pad with the lowest float (what MXNet gives a window that sees no input)
        v = b.node1("pad", [v], {"pad_width": (0, 0, 0, 0, 0, 0, before, after), "mode": "constant",
                                 "pad_value": float(np.finfo(np.float32).min)})
        before = after = 0
    y = b.node1("max_pool2d", [v], {"pool_size": (1, k), "strides": (1, s), "padding": (0, before, 0, after),
                                    "ceil_mode": ceil_mode})
    b.output(y)
    (got,) = evaluate_graph(b.build(), {"x": x.reshape(1, 1, 1, n)})
    np.testing.assert_array_equal(got.reshape(-1), want)


# -- layout -----------------------------------------------------------------------------------------
def test_layout_helpers():
    x = np.arange(2 * 5 * 4 * 3, dtype=np.float32).reshape(2, 5, 4, 3)  # NHWC
    assert channels_first_axes(4) == (0, 3, 1, 2) and channels_last_axes(4) == (0, 2, 3, 1)
    assert channels_first_axes(3) == (0, 2, 1)
    b = GraphBuilder()
    ctx = ConversionContext(b)
    ctx.begin("t", "T", {})
    v = b.input("x", x.shape)
    first = to_channels_first(ctx, v)
    b.output(first)
    b.output(to_channels_last(ctx, first))
    got = evaluate_graph(b.build(), {"x": x})
    np.testing.assert_array_equal(got[0], np.moveaxis(x, 3, 1))
    np.testing.assert_array_equal(got[1], x)

    w = np.random.default_rng(0).standard_normal((3, 3, 4, 6)).astype(np.float32)  # HWIO
    np.testing.assert_array_equal(hwio_to_oihw(w)[5, 2], w[:, :, 2, 5])
    dw = np.random.default_rng(1).standard_normal((3, 3, 4, 2)).astype(np.float32)  # H W C M
    out = depthwise_to_oihw(dw)
    assert out.shape == (8, 1, 3, 3)
    np.testing.assert_array_equal(out[3 * 2 + 1, 0], dw[:, :, 3, 1])


# -- transposed convolution -------------------------------------------------------------------------
def _conv_transpose_reference(x, w, strides, pads, dilations, groups, output_padding):
    """The definition: every input pixel scatters its kernel-weighted contribution into the output."""
    n, c, h, wd = x.shape
    _, m_per_group, kh, kw = w.shape
    full_h = (h - 1) * strides[0] + dilations[0] * (kh - 1) + 1 + output_padding[0]
    full_w = (wd - 1) * strides[1] + dilations[1] * (kw - 1) + 1 + output_padding[1]
    out = np.zeros((n, m_per_group * groups, full_h, full_w))
    cg = c // groups
    for ci in range(c):
        g = ci // cg
        for i in range(h):
            for j in range(wd):
                for a in range(kh):
                    for b in range(kw):
                        out[:, g * m_per_group:(g + 1) * m_per_group, i * strides[0] + a * dilations[0],
                            j * strides[1] + b * dilations[1]] += x[:, ci, i, j, None] * w[ci, :, a, b]
    top, left, bottom, right = pads
    return out[:, :, top:full_h - bottom, left:full_w - right]


@pytest.mark.parametrize("strides,pads,dilations,groups,output_padding", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, (0, 0)),
    ((2, 3), (1, 0, 2, 1), (1, 1), 1, (1, 0)),
    ((2, 2), (3, 3, 3, 3), (1, 2), 2, (0, 1)),
])
def test_conv2d_transpose(strides, pads, dilations, groups, output_padding):
    from nnvm.frontend.compose import conv2d_transpose

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = GraphBuilder()
    ctx = ConversionContext(b)
    ctx.begin("deconv", "Deconvolution", {})
    weight = ctx.param(w, "weight")
    y = conv2d_transpose(ctx, b.input("x", x.shape), weight, strides, dilations, pads[:2], pads[2:],
                         output_padding, groups)
    b.output(y)
    got = evaluate_graph(b.build(), {"x": x})[0]
    want = _conv_transpose_reference(x, w, strides, pads, dilations, groups, output_padding)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_unique_names_keep_source_names_and_name_the_unnamed():
    from nnvm.frontend import unique_names

    nodes = [("conv1", "Conv"), ("", "Relu"), ("conv1", "Conv"), ("", "Relu")]
    assert unique_names(nodes) == ["conv1", "Relu_1", "conv1_2", "Relu_3"]

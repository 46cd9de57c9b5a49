"""Injective operators against numpy: reshape, transpose, concatenate, split, slicing, take, pad, ..."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nnvm

RNG = np.random.default_rng(13)
X = RNG.uniform(-1, 1, (2, 3, 4)).astype(np.float32)


@pytest.mark.parametrize("newshape", [(6, 4), (24,), (4, 1, 6), (2, 3, 4), (1, 2, 12, 1)])
def test_reshape(ops, newshape):
    ops.check("reshape", [X], {"newshape": newshape}, X.reshape(newshape))


@pytest.mark.parametrize("axes", [None, (0, 2, 1), (2, 0, 1), (-1, 0, 1)])
def test_transpose(ops, axes):
    ops.check("transpose", [X], {"axes": axes}, np.transpose(X, axes))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(ops, axis):
    parts = []
    for k in range(3):
        shape = list(X.shape)
        shape[axis] = k + 1
        parts.append(RNG.uniform(-1, 1, shape).astype(np.float32))
    ops.check("concatenate", parts, {"axis": axis}, np.concatenate(parts, axis=axis))
    ops.check("concatenate", parts[:1], {"axis": axis}, parts[0])


@pytest.mark.parametrize("indices,axis", [((1,), 0), ((1, 3), 2), ((0, 2), 1), ((2, 2), 1)])
def test_split(ops, indices, axis):
    want = np.split(X, indices, axis=axis)
    assert ops.get("split").num_outputs == 0  # "as many as infer_type says"
    ops.check("split", [X], {"indices": indices, "axis": axis}, want)


SLICES = [
    ((0, 1), (2, 3), (1, 1), (0, 1)),
    ((-1,), (-100,), (-1,), (2,)),  # reversed, clamped
    ((1, 0), (100, 4), (2, 3), (1, 2)),
    ((3,), (0,), (-2,), (-1,)),
    ((0,), (0,), (1,), (1,)),  # empty
    ((-5,), (5,), (1,), (0,)),
]


@pytest.mark.parametrize("begin,end,strides,axes", SLICES, ids=[str(s) for s in SLICES])
def test_strided_slice(ops, begin, end, strides, axes):
    key = [slice(None)] * X.ndim
    for b, e, s, a in zip(begin, end, strides, axes):
        key[a] = slice(b, e, s)
    attrs = {"begin": begin, "end": end, "strides": strides, "axes": axes}
    ops.check("strided_slice", [X], attrs, X[tuple(key)])


def test_strided_slice_defaults_and_onnx(ops, onnx_ref):
    ops.check("strided_slice", [X], {"begin": (1,), "end": (2,)}, X[1:2])
    starts, ends = np.array([-1, 0], np.int64), np.array([-5, 3], np.int64)
    axes, steps = np.array([2, 1], np.int64), np.array([-2, 2], np.int64)
    want = onnx_ref("Slice", [X, starts, ends, axes, steps])
    attrs = {"begin": (-1, 0), "end": (-5, 3), "axes": (2, 1), "strides": (-2, 2)}
    ops.check("strided_slice", [X], attrs, want)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(-6, 6), st.integers(-6, 6), st.sampled_from([-3, -2, -1, 1, 2, 3])),
                min_size=1, max_size=3))
def test_strided_slice_is_python_slicing(ops, spec):
    begin, end, strides = zip(*spec)
    key = tuple(slice(b, e, s) for b, e, s in spec)
    ops.check("strided_slice", [X], {"begin": begin, "end": end, "strides": strides}, X[key])


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_take(ops, onnx_ref, axis):
    n = X.shape[axis]
    idx = np.array([[0, n - 1], [-1, -n]], np.int64)
    ops.check("take", [X, idx], {"axis": axis}, onnx_ref("Gather", [X, idx], {"axis": axis}))
    scalar = np.array(-1, np.int32)
    ops.check("take", [X, scalar], {"axis": axis}, np.take(X, n - 1, axis=axis))


def test_take_clamps_out_of_range_indices(ops):
    idx = np.array([5, -9], np.int64)
    ops.check("take", [X, idx], {"axis": 1}, X[:, [2, 0]])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
@pytest.mark.parametrize("widths", [(0, 1, 2, 0, 1, 1), (1, 1, 0, 0, 3, 2)])
def test_pad(ops, mode, widths):
    pairs = list(zip(widths[0::2], widths[1::2]))
    kwargs = {"constant_values": 1.5} if mode == "constant" else {}
    ops.check("pad", [X], {"pad_width": widths, "mode": mode, "pad_value": 1.5},
              np.pad(X, pairs, mode=mode, **kwargs))


def test_pad_against_onnxruntime_including_negative_widths(ops, onnx_ref):
    widths = (1, 0, -1, 2, 0, -2)
    onnx_pads = np.array(widths[0::2] + widths[1::2], np.int64)
    want = onnx_ref("Pad", [X, onnx_pads, np.array(0.5, np.float32)], {"mode": "constant"})
    ops.check("pad", [X], {"pad_width": widths, "pad_value": 0.5}, want)
    pads = (1, 1, 2, 1, 0, 3)
    for mode in ("edge", "reflect"):
        want = onnx_ref("Pad", [X, np.array(pads[0::2] + pads[1::2], np.int64)], {"mode": mode})
        ops.check("pad", [X], {"pad_width": pads, "mode": mode}, want)


@pytest.mark.parametrize("shape", [(2, 3, 4), (5, 2, 3, 4), (2, 1, 4)])
def test_broadcast_to(ops, shape):
    x = X[:, :1, :] if shape == (2, 1, 4) else X
    ops.check("broadcast_to", [x], {"shape": shape}, np.broadcast_to(x, shape))


@pytest.mark.parametrize("reps", [(1, 2, 1), (2, 1, 3), (2,), (2, 1, 1, 2)])
def test_tile(ops, reps):
    ops.check("tile", [X], {"reps": reps}, np.tile(X, reps))


def test_integer_and_bool_data_move_unchanged(ops):
    xi = RNG.integers(-5, 5, (2, 3)).astype(np.int64)
    ops.check("transpose", [xi], None, xi.T)
    xb = RNG.random((2, 3)) > 0.5
    ops.check("concatenate", [xb, xb], {"axis": 1}, np.concatenate([xb, xb], axis=1))


def test_transform_errors(ops):
    with pytest.raises(nnvm.Error, match=r"reshape: cannot reshape \(2, 3, 4\) \(24 elements\) to \(5, 5\)"):
        ops.infer("reshape", [X], {"newshape": (5, 5)})
    with pytest.raises(nnvm.Error, match="reshape: newshape .* must be fully static"):
        ops.infer("reshape", [X], {"newshape": (-1, 4)})
    with pytest.raises(nnvm.Error, match=r"transpose: axes \(0, 0, 1\) is not a permutation"):
        ops.infer("transpose", [X], {"axes": (0, 0, 1)})
    with pytest.raises(nnvm.Error, match="concatenate: the shapes .* differ outside axis 0"):
        ops.infer("concatenate", [X, X[:, :2]], {"axis": 0})
    with pytest.raises(nnvm.Error, match="split: the split points"):
        ops.infer("split", [X], {"indices": (3, 1), "axis": 2})
    with pytest.raises(nnvm.Error, match="strided_slice: the stride for axis 0 is zero"):
        ops.infer("strided_slice", [X], {"begin": (0,), "end": (1,), "strides": (0,)})
    with pytest.raises(nnvm.Error, match="take expects an integer indices"):
        ops.infer("take", [X, X])
    with pytest.raises(nnvm.Error, match="pad: mode must be"):
        ops.infer("pad", [X], {"pad_width": (0,) * 6, "mode": "wrap"})
    with pytest.raises(nnvm.Error, match="pad: pad_width must have 6 values"):
        ops.infer("pad", [X], {"pad_width": (1, 1)})
    with pytest.raises(nnvm.Error, match=r"broadcast_to: the shape \(2, 3, 4\) cannot be broadcast to"):
        ops.infer("broadcast_to", [X], {"shape": (3, 4)})


GENERIC = [
    ("split", {"indices": (1, 3), "axis": 1}, lambda x: np.split(x, (1, 3), axis=1)),
    ("strided_slice", {"begin": (1, -1), "end": (0, -6), "strides": (-1, -2), "axes": (1, 2)},
     lambda x: x[:, 1:0:-1, -1:-6:-2]),
    ("pad", {"pad_width": (0, 0, 1, 2, 2, 1), "mode": "reflect"},
     lambda x: np.pad(x, [(0, 0), (1, 2), (2, 1)], mode="reflect")),
    ("concatenate", {"axis": 2}, lambda x: np.concatenate([x, x], axis=2)),
    ("reshape", {"newshape": (4, 6)}, lambda x: x.reshape(4, 6)),
]


@pytest.mark.parametrize("name,attrs,ref", GENERIC, ids=[g[0] for g in GENERIC])
def test_under_the_generic_schedule(ops, name, attrs, ref):
    arrays = [X, X] if name == "concatenate" else [X]
    ops.check(name, arrays, attrs, ref(X), schedule="generic")


def test_tile_by_a_symbolic_count(ops):
    """A dim repeat (a table copied once per batch entry): the output's extent is the product, the
    compute reads the input modulo its own static size."""
    from nnvm.graph.dims import Dim
    from nnvm.graph.ir import TensorType

    batch, opdef = Dim.named("batch"), ops.get("tile")
    table = TensorType((2, 3), "float32")
    (out,) = opdef.infer_type([table], opdef.normalize_attrs({"reps": (batch, 1)}, "t"))
    assert out.shape == (2 * batch, 3)
    with pytest.raises(nnvm.Error, match="must be non-negative"):
        opdef.infer_type([table], opdef.normalize_attrs({"reps": (-1, 1)}, "t"))

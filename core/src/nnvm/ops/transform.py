"""Injective operators: each output element is one input element read at a computed place.

``reshape`` takes a fully static shape (the frontend resolves ONNX's -1 and 0). ``strided_slice``
clamps like Python slicing, negative strides included. ``take`` wraps negative indices once and
clamps the rest into range, so a bad index can never read outside the data. ``split`` has as many
outputs as split points plus one, so its OpDef declares ``num_outputs=0`` ("decided by infer_type").
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.dims import Dim, SymbolicDimError
from nnvm.graph.ir import TensorType
from nnvm.ops.common import (
    TUPLE_OR_NONE,
    broadcast_read,
    broadcast_shapes,
    checked_evaluate,
    dim_tuple,
    float_attr,
    int_tuple,
    normalize_axis,
    prod,
    require_dtype,
    require_inputs,
    same_dtypes,
    shape_of,
)
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.tir import expr as E


def _op(name, infer, compute, evaluate, attrs=None, num_inputs=(1, 1), num_outputs=1, doc=""):
    return OpDef(name, infer, compute, OpPattern.INJECTIVE, attrs=attrs or {}, num_inputs=num_inputs,
                 num_outputs=num_outputs, evaluate=checked_evaluate(infer, evaluate), doc=doc)


def _one(op, in_types):
    return require_inputs(op, in_types, ("data",))[0]


# ---------------------------------------------------------------------------------------------------
# reshape, transpose, broadcast_to, tile


def _reshape_infer(in_types, attrs):
    x = _one("reshape", in_types)
    shape = dim_tuple("reshape", "newshape", attrs["newshape"])
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise Error(f"reshape: newshape {shape} must be fully static (no -1; the frontend resolves it)")
    if prod(shape) != prod(x.shape):
        raise Error(f"reshape: cannot reshape {x.shape} ({prod(x.shape)} elements) to {shape} "
                    f"({prod(shape)} elements)")
    return [TensorType(shape, x.dtype)]


def _reshape_groups(in_shape: tuple, out_shape: tuple) -> list | None:
    """The reshape as runs of adjacent axes with the same product, ``[(in_axes, out_axes), ...]``, each
    as short as it can be (``(b, 4, 3, s, 64) -> (b, 12, s, 64)``: ``b``; ``4, 3 -> 12``; ``s``; ``64``),
    or None when the shapes split no such way. Products compare structurally (``graph.dims``)."""
    groups, i, j = [], 0, 0
    while i < len(in_shape) and j < len(out_shape):
        found = None
        for a in range(i + 1, len(in_shape) + 1):
            for b in range(j + 1, len(out_shape) + 1):
                if prod(in_shape[i:a]) == prod(out_shape[j:b]):
                    found = (a, b)
                    break
            if found:
                break
        if found is None:
            return None
        a, b = found
        groups.append((range(i, a), range(j, b)))
        i, j = a, b
    if not groups or any(d != 1 for d in (*in_shape[i:], *out_shape[j:])):
        return None
    ins, outs = groups[-1]  # size-1 axes left at the end of either shape join the last run
    groups[-1] = (range(ins.start, len(in_shape)), range(outs.start, len(out_shape)))
    return groups


def _symbolic_reshape_source(in_shape: tuple, out_shape: tuple, i: tuple) -> tuple | None:
    """The input index of output index ``i`` for a reshape of symbolic shapes, run by run of axes with
    the same product (``_reshape_groups``), so a run that only merges or splits static dims (``4, 3 ->
    12``, ``b * 12 -> b, 12``) divides by constants and a symbolic dim kept as it is is never divided
    by: GQA's ``repeat_kv`` (unsqueeze, expand, reshape to the query heads) and the reshapes around
    attention's ``K^T`` flattened ``(b, h, s, d)`` whole and divided by ``s`` per element, which made
    the decode step's key packing 0.9 ms a layer. None where the shapes split into no runs."""
    groups = _reshape_groups(in_shape, out_shape)
    if groups is None:
        return None
    src = []
    for ins, outs in groups:
        dims_in = [in_shape[k] for k in ins]
        if len(ins) == 1 and len(outs) == 1:
            src.append(i[outs[0]])
            continue
        flat = te.const(0)
        for k in outs:
            if out_shape[k] != 1:
                flat = flat * out_shape[k] + i[k]
        first = True
        for n, d in enumerate(dims_in):
            stride = prod(dims_in[n + 1:])
            if d == 1:
                src.append(te.const(0))
                continue
            q = flat // stride if isinstance(stride, Dim) or stride > 1 else flat
            src.append(q if first else q % d)
            first = False
    return tuple(src)


def _reshape_compute(inputs, attrs, out_types):
    (x,) = inputs
    in_shape, out_shape = shape_of(x), out_types[0].shape
    symbolic = any(isinstance(d, Dim) for d in in_shape + tuple(out_shape))

    def body(*i):
        direct = _symbolic_reshape_source(in_shape, tuple(out_shape), i) if symbolic else None
        if direct is not None:
            return x[direct]
        if in_shape == out_shape:
            return x[i]
        if 0 in in_shape:  # an empty tensor: the body is never evaluated, any in-bounds form will do
            return x[tuple(te.const(0) for _ in in_shape)]
        flat = te.const(0)
        for idx, d in zip(i, out_shape):
            flat = flat * d + idx
        src, stride = [], prod(in_shape)
        for k, d in enumerate(in_shape):
            stride //= d
            if d == 1:
                src.append(te.const(0))
                continue
            q = flat // stride if isinstance(stride, Dim) or stride > 1 else flat
            src.append(q % d if k else q)
        return x[tuple(src)]

    return [te.compute(out_shape, body, name="reshape", tag="reshape")]


def _transpose_axes(ndim: int, axes) -> tuple:
    if axes is None:
        return tuple(reversed(range(ndim)))
    if sorted(a % ndim if -ndim <= a < ndim else a for a in axes) != list(range(ndim)):
        raise Error(f"transpose: axes {axes} is not a permutation of the {ndim} axes")
    return tuple(a % ndim for a in axes)


def _transpose_infer(in_types, attrs):
    x = _one("transpose", in_types)
    axes = _transpose_axes(len(x.shape), attrs["axes"])
    return [TensorType(tuple(x.shape[a] for a in axes), x.dtype)]


def _transpose_compute(inputs, attrs, out_types):
    (x,) = inputs
    axes = _transpose_axes(len(x.shape), attrs["axes"])
    inverse = [axes.index(d) for d in range(len(axes))]
    return [te.compute(out_types[0].shape, lambda *i: x[tuple(i[k] for k in inverse)], name="transpose",
                       tag="transpose")]


def _arange_infer(in_types, attrs):
    if in_types:
        raise Error("arange: takes no inputs")
    length = attrs["length"]
    if not isinstance(length, int | Dim) or (isinstance(length, int) and length < 0):
        raise Error(f"arange: length must be a non-negative int or a dim, got {length!r}")
    return [TensorType((length,), attrs["dtype"])]


def _arange_compute(inputs, attrs, out_types):
    ty = out_types[0]
    start, delta = te.const(attrs["start"], ty.dtype), te.const(attrs["delta"], ty.dtype)
    return [te.compute(ty.shape, lambda i: start + te.cast(ty.dtype, i) * delta, name="arange", tag="arange")]


def _dim_values_infer(in_types, attrs):
    if in_types:
        raise Error("dim_values: takes no inputs")
    shape, values = int_tuple("dim_values", "shape", attrs["shape"]), dim_tuple("dim_values", "values",
                                                                               attrs["values"])
    if prod(shape) != len(values):
        raise Error(f"dim_values: {len(values)} values for the shape {shape}")
    return [TensorType(shape, "int64")]


def _dim_values_compute(inputs, attrs, out_types):
    shape, values = out_types[0].shape, attrs["values"]

    def body(*i):
        flat = te.const(0)
        for idx, d in zip(i, shape):
            flat = flat * d + idx
        out = te.const(values[-1], "int64") if isinstance(values[-1], int) else E.convert(values[-1])
        for k in range(len(values) - 2, -1, -1):
            v = te.const(values[k], "int64") if isinstance(values[k], int) else E.convert(values[k])
            out = te.select(flat == k, v, out)
        return out

    return [te.compute(shape, body, name="dim_values", tag="dim_values")]


def _broadcast_to_infer(in_types, attrs):
    x = _one("broadcast_to", in_types)
    shape = dim_tuple("broadcast_to", "shape", attrs["shape"])
    if len(shape) < len(x.shape) or broadcast_shapes("broadcast_to", x.shape, shape) != shape:
        raise Error(f"broadcast_to: the shape {x.shape} cannot be broadcast to {shape}")
    return [TensorType(shape, x.dtype)]


def _broadcast_to_compute(inputs, attrs, out_types):
    (x,) = inputs
    return [te.compute(out_types[0].shape, lambda *i: broadcast_read(x, i), name="broadcast_to",
                       tag="broadcast_to")]


def _tile_shapes(shape: tuple, reps: tuple) -> tuple[tuple, tuple]:
    """(input shape, reps) padded with leading ones to one rank, as numpy.tile does."""
    n = max(len(shape), len(reps))
    return (1,) * (n - len(shape)) + tuple(shape), (1,) * (n - len(reps)) + tuple(reps)


def _tile_infer(in_types, attrs):
    x = _one("tile", in_types)
    reps = dim_tuple("tile", "reps", attrs["reps"])  # a dim: a symbolic batch's copies of a table
    if any(isinstance(r, int) and r < 0 for r in reps):
        raise Error(f"tile: reps {reps} must be non-negative")
    shape, reps = _tile_shapes(x.shape, reps)
    return [TensorType(tuple(d * r for d, r in zip(shape, reps)), x.dtype)]


def _tile_compute(inputs, attrs, out_types):
    (x,) = inputs
    shape, _ = _tile_shapes(shape_of(x), attrs["reps"])
    lead = len(shape) - len(x.shape)

    def body(*i):
        src = [te.const(0) if d == 1 else i[k] % d for k, d in enumerate(shape)]
        return x[tuple(src[lead:])]

    return [te.compute(out_types[0].shape, body, name="tile", tag="tile")]


# ---------------------------------------------------------------------------------------------------
# concatenate, split


def _concat_infer(in_types, attrs):
    if not in_types or any(t is None for t in in_types):
        raise Error("concatenate needs at least one input and no omitted ones")
    dtype = same_dtypes("concatenate", in_types)
    first = in_types[0]
    axis = normalize_axis("concatenate", attrs["axis"], len(first.shape))
    for t in in_types[1:]:
        differs = any(a != b for k, (a, b) in enumerate(zip(t.shape, first.shape)) if k != axis)
        if len(t.shape) != len(first.shape) or differs:
            raise Error(f"concatenate: the shapes {first.shape} and {t.shape} differ outside axis {axis}")
    shape = list(first.shape)
    shape[axis] = sum(t.shape[axis] for t in in_types)
    return [TensorType(tuple(shape), dtype)]


def _concat_compute(inputs, attrs, out_types):
    axis = attrs["axis"] % len(inputs[0].shape)
    offsets, total = [], 0
    for t in inputs:
        offsets.append(total)
        total += shape_of(t)[axis]

    def read(t, off, i):
        return t[tuple(i[:axis]) + (i[axis] - off,) + tuple(i[axis + 1:])]

    def body(*i):
        # if_then_else evaluates only the chosen input, so no read leaves its tensor
        expr = read(inputs[-1], offsets[-1], i)
        for t, off in reversed(list(zip(inputs[:-1], offsets[:-1]))):
            expr = te.if_then_else(i[axis] < off + shape_of(t)[axis], read(t, off, i), expr)
        return expr

    return [te.compute(out_types[0].shape, body, name="concatenate", tag="concatenate")]


def is_view(node) -> bool:
    """Whether ``node`` computes nothing: a concatenation whose inputs the memory plan places side by side
    inside its output (``in_place``, set only where the dims before the axis are all 1, so the output's
    bytes are its inputs' bytes one after the other). It gets no kernel; ``make_plan`` places the values.
    Were one run anyway, it would copy each input onto itself."""
    return node.op == "concatenate" and bool(node.attrs.get("in_place"))


def _split_bounds(op, shape, attrs) -> tuple[int, list]:
    axis = normalize_axis(op, attrs["axis"], len(shape))
    points = int_tuple(op, "indices", attrs["indices"])
    bounds = [0, *points, shape[axis]]
    if any(b < 0 or b > shape[axis] for b in points) or any(a > b for a, b in zip(bounds, bounds[1:])):
        raise Error(f"split: the split points {points} must be non-decreasing and within 0..{shape[axis]} "
                    f"(axis {axis} of {shape})")
    return axis, bounds


def _split_infer(in_types, attrs):
    x = _one("split", in_types)
    axis, bounds = _split_bounds("split", x.shape, attrs)
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        shape = list(x.shape)
        shape[axis] = hi - lo
        out.append(TensorType(tuple(shape), x.dtype))
    return out


def _split_compute(inputs, attrs, out_types):
    (x,) = inputs
    axis, bounds = _split_bounds("split", shape_of(x), attrs)
    outs = []
    for k, (lo, ty) in enumerate(zip(bounds, out_types)):
        def body(*i, lo=lo):
            return x[tuple(i[:axis]) + (i[axis] + lo,) + tuple(i[axis + 1:])]

        outs.append(te.compute(ty.shape, body, name=f"split_{k}", tag="split"))
    return outs


def _split_eval(xs, attrs):
    axis, bounds = _split_bounds("split", xs[0].shape, attrs)
    return np.split(xs[0], bounds[1:-1], axis=axis)


# ---------------------------------------------------------------------------------------------------
# strided_slice, take, pad


def _slices(shape: tuple, attrs: dict) -> dict:
    """axis -> (start, step, length) with Python slicing's clamping."""
    begin = int_tuple("strided_slice", "begin", attrs["begin"])
    end = dim_tuple("strided_slice", "end", attrs["end"], len(begin))
    strides = attrs["strides"] if attrs["strides"] is not None else (1,) * len(begin)
    axes = attrs["axes"] if attrs["axes"] is not None else tuple(range(len(begin)))
    int_tuple("strided_slice", "strides", strides, len(begin))
    int_tuple("strided_slice", "axes", axes, len(begin))
    out = {}
    for b, e, s, a in zip(begin, end, strides, axes):
        a = normalize_axis("strided_slice", a, len(shape))
        if s == 0:
            raise Error(f"strided_slice: the stride for axis {a} is zero")
        if a in out:
            raise Error(f"strided_slice: axis {a} is sliced twice")
        if isinstance(e, Dim) or isinstance(shape[a], Dim):
            # symbolic: forward from a constant start to a dim that fits (the frontend checks it at each run)
            if s != 1 or b < 0 or not isinstance(e, Dim):
                raise SymbolicDimError(f"strided_slice: axis {a} of size {shape[a]} sliced from {b} to {e} "
                                       f"by {s}; with symbolic dims only forward by 1 to a dim, for now")
            out[a] = (b, 1, e - b)
            continue
        start, stop, step = slice(b, e, s).indices(shape[a])
        out[a] = (start, step, len(range(start, stop, step)))
    return out


def _slice_infer(in_types, attrs):
    x = _one("strided_slice", in_types)
    sl = _slices(x.shape, attrs)
    return [TensorType(tuple(sl[a][2] if a in sl else d for a, d in enumerate(x.shape)), x.dtype)]


def _slice_compute(inputs, attrs, out_types):
    (x,) = inputs
    sl = _slices(shape_of(x), attrs)

    def body(*i):
        return x[tuple(sl[a][0] + i[a] * sl[a][1] if a in sl else i[a] for a in range(len(i)))]

    return [te.compute(out_types[0].shape, body, name="strided_slice", tag="strided_slice")]


def _slice_eval(xs, attrs):
    x = xs[0]
    sl = _slices(x.shape, attrs)
    key = []
    for a in range(x.ndim):
        start, step, length = sl.get(a, (0, 1, x.shape[a]))
        stop = start + step * length
        # an empty slice stays empty; a negative stride ending before index 0 needs stop=None, not -1
        key.append(slice(0, 0) if length == 0 else slice(start, None if stop < 0 else stop, step))
    return [x[tuple(key)]]


def _take_infer(in_types, attrs):
    data, indices = require_inputs("take", in_types, ("data", "indices"))
    require_dtype("take", indices, "int", "indices")
    axis = normalize_axis("take", attrs["axis"], len(data.shape))
    if data.shape[axis] == 0:
        raise Error(f"take: axis {axis} of the data {data.shape} is empty")
    return [TensorType(data.shape[:axis] + indices.shape + data.shape[axis + 1:], data.dtype)]


def _take_compute(inputs, attrs, out_types):
    data, indices = inputs
    axis = attrs["axis"] % len(data.shape)
    n, k = shape_of(data)[axis], len(indices.shape)

    def body(*i):
        j = indices[tuple(i[axis:axis + k])].astype("int64")
        j = te.select(j < te.const(0), j + n, j)
        last = te.const(n - 1) if isinstance(n, int) else E.convert(n - 1)  # n: a symbolic dim
        j = te.minimum(te.maximum(j, te.const(0)), last)
        return data[tuple(i[:axis]) + (j,) + tuple(i[axis + k:])]

    return [te.compute(out_types[0].shape, body, name="take", tag="take")]


def _take_eval(xs, attrs):
    data, indices = xs
    axis = attrs["axis"] % data.ndim
    n = data.shape[axis]
    j = indices.astype(np.int64)
    return [np.take(data, np.clip(np.where(j < 0, j + n, j), 0, n - 1), axis=axis)]


def _pad_widths(x: TensorType, attrs: dict) -> list[tuple[int, int]]:
    widths = int_tuple("pad", "pad_width", attrs["pad_width"], 2 * len(x.shape))
    pairs = list(zip(widths[0::2], widths[1::2]))
    mode = attrs["mode"]
    if mode not in ("constant", "edge", "reflect"):
        raise Error(f"pad: mode must be 'constant', 'edge' or 'reflect', got {mode!r}")
    if mode != "constant" and min(widths, default=0) < 0:
        raise Error(f"pad: negative pad widths {widths} are supported only in constant mode")
    for (b, a), d in zip(pairs, x.shape):
        if d + b + a < 0:
            raise Error(f"pad: the widths {widths} remove more than the whole axis of size {d}")
        if mode != "constant" and (b or a) and d == 0:
            raise Error(f"pad: {mode} mode cannot pad an empty axis")
    return pairs


def _pad_infer(in_types, attrs):
    x = _one("pad", in_types)
    pairs = _pad_widths(x, attrs)
    return [TensorType(tuple(d + b + a for d, (b, a) in zip(x.shape, pairs)), x.dtype)]


def _pad_compute(inputs, attrs, out_types):
    (x,) = inputs
    shape = shape_of(x)
    pairs = _pad_widths(TensorType(shape, x.dtype), attrs)
    mode = attrs["mode"]

    def body(*i):
        src, inside = [], []
        for idx, d, (b, _a) in zip(i, shape, pairs):
            j = idx - b if b else idx
            if mode == "constant":
                inside.append(j >= 0)
                inside.append(j < d)
            elif mode == "edge":
                j = te.minimum(te.maximum(j, te.const(0)), te.const(d - 1))
            elif d == 1:
                j = te.const(0)
            else:  # reflect: period 2(d-1), mirrored in its second half
                period = 2 * (d - 1)
                j = te.floormod(j, period)
                j = te.select(j < d, j, period - j)
            src.append(j)
        value = x[tuple(src)]
        if mode != "constant":
            return value
        return te.if_then_else(te.all_of(*inside), value, te.const(attrs["pad_value"], x.dtype))

    return [te.compute(out_types[0].shape, body, name="pad", tag="pad")]


def _pad_eval(xs, attrs):
    x = xs[0]
    pairs = _pad_widths(TensorType(x.shape, str(x.dtype)), attrs)
    # negative widths (constant mode) crop first
    crop = tuple(slice(max(-b, 0), x.shape[k] - max(-a, 0)) for k, (b, a) in enumerate(pairs))
    x = x[crop]
    widths = [(max(b, 0), max(a, 0)) for b, a in pairs]
    if attrs["mode"] == "constant":
        value = np.asarray(attrs["pad_value"]).astype(x.dtype)
        return [np.pad(x, widths, mode="constant", constant_values=value)]
    return [np.pad(x, widths, mode=attrs["mode"])]


def ops() -> list[OpDef]:
    """The injective operators' OpDefs."""
    return [
        _op("reshape", _reshape_infer, _reshape_compute, lambda xs, a: [xs[0].reshape(a["newshape"])],
            {"newshape": Attr(tuple, doc="the static output shape")}, doc="same elements, new shape"),
        _op("transpose", _transpose_infer, _transpose_compute,
            lambda xs, a: [np.transpose(xs[0], _transpose_axes(xs[0].ndim, a["axes"]))],
            {"axes": Attr(TUPLE_OR_NONE, None, "output axis k is input axis axes[k]; None reverses")},
            doc="permute axes"),
        _op("concatenate", _concat_infer, _concat_compute,
            lambda xs, a: [np.concatenate(xs, axis=a["axis"])],
            {"axis": Attr(int, 0),
             "in_place": Attr(bool, False, "the inputs are planned where they lie in the output, so no "
                              "kernel runs (set by a backend's pass; see is_view)")},
            num_inputs=(1, None), doc="join inputs along axis"),
        _op("split", _split_infer, _split_compute, _split_eval,
            {"indices": Attr(tuple, doc="split points along axis"), "axis": Attr(int, 0)}, num_outputs=0,
            doc="cut along axis at the split points: len(indices) + 1 outputs"),
        _op("strided_slice", _slice_infer, _slice_compute, _slice_eval,
            {"begin": Attr(tuple), "end": Attr(tuple), "strides": Attr(TUPLE_OR_NONE, None, "None: all 1"),
             "axes": Attr(TUPLE_OR_NONE, None, "None: the first len(begin) axes")},
            doc="Python slicing per axis (clamped, negative strides allowed)"),
        _op("take", _take_infer, _take_compute, _take_eval, {"axis": Attr(int, 0)}, num_inputs=(2, 2),
            doc="gather along axis (negative indices wrap, out-of-range ones clamp)"),
        _op("pad", _pad_infer, _pad_compute, _pad_eval,
            {"pad_width": Attr(tuple, doc="(before, after) per axis, flattened"),
             "pad_value": float_attr(0.0),
             "mode": Attr(str, "constant", "constant, edge or reflect")},
            doc="pad every axis (constant, edge or reflect)"),
        _op("broadcast_to", _broadcast_to_infer, _broadcast_to_compute,
            lambda xs, a: [np.broadcast_to(xs[0], a["shape"])], {"shape": Attr(tuple)},
            doc="numpy broadcast to a shape"),
        _op("arange", _arange_infer, _arange_compute,
            lambda xs, a: [a["start"] + np.arange(a["length"], dtype=a["dtype"]) * a["delta"]],
            {"start": Attr((int, float), 0), "delta": Attr((int, float), 1), "length": Attr((int, Dim)),
             "dtype": Attr(str, "int64")}, num_inputs=(0, 0),
            doc="start + i * delta for i below length (an int, or a symbolic dim: Range up to seq)"),
        _op("dim_values", _dim_values_infer, _dim_values_compute,
            # only a binding's values evaluate (int() of a symbolic dim raises, naming it)
            lambda xs, a: [np.array([int(v) for v in a["values"]], dtype=np.int64).reshape(a["shape"])],
            {"values": Attr(tuple, doc="ints and symbolic dims, flat"), "shape": Attr(tuple)},
            num_inputs=(0, 0),
            doc="an int64 tensor of symbolic dims' values (a shape computed at import, used as data: "
                "position ids' seq * batch)"),
        _op("tile", _tile_infer, _tile_compute, lambda xs, a: [np.tile(xs[0], a["reps"])],
            {"reps": Attr(tuple)},
            doc="repeat the input reps times along each axis (numpy.tile)"),
    ]

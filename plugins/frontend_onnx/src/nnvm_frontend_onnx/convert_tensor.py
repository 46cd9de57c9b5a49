"""Shape, layout and constant operators.

Shapes in nnvm are static, so everything ONNX computes about shapes (Shape, Size, ConstantOfShape,
Range, and the Gather/Concat/Cast chains over them) becomes a constant here or in the builder's
constant folding, and operators whose shape comes from an input (Reshape, Expand, Slice, Pad ...)
read that input's constant value.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm.frontend.convert import require_at_most
from nnvm.graph.dims import Dim
from nnvm.runtime import host_ops
from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def _axes_input(ctx: Context, inputs, k: int, what: str = "the axes input"):
    """Axes from the ``axes`` attribute (older opsets) or from input ``k`` (newer ones); None if absent."""
    if ctx.has_attr("axes"):
        return tuple(ctx.attr("axes"))
    if len(inputs) > k and inputs[k]:
        return ctx.const_ints(inputs[k], what)
    return None


# -- constants --------------------------------------------------------------------------------------
@converter("Constant")
def convert_constant(ctx: Context, inputs):
    kinds = {"value": None, "value_float": np.float32, "value_floats": np.float32,
             "value_int": np.int64, "value_ints": np.int64}
    for key, dtype in kinds.items():
        if ctx.has_attr(key):
            value = np.asarray(ctx.attr(key), dtype=dtype)
            if value.dtype.kind not in "biuf":
                raise ctx.error(f"constants of type {value.dtype} are not supported")
            return ctx.b.param(ctx.node.output[0], value)
    raise ctx.error(f"unsupported constant attribute(s): {', '.join(ctx.attrs) or 'none'}")


@converter("ConstantOfShape")
def convert_constant_of_shape(ctx: Context, inputs):
    shape = ctx.const_ints(inputs[0], "the shape input")
    value = ctx.attr("value")
    value = np.zeros((1,), np.float32) if value is None else np.asarray(value)
    if any(isinstance(d, Dim) for d in shape):  # of symbolic dims: the scalar broadcast at each run
        return ctx.op("broadcast_to", [ctx.param(value.reshape(()), "value")], {"shape": shape})
    return ctx.b.param(ctx.node.output[0], np.full(shape, value.reshape(-1)[0], dtype=value.dtype))


@converter("Shape")
def convert_shape(ctx: Context, inputs):
    shape = ctx.shape(inputs[0])
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return ctx.param(np.asarray(shape[start:end], dtype=np.int64), "shape")


@converter("Size")
def convert_size(ctx: Context, inputs):
    return ctx.param(np.asarray(math.prod(ctx.shape(inputs[0])), dtype=np.int64), "size")


@converter("Range")
def convert_range(ctx: Context, inputs):
    what = ("the start input", "the limit input", "the delta input")
    start, limit, delta = (ctx.const_value(v) for v in inputs[:3])
    if start is not None and delta is not None and limit is not None and np.asarray(limit).dtype == object:
        # a limit of symbolic dims (``shape_values``) from a constant start by 1: counted at each run
        first, step = np.asarray(start).item(), np.asarray(delta).item()
        end = np.asarray(limit).reshape(-1)[0]
        if step == 1 and isinstance(first, int):
            return ctx.op("arange", [], {"start": first, "delta": 1, "length": end - first,
                                         "dtype": ctx.dtype(inputs[0])})
    start, limit, delta = (ctx.deciding(v, w) for v, w in zip(inputs[:3], what))  # else run on the host
    if delta.item() == 0:
        raise ctx.error("delta is 0")
    return ctx.param(host_ops.arange(start.reshape(()), limit.reshape(()).astype(start.dtype),
                                    delta.reshape(()).astype(start.dtype)), "range")


# -- reshaping --------------------------------------------------------------------------------------
@converter("Reshape")
def convert_reshape(ctx: Context, inputs):
    x = inputs[0]
    spec = tuple(ctx.attr("shape")) if ctx.has_attr("shape") else ctx.const_ints(inputs[1], "the shape input")
    return ctx.reshape(x, resolve_reshape(ctx, ctx.shape(x), spec, bool(ctx.attr("allowzero", 0))))


def resolve_reshape(ctx: Context, in_shape: tuple, spec: tuple, allowzero: bool = False) -> tuple:
    """ONNX's reshape target with 0 (copy the input dimension) and -1 (infer) resolved."""
    out = []
    for i, d in enumerate(spec):
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise ctx.error(f"shape {spec} copies dimension {i}, which {in_shape} does not have")
            d = in_shape[i]
        out.append(d if isinstance(d, Dim) else int(d))
    total = math.prod(in_shape)
    if out.count(-1) > 1:
        raise ctx.error(f"shape {spec} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known != 0:  # dims: the division must be exact as polynomials
            raise ctx.error(f"cannot reshape {in_shape} to {spec}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total or any(isinstance(d, int) and d < 0 for d in out):
        raise ctx.error(f"cannot reshape {in_shape} to {spec}")
    return tuple(out)


@converter("Flatten")
def convert_flatten(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = int(ctx.attr("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise ctx.error(f"axis {axis} is out of range for a rank-{len(shape)} tensor")
    axis = axis + len(shape) if axis < 0 else axis
    return ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))


@converter("Squeeze")
def convert_squeeze(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    axes = _axes_input(ctx, inputs, 1)
    if axes is None:
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = {normalize_axis(a, len(shape), ctx) for a in axes}
    for a in sorted(axes):
        if shape[a] != 1:
            raise ctx.error(f"cannot squeeze axis {a} of size {shape[a]} (shape {shape})")
    return ctx.reshape(x, tuple(d for i, d in enumerate(shape) if i not in axes))


@converter("Unsqueeze")
def convert_unsqueeze(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    given = _axes_input(ctx, inputs, 1)
    if given is None:
        raise ctx.error("the axes are missing")
    rank = len(shape) + len(given)
    axes = {normalize_axis(a, rank, ctx) for a in given}
    if len(axes) != len(given):
        raise ctx.error(f"the axes {given} repeat")
    dims = iter(shape)
    return ctx.reshape(x, tuple(1 if i in axes else next(dims) for i in range(rank)))


@converter("Transpose")
def convert_transpose(ctx: Context, inputs):
    x = inputs[0]
    perm = ctx.attr("perm") or tuple(reversed(range(ctx.rank(x))))
    return ctx.transpose(x, tuple(normalize_axis(p, ctx.rank(x), ctx) for p in perm))


@converter("DepthToSpace", "SpaceToDepth")
def convert_depth_space(ctx: Context, inputs):
    x = inputs[0]
    bs = int(ctx.attr("blocksize"))
    n, c, h, w = ctx.shape(x)
    if ctx.op_type == "SpaceToDepth":
        y = ctx.reshape(x, (n, c, h // bs, bs, w // bs, bs))
        crd = ctx.attr("mode", "DCR") == "CRD"  # opset 25: channel-major blocks
        y = ctx.transpose(y, (0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
        return ctx.reshape(y, (n, c * bs * bs, h // bs, w // bs))
    if ctx.attr("mode", "DCR") == "DCR":
        y = ctx.reshape(x, (n, bs, bs, c // (bs * bs), h, w))
        y = ctx.transpose(y, (0, 3, 4, 1, 5, 2))
    else:
        y = ctx.reshape(x, (n, c // (bs * bs), bs, bs, h, w))
        y = ctx.transpose(y, (0, 1, 4, 2, 5, 3))
    return ctx.reshape(y, (n, c // (bs * bs), h * bs, w * bs))


# -- joining and splitting --------------------------------------------------------------------------
@converter("Concat")
def convert_concat(ctx: Context, inputs):
    values = [v for v in inputs if v]
    axis = normalize_axis(ctx.attr("axis", 1), ctx.rank(values[0]), ctx)
    nonempty = [v for v in values if ctx.shape(v)[axis] != 0] or values[:1]
    if len(nonempty) == 1:
        return nonempty[0]
    return ctx.op("concatenate", nonempty, {"axis": axis})


@converter("Split")
def convert_split(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = normalize_axis(ctx.attr("axis", 0), len(shape), ctx)
    dim = shape[axis]
    n = len(ctx.node.output)
    if ctx.has_attr("split"):
        sizes = tuple(ctx.attr("split"))
    elif len(inputs) > 1 and inputs[1]:
        sizes = ctx.const_ints(inputs[1], "the split input")
    elif ctx.has_attr("num_outputs"):
        chunk = -(-dim // int(ctx.attr("num_outputs")))
        sizes = tuple(min(chunk, dim - k * chunk) for k in range(n))
    else:
        if dim % n:
            raise ctx.error(f"cannot split a dimension of {dim} into {n} equal parts")
        sizes = (dim // n,) * n
    if len(sizes) != n or sum(sizes) != dim or min(sizes) < 0:
        raise ctx.error(f"split sizes {sizes} do not divide a dimension of {dim} into {n} outputs")
    if n == 1:
        return [x]
    points = tuple(int(p) for p in np.cumsum(sizes)[:-1])
    return ctx.ops("split", [x], {"indices": points, "axis": axis}, n)


# -- indexing ---------------------------------------------------------------------------------------
@converter("Slice")
def convert_slice(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    if ctx.has_attr("starts"):  # Slice-1
        starts, ends = ctx.attr("starts"), ctx.attr("ends")
        axes, steps = ctx.attr("axes"), None
    else:
        starts = ctx.const_ints(inputs[1], "the starts input")
        ends = ctx.const_ints(inputs[2], "the ends input")
        axes = ctx.const_ints(inputs[3], "the axes input") if len(inputs) > 3 and inputs[3] else None
        steps = ctx.const_ints(inputs[4], "the steps input") if len(inputs) > 4 and inputs[4] else None
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("starts, ends, axes and steps differ in length")
    begin, end, strides, out_axes, taken = [], [], [], [], []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = normalize_axis(a, len(shape), ctx)
        if st == 0:
            raise ctx.error("a step of 0")
        if any(isinstance(v, Dim) for v in (s, e, shape[a])):
            lo, hi, step = _symbolic_slice(ctx, s, e, st, shape[a], a)
            if isinstance(hi, int) and isinstance(shape[a], Dim):
                # the first rows of a symbolic axis (required at each run): constant indices, where a
                # strided_slice to a constant end would trust an axis no op can check
                taken.append((a, lo, hi))
                continue
        else:
            lo, hi, step = slice(int(s), int(e), int(st)).indices(shape[a])  # ONNX clamps as Python does
        if (lo, hi, step) == (0, shape[a], 1):
            continue
        if step < 0 and hi < 0:
            hi = -shape[a] - 1  # "through index 0", spelled so a negative end is not read as from-the-end
        begin.append(lo)
        end.append(hi)
        strides.append(step)
        out_axes.append(a)
    for a, lo, hi in taken:
        x = ctx.op("take", [x, ctx.param(np.arange(lo, hi, dtype=np.int64), "indices")], {"axis": a})
    if not out_axes:
        return x
    return ctx.op("strided_slice", [x], {"begin": tuple(begin), "end": tuple(end),
                                         "strides": tuple(strides), "axes": tuple(out_axes)})


def _symbolic_slice(ctx: Context, start, end, step, size, axis: int) -> tuple:
    """A slice where the bound or the axis is a symbolic dim: forward from a constant start only, the end
    clamped to the axis. An end that is a dim, over an axis it may not fit, becomes a requirement checked
    at each run (``require_at_most``) instead of a clamp nobody computes."""
    if step != 1 or not isinstance(start, int) or start < 0:
        raise ctx.error(f"axis {axis} (size {size}) sliced from {start} to {end} by {step}: a slice with "
                        "symbolic dims must go forward by 1 from a constant start, for now")
    if isinstance(end, int) and end >= 2 ** 31 - 1:  # "to the end", as exporters spell it
        end = size
    elif isinstance(end, int) and (end < 0 or not isinstance(size, Dim)):
        raise ctx.error(f"axis {axis} (size {size}) sliced to {end}: a slice with symbolic dims must end at "
                        "the axis's end, at a symbolic dim or at a constant within the axis, for now")
    elif end != size:  # a constant or a dim end: the axis must reach it (the first row of a symbolic batch)
        require_at_most(end, size, f"{ctx.label} slices axis {axis} of size {size} to {end}")
    return start, end, 1


@converter("Gather")
def convert_gather(ctx: Context, inputs):
    data, indices = inputs[0], inputs[1]
    axis = normalize_axis(ctx.attr("axis", 0), ctx.rank(data), ctx)
    known = ctx.const_value(indices)
    if known is not None and known.size and known.min() < 0:  # ONNX allows negative indices
        fixed = np.where(known < 0, known + ctx.shape(data)[axis], known).astype(known.dtype)
        indices = ctx.param(fixed, "indices")
    return ctx.op("take", [data, indices], {"axis": axis})


@converter("Pad")
def convert_pad(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    rank = len(shape)
    mode = ctx.attr("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.error(f"mode={mode!r} is not supported")
    if ctx.has_attr("pads") or ctx.has_attr("paddings"):  # Pad-1 and Pad-2
        pads = tuple(ctx.attr("pads", ctx.attr("paddings")))
        value = float(ctx.attr("value", 0.0))
    else:
        pads = ctx.const_ints(inputs[1], "the pads input")
        cv = inputs[2] if len(inputs) > 2 else ""
        value = float(np.asarray(ctx.const(cv, "the constant_value input")).reshape(-1)[0]) if cv else 0.0
        axes = ctx.const_ints(inputs[3], "the axes input") if len(inputs) > 3 and inputs[3] else None
        if axes is not None:
            full = [0] * (2 * rank)
            for i, a in enumerate(axes):
                a = normalize_axis(a, rank, ctx)
                full[a], full[a + rank] = pads[i], pads[i + len(axes)]
            pads = tuple(full)
    if len(pads) != 2 * rank:
        raise ctx.error(f"pads {pads} should have {2 * rank} values")
    before, after = pads[:rank], pads[rank:]
    width = tuple(int(max(0, p)) for pair in zip(before, after) for p in pair)
    out = x
    if mode == "wrap":  # read index (i - before) mod n along each padded axis
        for a in range(rank):
            lo, hi = max(0, before[a]), max(0, after[a])
            if lo or hi:
                idx = np.arange(-lo, shape[a] + hi) % shape[a]
                out = ctx.op("take", [out, ctx.param(idx.astype(np.int64), "wrap")], {"axis": a})
        width = (0,) * len(width)
    if any(width):
        out = ctx.op("pad", [x], {"pad_width": width, "pad_value": value, "mode": mode})
    if min(pads) < 0:  # negative pads crop
        padded = ctx.shape(out)
        axes = [a for a in range(rank) if before[a] < 0 or after[a] < 0]
        begin = tuple(max(0, -before[a]) for a in axes)
        end = tuple(padded[a] - max(0, -after[a]) for a in axes)
        out = ctx.op("strided_slice", [out], {"begin": begin, "end": end, "strides": (1,) * len(axes),
                                              "axes": tuple(axes)})
    return out


@converter("Expand")
def convert_expand(ctx: Context, inputs):
    x = inputs[0]
    target = ctx.const_ints(inputs[1], "the shape input")
    if any(isinstance(d, Dim) for d in (*target, *ctx.shape(x))):
        shape = _broadcast_dims(ctx, ctx.shape(x), target)
    else:
        try:
            shape = tuple(int(d) for d in np.broadcast_shapes(ctx.shape(x), target))
        except ValueError:
            raise ctx.error(f"cannot expand {ctx.shape(x)} to {target}") from None
    if shape == ctx.shape(x):
        return x
    return ctx.op("broadcast_to", [x], {"shape": shape})


def _broadcast_dims(ctx: Context, a: tuple, b: tuple) -> tuple:
    """numpy broadcasting of shapes holding symbolic dims: a dim meets 1 or itself, nothing else."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ctx.error(f"cannot expand {a} to {b}: {x} against {y}")
        out.append(y if x == 1 else x)
    return tuple(out)


@converter("Tile")
def convert_tile(ctx: Context, inputs):
    x = inputs[0]
    if ctx.opset < 6:  # Tile-1: (input, tiles, axis), one axis repeated ``tiles`` times
        reps = [1] * ctx.rank(x)
        axis = normalize_axis(ctx.const_ints(inputs[2], "the axis input")[0], ctx.rank(x), ctx)
        reps[axis] = ctx.const_ints(inputs[1], "the tiles input")[0]
        reps = tuple(reps)
    else:
        reps = ctx.const_ints(inputs[1], "the repeats input")
    if len(reps) != ctx.rank(x):
        raise ctx.error(f"repeats {reps} should have one value per dimension of {ctx.shape(x)}")
    if all(r == 1 for r in reps):
        return x
    return ctx.op("tile", [x], {"reps": reps})


@converter("ReverseSequence")
def convert_reverse_sequence(ctx: Context, inputs):
    """Reverse the first ``sequence_lens[b]`` steps of each batch entry: a ``gather_elements`` along
    the time axis with constant indices (the lengths are specialized on when they are inputs)."""
    x = inputs[0]
    lens = ctx.const_ints(inputs[1], "the sequence_lens input")
    shape = ctx.shape(x)
    t_axis, b_axis = int(ctx.attr("time_axis", 0)), int(ctx.attr("batch_axis", 1))
    steps = np.arange(shape[t_axis])
    table = np.stack([np.where(steps < n, n - 1 - steps, steps) for n in lens], axis=1)  # (T, B)
    if t_axis > b_axis:
        table = table.T
    view = [1] * len(shape)
    view[t_axis], view[b_axis] = shape[t_axis], shape[b_axis]
    index = np.broadcast_to(table.reshape(view), shape).astype(np.int64)
    index = ctx.param(np.ascontiguousarray(index), "reversed")
    return ctx.op("gather_elements", [x, index], {"axis": t_axis})

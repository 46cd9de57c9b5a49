"""Neural-network operators: convolution, dense and matmul, normalizations, softmax, LRN.

Layouts are NCHW data and OIHW weights. ``conv2d`` pads in a separate stage (tag ``injective``, inlined
by schedules) and reduces in a stage tagged ``conv2d`` whose ``attrs`` carry the workload, so a
target's schedule recognizes it without re-deriving shapes. Multi-stage operators (softmax, norms)
compute their statistics in reduction stages and normalize in a final elementwise stage.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import (
    broadcast_read,
    broadcast_shapes,
    checked_evaluate,
    float_attr,
    int_tuple,
    normalize_axis,
    prod,
    require_dtype,
    require_inputs,
    require_rank,
    same_dtypes,
    shape_of,
)
from nnvm.ops.reduce import reduce_axes_read
from nnvm.ops.registry import Attr, OpDef, OpPattern

# ---------------------------------------------------------------------------------------------------
# conv2d


def conv2d_geometry(data: tuple, weight: tuple, attrs: dict) -> tuple:
    """Output shape of conv2d, after checking every attribute against the shapes."""
    strides = int_tuple("conv2d", "strides", attrs["strides"], 2)
    padding = int_tuple("conv2d", "padding", attrs["padding"], 4)
    dilation = int_tuple("conv2d", "dilation", attrs["dilation"], 2)
    groups = attrs["groups"]
    if min(strides) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise Error(f"conv2d: strides and dilation must be positive and padding non-negative, got "
                    f"strides={strides}, dilation={dilation}, padding={padding}")
    n, c, h, w = data
    o, cg, kh, kw = weight
    if groups < 1 or c % groups or o % groups:
        raise Error(f"conv2d: groups={groups} must divide both the {c} input channels and the {o} output "
                    "channels")
    if cg * groups != c:
        raise Error(f"conv2d: the weight expects {cg * groups} input channels ({cg} per group x {groups} "
                    f"groups) but the data has {c}")
    oh = (h + padding[0] + padding[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise Error(f"conv2d: the {kh}x{kw} kernel (dilation {dilation}) is larger than the padded "
                    f"{h}x{w} input")
    return (n, o, oh, ow)


def _conv2d_infer(in_types, attrs):
    data, weight = require_inputs("conv2d", in_types, ("data", "weight"))
    require_rank("conv2d", data, 4, "NCHW data")
    require_rank("conv2d", weight, 4, "OIHW weight")
    dtype = same_dtypes("conv2d", [data, weight])
    require_dtype("conv2d", data, "number")
    return [TensorType(conv2d_geometry(data.shape, weight.shape, attrs), dtype)]


def pad_nchw(data: te.Tensor, top: int, left: int, bottom: int, right: int, value=0, name="pad"):
    """Zero (or ``value``) padding of the two spatial axes; ``data`` itself when there is none."""
    if not (top or left or bottom or right):
        return data
    n, c, h, w = shape_of(data)

    def body(b, ch, y, x):
        inside = te.all_of(y >= top, y < top + h, x >= left, x < left + w)
        return te.if_then_else(inside, data[b, ch, y - top, x - left], te.const(value, data.dtype))

    return te.compute((n, c, h + top + bottom, w + left + right), body, name=name, tag="injective")


def _conv2d_compute(inputs, attrs, out_types):
    data, weight = inputs
    shape = out_types[0].shape
    (sh, sw), (dh, dw), groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    o_total, cg, kh, kw = shape_of(weight)
    padded = pad_nchw(data, *attrs["padding"])
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    og = o_total // groups

    def body(n, o, y, x):
        c = rc.var if groups == 1 else (o // og) * cg + rc.var
        return te.sum(padded[n, c, y * sh + ry * dh, x * sw + rx * dw] * weight[o, rc, ry, rx],
                      axis=[rc, ry, rx])

    workload = {
        "data_shape": shape_of(data), "kernel_shape": shape_of(weight), "strides": tuple(attrs["strides"]),
        "padding": tuple(attrs["padding"]), "dilation": tuple(attrs["dilation"]), "groups": groups,
        "dtype": data.dtype, "layout": "NCHW", "depthwise": groups > 1 and groups == shape_of(data)[1],
    }
    return [te.compute(shape, body, name="conv2d", tag="conv2d", attrs={"workload": workload, **workload})]


def _conv2d_eval(xs, attrs):
    data, weight = xs
    n, o, oh, ow = conv2d_geometry(data.shape, weight.shape, attrs)
    (sh, sw), (dh, dw), groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    pt, pl, pb, pr = attrs["padding"]
    x = np.pad(data, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    _, cg, kh, kw = weight.shape
    og = o // groups
    acc = np.zeros((n, o, oh, ow), dtype=np.float64 if data.dtype.kind == "f" else np.int64)
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        wg = weight[g * og:(g + 1) * og]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                acc[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, wg[:, :, i, j])
    return [acc]


# ---------------------------------------------------------------------------------------------------
# dense and matmul


def _dense_infer(in_types, attrs):
    data, weight = require_inputs("dense", in_types, ("data", "weight"))
    require_rank("dense", data, 2, "data [M, K]")
    require_rank("dense", weight, 2, "weight [N, K]")
    dtype = same_dtypes("dense", [data, weight])
    if data.shape[1] != weight.shape[1]:
        raise Error(f"dense: the data has K={data.shape[1]} but the weight [N, K] has K={weight.shape[1]}")
    return [TensorType((data.shape[0], weight.shape[0]), dtype)]


def _dense_compute(inputs, attrs, out_types):
    data, weight = inputs
    m, k = shape_of(data)
    n = shape_of(weight)[0]
    rk = te.reduce_axis((0, k), name="k")
    workload = {"data_shape": (m, k), "weight_shape": (n, k), "dtype": data.dtype}
    return [te.compute((m, n), lambda i, j: te.sum(data[i, rk] * weight[j, rk], axis=rk), name="dense",
                       tag="dense", attrs={"workload": workload, **workload})]


def matmul_shapes(a: tuple, b: tuple) -> tuple:
    """numpy matmul's output shape (1-D operands promoted then dropped, batch axes broadcast)."""
    if not a or not b:
        raise Error(f"matmul: operands must be at least 1-D, got shapes {a} and {b}")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise Error(f"matmul: the contracted sizes differ: {a} @ {b}")
    batch = broadcast_shapes("matmul", a2[:-2], b2[:-2])
    return batch + (() if len(a) == 1 else (a2[-2],)) + (() if len(b) == 1 else (b2[-1],))


def _matmul_infer(in_types, attrs):
    a, b = require_inputs("matmul", in_types, ("a", "b"))
    dtype = same_dtypes("matmul", [a, b])
    return [TensorType(matmul_shapes(a.shape, b.shape), dtype)]


def _matmul_compute(inputs, attrs, out_types):
    a, b = inputs
    sa, sb = shape_of(a), shape_of(b)
    k = sa[-1]
    nb = len(out_types[0].shape) - (len(sa) > 1) - (len(sb) > 1)
    rk = te.reduce_axis((0, k), name="k")

    def body(*i):
        batch = i[:nb]
        rest = list(i[nb:])
        m = rest.pop(0) if len(sa) > 1 else None
        n = rest.pop(0) if len(sb) > 1 else None
        ra = (rk.var,) if len(sa) == 1 else _batch_read(sa, batch) + (m, rk.var)
        rb = (rk.var,) if len(sb) == 1 else _batch_read(sb, batch) + (rk.var, n)
        return te.sum(a[ra] * b[rb], axis=rk)

    return [te.compute(out_types[0].shape, body, name="matmul", tag="matmul")]


def _batch_read(shape: tuple, batch: tuple) -> tuple:
    dims = shape[:-2]
    off = len(batch) - len(dims)
    return tuple(te.const(0) if d == 1 else batch[off + j] for j, d in enumerate(dims))


# ---------------------------------------------------------------------------------------------------
# batch_norm, layer_norm, instance_norm


def _batch_norm_infer(in_types, attrs):
    names = ("data", "gamma", "beta", "moving_mean", "moving_var")
    types = require_inputs("batch_norm", in_types, names)
    data = types[0]
    require_dtype("batch_norm", data, "float")
    same_dtypes("batch_norm", types)
    axis = normalize_axis("batch_norm", attrs["axis"], len(data.shape))
    for t, name in zip(types[1:], names[1:]):
        if t.shape != (data.shape[axis],):
            raise Error(f"batch_norm: {name} must have shape ({data.shape[axis]},) for axis {axis} of the "
                        f"data {data.shape}, got {t.shape}")
    return [data]


def _batch_norm_compute(inputs, attrs, out_types):
    data, gamma, beta, mean, var = inputs
    axis = attrs["axis"] % len(data.shape)
    eps = te.const(attrs["epsilon"], data.dtype)

    def body(*i):
        c = i[axis]
        return (data[i] - mean[c]) / te.sqrt(var[c] + eps) * gamma[c] + beta[c]

    return [te.compute(data.shape, body, name="batch_norm", tag="batch_norm")]


def _batch_norm_eval(xs, attrs):
    data, gamma, beta, mean, var = xs
    shape = (-1,) + (1,) * (data.ndim - attrs["axis"] % data.ndim - 1)
    r = [v.reshape(shape) for v in (gamma, beta, mean, var)]
    return [(data - r[2]) / np.sqrt(r[3] + attrs["epsilon"]) * r[0] + r[1]]


def _norm_axes(op: str, data: TensorType, attrs: dict) -> tuple:
    if op == "instance_norm":
        if len(data.shape) < 3:
            raise Error(f"instance_norm expects data of rank 3 or more (N, C, ...), got shape {data.shape}")
        return tuple(range(2, len(data.shape)))
    axis = normalize_axis(op, attrs["axis"], len(data.shape))
    return tuple(range(axis, len(data.shape)))


def _broadcasts_to(shape: tuple, target: tuple) -> bool:
    try:
        return len(shape) <= len(target) and broadcast_shapes("", shape, target) == target
    except Error:
        return False


def _make_norm(op: str) -> OpDef:
    """layer_norm normalizes over axes axis..end; instance_norm over the spatial axes per (N, C)."""

    def affine_shape(data: TensorType, axes: tuple) -> tuple:
        return (data.shape[1],) if op == "instance_norm" else tuple(data.shape[a] for a in axes)

    def infer_type(in_types, attrs):
        (data, gamma) = require_inputs(op, in_types, ("data", "gamma"))
        beta = in_types[2] if len(in_types) > 2 else None
        require_dtype(op, data, "float")
        axes = _norm_axes(op, data, attrs)
        want = affine_shape(data, axes)
        for t, name in ((gamma, "gamma"), (beta, "beta")):
            if t is None:
                continue
            same_dtypes(op, [data, t])
            ok = t.shape == want if op == "instance_norm" else _broadcasts_to(t.shape, want)
            if not ok:
                raise Error(f"{op}: {name} must have shape {want} for data {data.shape}, got {t.shape}")
        return [data]

    def compute(inputs, attrs, out_types):
        data, gamma = inputs[0], inputs[1]
        beta = inputs[2] if len(inputs) > 2 else None
        shape = shape_of(data)
        axes = _norm_axes(op, out_types[0], attrs)
        count = prod(shape[a] for a in axes)
        stat_shape = tuple(d for k, d in enumerate(shape) if k not in axes)
        nstat = len(stat_shape)
        n = te.const(count, data.dtype)

        def total(*i):
            rvs, idx = reduce_axes_read(data, axes, False, i)
            return te.sum(data[idx], axis=rvs)

        s1 = te.compute(stat_shape, total, name=f"{op}_sum", tag="sum")

        def squares(*i):
            rvs, idx = reduce_axes_read(data, axes, False, i)
            d = data[idx] - s1[i] / n
            return te.sum(d * d, axis=rvs)

        s2 = te.compute(stat_shape, squares, name=f"{op}_sqsum", tag="sum")
        eps = te.const(attrs["epsilon"], data.dtype)

        def body(*i):
            stat = i[:nstat]
            if op == "instance_norm":
                g, b = gamma[i[1]], (beta[i[1]] if beta is not None else None)
            else:
                g = broadcast_read(gamma, i[nstat:])
                b = broadcast_read(beta, i[nstat:]) if beta is not None else None
            y = (data[i] - s1[stat] / n) / te.sqrt(s2[stat] / n + eps) * g
            return y + b if b is not None else y

        return [te.compute(shape, body, name=op, tag=op)]

    def evaluate(xs, attrs):
        data, gamma = xs[0], xs[1]
        beta = xs[2] if len(xs) > 2 else None
        axes = _norm_axes(op, TensorType(data.shape, str(data.dtype)), attrs)
        x = data.astype(np.float64)
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        if op == "instance_norm":
            bshape = (-1,) + (1,) * (data.ndim - 2)
            gamma = gamma.reshape(bshape)
            beta = beta.reshape(bshape) if beta is not None else None
        y = (x - mean) / np.sqrt(var + attrs["epsilon"]) * gamma
        return [y + beta if beta is not None else y]

    attrs = {"epsilon": float_attr(1e-5)}
    if op == "layer_norm":
        attrs["axis"] = Attr(int, -1, "normalize over axes axis..end")
    return OpDef(op, infer_type, compute, OpPattern.OPAQUE, attrs=attrs, num_inputs=(2, 3),
                 evaluate=checked_evaluate(infer_type, evaluate),
                 doc=f"{op}: (x - mean) / sqrt(var + epsilon) * gamma + beta (beta optional)")


# ---------------------------------------------------------------------------------------------------
# softmax, log_softmax, lrn


def _make_softmax(op: str) -> OpDef:
    def infer_type(in_types, attrs):
        (x,) = require_inputs(op, in_types, ("data",))
        require_dtype(op, x, "float")
        normalize_axis(op, attrs["axis"], len(x.shape))
        return [x]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        shape = shape_of(x)
        axis = normalize_axis(op, attrs["axis"], len(shape))
        stat_shape = shape[:axis] + shape[axis + 1:]

        def drop(i):
            return tuple(i[:axis]) + tuple(i[axis + 1:])

        def biggest(*i):
            rvs, idx = reduce_axes_read(x, (axis,), False, i)
            return te.max(x[idx], axis=rvs)

        m = te.compute(stat_shape, biggest, name=f"{op}_max", tag="max")

        def expsum(*i):
            rvs, idx = reduce_axes_read(x, (axis,), False, i)
            return te.sum(te.exp(x[idx] - m[i]), axis=rvs)

        s = te.compute(stat_shape, expsum, name=f"{op}_expsum", tag="sum")
        if op == "softmax":
            def body(*i):
                return te.exp(x[i] - m[drop(i)]) / s[drop(i)]
        else:
            def body(*i):
                return x[i] - m[drop(i)] - te.log(s[drop(i)])
        return [te.compute(shape, body, name=op, tag=op)]

    def evaluate(xs, attrs):
        x = xs[0].astype(np.float64)
        axis = attrs["axis"]
        z = x - x.max(axis=axis, keepdims=True)
        lse = np.log(np.exp(z).sum(axis=axis, keepdims=True))
        return [np.exp(z - lse) if op == "softmax" else z - lse]

    return OpDef(op, infer_type, compute, OpPattern.OPAQUE, attrs={"axis": Attr(int, -1)}, num_inputs=(1, 1),
                 evaluate=checked_evaluate(infer_type, evaluate), doc=f"{op} along axis")


def _lrn_infer(in_types, attrs):
    (x,) = require_inputs("lrn", in_types, ("data",))
    require_dtype("lrn", x, "float")
    if len(x.shape) < 3:
        raise Error(f"lrn expects data of rank 3 or more (N, C, ...), got shape {x.shape}")
    if attrs["size"] < 1:
        raise Error(f"lrn: size must be positive, got {attrs['size']}")
    return [x]


def _lrn_compute(inputs, attrs, out_types):
    (x,) = inputs
    shape = shape_of(x)
    size, channels = attrs["size"], shape[1]
    before = (size - 1) // 2
    rk = te.reduce_axis((0, size), name="rk")

    def square_sum(*i):
        c = i[1] - before + rk.var
        v = x[(i[0], c) + tuple(i[2:])]
        return te.sum(v * v, axis=rk, where=te.all_of(c >= 0, c < channels))

    sq = te.compute(shape, square_sum, name="lrn_sqsum", tag="sum")
    dt = x.dtype

    def body(*i):
        scale = te.const(attrs["bias"], dt) + te.const(attrs["alpha"] / size, dt) * sq[i]
        return x[i] / te.power(scale, te.const(attrs["beta"], dt))

    return [te.compute(shape, body, name="lrn", tag="lrn")]


def _lrn_eval(xs, attrs):
    x = xs[0].astype(np.float64)
    size, channels = attrs["size"], x.shape[1]
    before, after = (size - 1) // 2, size // 2
    sq = np.zeros_like(x)
    for c in range(channels):
        lo, hi = max(0, c - before), min(channels - 1, c + after)
        sq[:, c] = (x[:, lo:hi + 1] ** 2).sum(axis=1)
    return [x / (attrs["bias"] + attrs["alpha"] / size * sq) ** attrs["beta"]]


def ops() -> list[OpDef]:
    """The neural-network operators' OpDefs (pooling lives in ``pool.py``)."""
    out = [
        OpDef("conv2d", _conv2d_infer, _conv2d_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs={"strides": Attr(tuple, (1, 1)),
                     "padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right"),
                     "dilation": Attr(tuple, (1, 1)), "groups": Attr(int, 1)},
              num_inputs=(2, 2), evaluate=checked_evaluate(_conv2d_infer, _conv2d_eval),
              doc="2-D convolution, NCHW data and OIHW weights (grouped and depthwise too)"),
        OpDef("dense", _dense_infer, _dense_compute, OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 2),
              evaluate=checked_evaluate(_dense_infer, lambda xs, a: [xs[0] @ xs[1].T]),
              doc="data [M, K] times weight [N, K] transposed: [M, N]"),
        OpDef("matmul", _matmul_infer, _matmul_compute, OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 2),
              evaluate=checked_evaluate(_matmul_infer, lambda xs, a: [np.matmul(xs[0], xs[1])]),
              doc="numpy matmul (batch broadcasting, 1-D operands)"),
        OpDef("batch_norm", _batch_norm_infer, _batch_norm_compute, OpPattern.BROADCAST,
              attrs={"epsilon": float_attr(1e-5), "axis": Attr(int, 1)}, num_inputs=(5, 5),
              evaluate=checked_evaluate(_batch_norm_infer, _batch_norm_eval),
              doc="inference batch norm: (x - mean) / sqrt(var + epsilon) * gamma + beta along axis"),
        OpDef("lrn", _lrn_infer, _lrn_compute, OpPattern.OPAQUE,
              attrs={"size": Attr(int), "alpha": float_attr(1e-4), "beta": float_attr(0.75),
                     "bias": float_attr(1.0)},
              num_inputs=(1, 1), evaluate=checked_evaluate(_lrn_infer, _lrn_eval),
              doc="local response normalization across channels (ONNX LRN)"),
    ]
    out += [_make_softmax("softmax"), _make_softmax("log_softmax")]
    out += [_make_norm("layer_norm"), _make_norm("instance_norm")]
    return out

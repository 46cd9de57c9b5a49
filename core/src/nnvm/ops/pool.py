"""2-D pooling over NCHW data with ONNX semantics: ``max_pool2d, avg_pool2d`` and the global pools.

Padded positions never take part in a max; an average divides by the number of real elements
(``count_include_pad=False``) or of elements inside the padded input (``True``). With ``ceil_mode`` the
output may have one more window per axis, except that a window starting past the input and its
leading padding is dropped (ONNX, PyTorch). Windows read the input under a reduction mask instead of
from a padded copy, and an average's divisor is a closed-form expression of the output position.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, int_tuple, require_dtype, require_inputs, require_rank, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern


def pool_out_size(size: int, k: int, s: int, d: int, before: int, after: int, ceil_mode: bool) -> int:
    """How many windows (size k, stride s, dilation d) fit along one padded axis, counted as ONNX does."""
    span = size + before + after - (d * (k - 1) + 1)
    if span < 0:
        return 0
    if not ceil_mode:
        return span // s + 1
    out = -(-span // s) + 1
    if (out - 1) * s >= size + before:  # the last window would start in the trailing padding
        out -= 1
    return out


def _params(op: str, attrs: dict):
    k = int_tuple(op, "pool_size", attrs["pool_size"], 2)
    s = int_tuple(op, "strides", attrs["strides"], 2)
    p = int_tuple(op, "padding", attrs["padding"], 4)
    d = int_tuple(op, "dilation", attrs["dilation"], 2)
    if min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise Error(f"{op}: pool_size, strides and dilation must be positive and padding non-negative, got "
                    f"pool_size={k}, strides={s}, dilation={d}, padding={p}")
    if p[0] >= k[0] * d[0] or p[2] >= k[0] * d[0] or p[1] >= k[1] * d[1] or p[3] >= k[1] * d[1]:
        raise Error(f"{op}: padding {p} must be smaller than the window {k} (dilation {d})")
    return k, s, p, d


def _make_pool(op: str) -> OpDef:
    is_max = op == "max_pool2d"

    def geometry(shape: tuple, attrs: dict) -> tuple:
        (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = _params(op, attrs)
        n, c, h, w = shape
        oh = pool_out_size(h, kh, sh, dh, pt, pb, attrs["ceil_mode"])
        ow = pool_out_size(w, kw, sw, dw, pl, pr, attrs["ceil_mode"])
        if oh < 1 or ow < 1:
            raise Error(f"{op}: the {kh}x{kw} window (dilation {(dh, dw)}) is larger than the padded {h}x{w} "
                        "input")
        return (n, c, oh, ow)

    def infer_type(in_types, attrs):
        (x,) = require_inputs(op, in_types, ("data",))
        require_rank(op, x, 4, "NCHW data")
        require_dtype(op, x, "float" if not is_max else "number")
        return [TensorType(geometry(x.shape, attrs), x.dtype)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = _params(op, attrs)
        _, _, h, w = shape_of(x)
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kw), name="rx")

        def window(n, c, y, xx):
            iy, ix = y * sh + ry * dh - pt, xx * sw + rx * dw - pl
            return x[n, c, iy, ix], te.all_of(iy >= 0, iy < h, ix >= 0, ix < w)

        if is_max:
            def body(n, c, y, xx):
                v, inside = window(n, c, y, xx)
                return te.max(v, axis=[ry, rx], where=inside)

            return [te.compute(out_types[0].shape, body, name=op, tag=op)]

        def total(n, c, y, xx):
            v, inside = window(n, c, y, xx)
            return te.sum(v, axis=[ry, rx], where=inside)

        s = te.compute(out_types[0].shape, total, name=f"{op}_sum", tag="sum")
        include = attrs["count_include_pad"]
        lo_y, hi_y = (-pt, h + pb) if include else (0, h)
        lo_x, hi_x = (-pl, w + pr) if include else (0, w)

        def body(n, c, y, xx):
            cy = _count(y * sh - pt, lo_y, hi_y, kh, dh)
            cx = _count(xx * sw - pl, lo_x, hi_x, kw, dw)
            return s[n, c, y, xx] / (cy * cx).astype(x.dtype)

        return [te.compute(out_types[0].shape, body, name=op, tag=op)]

    def evaluate(xs, attrs):
        (x,) = xs
        (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = _params(op, attrs)
        n, c, oh, ow = geometry(x.shape, attrs)
        h, w = x.shape[2:]
        out = np.zeros((n, c, oh, ow), dtype=np.float64 if x.dtype.kind == "f" else x.dtype)
        include = not is_max and attrs["count_include_pad"]
        for y in range(oh):
            for xx in range(ow):
                rows = [y * sh - pt + i * dh for i in range(kh)]
                cols = [xx * sw - pl + j * dw for j in range(kw)]
                ys = [r for r in rows if 0 <= r < h]
                xs_ = [q for q in cols if 0 <= q < w]
                patch = x[:, :, ys][:, :, :, xs_]
                if is_max:
                    out[:, :, y, xx] = patch.max(axis=(2, 3))
                    continue
                if include:
                    count = (sum(-pt <= r < h + pb for r in rows) * sum(-pl <= q < w + pr for q in cols))
                else:
                    count = len(ys) * len(xs_)
                out[:, :, y, xx] = patch.astype(np.float64).sum(axis=(2, 3)) / count
        return [out]

    attrs = {
        "pool_size": Attr(tuple, doc="window (height, width)"),
        "strides": Attr(tuple, (1, 1)),
        "padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right"),
        "dilation": Attr(tuple, (1, 1)),
        "ceil_mode": Attr(bool, False, "round the output size up (ONNX ceil_mode)"),
    }
    if not is_max:
        attrs["count_include_pad"] = Attr(bool, False, "divide by the window size including padding")
    return OpDef(op, infer_type, compute, OpPattern.OUT_ELEMWISE_FUSABLE, attrs=attrs, num_inputs=(1, 1),
                 evaluate=checked_evaluate(infer_type, evaluate),
                 doc=f"2-D {'max' if is_max else 'average'} pooling over NCHW data (ONNX semantics)")


def _count(base, lo: int, hi: int, k: int, d: int):
    """How many of base, base + d, ..., base + (k-1)*d lie in [lo, hi) (an int64 expression)."""

    def first_at_or_above(bound):  # ceil((bound - base) / d), clamped to [0, k]
        steps = te.floordiv(bound - base + (d - 1), d)
        return te.minimum(te.maximum(steps, te.const(0)), te.const(k))

    return first_at_or_above(hi) - first_at_or_above(lo)


def _make_global(op: str) -> OpDef:
    is_max = op == "global_max_pool2d"

    def infer_type(in_types, attrs):
        (x,) = require_inputs(op, in_types, ("data",))
        require_rank(op, x, 4, "NCHW data")
        require_dtype(op, x, "number" if is_max else "float")
        if x.shape[2] * x.shape[3] == 0:
            raise Error(f"{op}: the data {x.shape} has no spatial elements")
        return [TensorType(x.shape[:2] + (1, 1), x.dtype)]

    def compute(inputs, attrs, out_types):
        (x,) = inputs
        n, c, h, w = shape_of(x)
        ry = te.reduce_axis((0, h), name="ry")
        rx = te.reduce_axis((0, w), name="rx")
        shape = (n, c, 1, 1)
        if is_max:
            return [te.compute(shape, lambda b, ch, i, j: te.max(x[b, ch, ry, rx], axis=[ry, rx]), name=op,
                               tag=op)]
        s = te.compute(shape, lambda b, ch, i, j: te.sum(x[b, ch, ry, rx], axis=[ry, rx]), name=f"{op}_sum",
                       tag="sum")
        return [te.compute(shape, lambda *i: s[i] / te.const(h * w, x.dtype), name=op, tag=op)]

    def evaluate(xs, attrs):
        fn = np.max if is_max else np.mean
        return [fn(xs[0], axis=(2, 3), keepdims=True)]

    return OpDef(op, infer_type, compute, OpPattern.REDUCTION, num_inputs=(1, 1),
                 evaluate=checked_evaluate(infer_type, evaluate),
                 doc=f"{'max' if is_max else 'mean'} over H and W, keeping them as 1 x 1")


def ops() -> list[OpDef]:
    """The pooling operators' OpDefs."""
    return [_make_pool("max_pool2d"), _make_pool("avg_pool2d"), _make_global("global_max_pool2d"),
            _make_global("global_avg_pool2d")]

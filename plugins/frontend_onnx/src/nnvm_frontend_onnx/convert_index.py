"""Indexing, masking and selection: Trilu, EyeLike, OneHot, GatherElements, GatherND, ScatterElements,
ScatterND, CumSum, CumProd, TopK, Hardmax, Compress.

Where an operator is a composition of comparisons with constant index ranges (one-hot masks), it is
written so here, which keeps integer and bool results exact; the element-wise gathers and scatters
and running totals use the core's ``gather_elements``, ``scatter_elements``, ``cumsum``, ``cumprod``.
"""

from __future__ import annotations

import math

import numpy as np

from nnvm.runtime import host_ops
from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def _zero(ctx: Context, like: str) -> str:
    return ctx.param(np.zeros((), dtype=ctx.dtype(like)), "zero")


@converter("Trilu")
def convert_trilu(ctx: Context, inputs):
    x = inputs[0]
    k = int(ctx.const_ints(inputs[1], "the k input")[0]) if len(inputs) > 1 and inputs[1] else 0
    n, m = ctx.shape(x)[-2:]
    ones = np.ones((n, m), dtype=bool)
    mask = np.triu(ones, k) if ctx.attr("upper", 1) else np.tril(ones, k)
    return ctx.op("where", [ctx.param(mask, "mask"), x, _zero(ctx, x)])


@converter("EyeLike")
def convert_eye_like(ctx: Context, inputs):
    x = inputs[0]
    dtype = ctx.attr_dtype("dtype", ctx.dtype(x))
    n, m = ctx.shape(x)
    return ctx.param(np.eye(n, m, int(ctx.attr("k", 0)), dtype=dtype), "eye")


def _wrap_negative(ctx: Context, idx: str, size: int) -> str:
    """``idx + size`` where ``idx < 0`` (ONNX's negative indices), constants folded."""
    neg = ctx.op("less", [idx, ctx.scalar(0, idx)])
    return ctx.op("where", [neg, ctx.op("add", [idx, ctx.scalar(size, idx)]), idx])


@converter("OneHot")
def convert_one_hot(ctx: Context, inputs):
    indices, depth_v, values = inputs[:3]
    depth = int(np.asarray(ctx.const(depth_v, "the depth input")).reshape(-1)[0])
    rank = ctx.rank(indices) + 1
    axis = normalize_axis(ctx.attr("axis", -1), rank, ctx)
    idx = ctx.cast(indices, "int64") if ctx.dtype(indices) != "int64" else indices
    idx = _wrap_negative(ctx, idx, depth)
    shape = list(ctx.shape(indices))
    expanded = ctx.reshape(idx, shape[:axis] + [1] + shape[axis:])
    positions = ctx.param(
        np.arange(depth, dtype=np.int64).reshape([depth] + [1] * (rank - axis - 1)), "range"
    )
    hot = ctx.op("equal", [expanded, positions])
    off = ctx.reshape(
        ctx.op("strided_slice", [values], {"begin": (0,), "end": (1,), "strides": (1,), "axes": (0,)}), ()
    )
    on = ctx.reshape(
        ctx.op("strided_slice", [values], {"begin": (1,), "end": (2,), "strides": (1,), "axes": (0,)}), ()
    )
    return ctx.op("where", [hot, on, off])


@converter("GatherElements")
def convert_gather_elements(ctx: Context, inputs):
    data, indices = inputs[:2]
    axis = normalize_axis(ctx.attr("axis", 0), ctx.rank(data), ctx)
    return ctx.op("gather_elements", [data, indices], {"axis": axis})


@converter("ScatterElements", "Scatter")
def convert_scatter_elements(ctx: Context, inputs):
    data, indices, updates = inputs[:3]
    axis = normalize_axis(ctx.attr("axis", 0), ctx.rank(data), ctx)
    return ctx.op(
        "scatter_elements",
        [data, indices, updates],
        {"axis": axis, "reduction": ctx.attr("reduction", "none")},
    )


def _linear_index(ctx: Context, data_shape: tuple, indices: str, batch_dims: int) -> tuple[str, int]:
    """GatherND/ScatterND's index tuples (last axis of ``indices``) as one row index into ``data``
    reshaped to ``(prod(shape[:batch_dims + k]), *rest)``; returns (index, k)."""
    ishape = ctx.shape(indices)
    k = ishape[-1]
    idx = ctx.cast(indices, "int64")
    dims = data_shape[batch_dims : batch_dims + k]
    strides = [math.prod(dims[j + 1 :]) for j in range(k)]
    total = None
    for j in range(k):
        comp = ctx.op(
            "strided_slice",
            [idx],
            {"begin": (j,), "end": (j + 1,), "strides": (1,), "axes": (len(ishape) - 1,)},
        )
        comp = ctx.reshape(_wrap_negative(ctx, comp, dims[j]), ishape[:-1])
        term = ctx.op("multiply", [comp, ctx.scalar(strides[j], comp)]) if strides[j] != 1 else comp
        total = term if total is None else ctx.op("add", [total, term])
    if total is None:
        total = ctx.param(np.zeros(ishape[:-1], dtype=np.int64), "index")
    if batch_dims:
        batch = data_shape[:batch_dims]
        offsets = (np.arange(math.prod(batch), dtype=np.int64) * math.prod(dims)).reshape(
            batch + (1,) * (len(ishape) - 1 - batch_dims)
        )
        total = ctx.op("add", [total, ctx.param(offsets, "batch_offsets")])
    return total, k


@converter("GatherND")
def convert_gather_nd(ctx: Context, inputs):
    data, indices = inputs[:2]
    shape = ctx.shape(data)
    b = int(ctx.attr("batch_dims", 0))
    row, k = _linear_index(ctx, shape, indices, b)
    flat = ctx.reshape(data, (math.prod(shape[: b + k]),) + shape[b + k :])
    return ctx.op("take", [flat, row], {"axis": 0})


@converter("ScatterND")
def convert_scatter_nd(ctx: Context, inputs):
    data, indices, updates = inputs[:3]
    shape = ctx.shape(data)
    row, k = _linear_index(ctx, shape, indices, 0)
    rest = math.prod(shape[k:])
    flat = ctx.reshape(data, (math.prod(shape[:k]), rest))
    n_updates = math.prod(ctx.shape(row))
    rows = ctx.op("broadcast_to", [ctx.reshape(row, (n_updates, 1))], {"shape": (n_updates, rest)})
    upd = ctx.reshape(updates, (n_updates, rest))
    out = ctx.op(
        "scatter_elements", [flat, rows, upd], {"axis": 0, "reduction": ctx.attr("reduction", "none")}
    )
    return ctx.reshape(out, shape)


@converter("CumSum", "CumProd")
def convert_cumulative(ctx: Context, inputs):
    x = inputs[0]
    axis = normalize_axis(ctx.const_ints(inputs[1], "the axis input")[0], ctx.rank(x), ctx)
    return ctx.op(
        "cumsum" if ctx.op_type == "CumSum" else "cumprod",
        [x],
        {"axis": axis, "exclusive": bool(ctx.attr("exclusive", 0)), "reverse": bool(ctx.attr("reverse", 0))},
    )


def _to_last(ctx: Context, x: str, axis: int) -> tuple[str, tuple]:
    rank = ctx.rank(x)
    perm = tuple(a for a in range(rank) if a != axis) + (axis,)
    return ctx.transpose(x, perm), tuple(int(p) for p in np.argsort(perm))


@converter("TopK")
def convert_topk(ctx: Context, inputs):
    """The k largest (or smallest) along an axis: each element's rank is the count of elements that
    beat it (ties broken by position), then rank r's element is picked with a one-hot mask."""
    x = inputs[0]
    k = int(ctx.attr("k") if ctx.has_attr("k") else ctx.deciding(inputs[1], "the K input").reshape(-1)[0])
    axis = normalize_axis(ctx.attr("axis", -1), ctx.rank(x), ctx)
    largest = bool(ctx.attr("largest", 1))
    xt, back = _to_last(ctx, x, axis)
    shape = ctx.shape(xt)
    n = shape[-1]
    if not 0 <= k <= n:
        raise ctx.error(f"k={k} is out of range for an axis of {n}")
    xi = ctx.reshape(xt, shape + (1,))
    xj = ctx.reshape(xt, shape[:-1] + (1, n))
    better = ctx.op("greater" if largest else "less", [xj, xi])
    tie = ctx.op(
        "logical_and",
        [ctx.op("equal", [xj, xi]), ctx.param(np.tril(np.ones((n, n), dtype=bool), -1), "earlier")],
    )
    beats = ctx.cast(ctx.op("logical_or", [better, tie]), "int64")
    rank = ctx.op("sum", [beats], {"axis": (len(shape),), "keepdims": True})  # (..., n, 1)
    hot = ctx.op("equal", [rank, ctx.param(np.arange(k, dtype=np.int64).reshape(1, k), "ranks")])
    positions = ctx.param(np.arange(n, dtype=np.int64).reshape(n, 1), "positions")
    index = ctx.op(
        "sum",
        [ctx.op("where", [hot, positions, ctx.param(np.zeros((), np.int64), "zero")])],
        {"axis": (len(shape) - 1,), "keepdims": False},
    )  # (..., k)
    values = ctx.op("gather_elements", [xt, index], {"axis": len(shape) - 1})
    return [ctx.transpose(values, back), ctx.transpose(index, back)]


@converter("Hardmax")
def convert_hardmax(ctx: Context, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    axis = normalize_axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), len(shape), ctx)
    if ctx.opset < 13:  # coerced to 2-D at axis
        x = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        axis = 1
    best = ctx.op("argmax", [x], {"axis": axis, "keepdims": True})
    n = ctx.shape(x)[axis]
    positions = ctx.param(
        np.arange(n, dtype=np.int64).reshape((n,) + (1,) * (ctx.rank(x) - axis - 1)), "positions"
    )
    out = ctx.cast(ctx.op("equal", [best, positions]), ctx.dtype(x))
    return ctx.reshape(out, shape)


@converter("Compress")
def convert_compress(ctx: Context, inputs):
    x, cond = inputs[:2]
    keep = np.flatnonzero(ctx.deciding(cond, "the condition input").astype(bool))
    if ctx.has_attr("axis"):
        axis = normalize_axis(ctx.attr("axis"), ctx.rank(x), ctx)
    else:
        x, axis = ctx.reshape(x, (math.prod(ctx.shape(x)),)), 0
    keep = keep[keep < ctx.shape(x)[axis]]
    return ctx.op("take", [x, ctx.param(keep.astype(np.int64), "kept")], {"axis": axis})


@converter("Einsum")
def convert_einsum(ctx: Context, inputs):
    """Einsum as broadcast products and sums: each operand's repeated labels give its diagonal, its
    axes are laid out in one common label order (missing labels as size-1 axes), the operands are
    multiplied, labels absent from the output are summed, and the result is transposed into place."""
    equation = ctx.attr("equation").replace(" ", "")
    lhs, _, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(inputs):
        raise ctx.error(f"equation {equation!r} names {len(terms)} operands, the node has {len(inputs)}")
    spare = iter("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
    extra = [ctx.rank(v) - len(t.replace("...", "")) for t, v in zip(terms, inputs)]
    ell_rank = max((e for e, t in zip(extra, terms) if "..." in t), default=0)
    ell = "".join(next(spare) for _ in range(ell_rank))
    terms = [t.replace("...", ell[ell_rank - e:]) for t, e in zip(terms, extra)]
    if "->" in equation:
        out_labels = rhs.replace("...", ell)
    else:
        counts = {c: "".join(terms).count(c) for c in "".join(terms)}
        out_labels = ell + "".join(sorted(c for c, k in counts.items() if k == 1 and c not in ell))
    order = []
    for t in terms:
        order.extend(c for c in t if c not in order)
    sizes: dict = {}
    laid_out = []
    for t, v in zip(terms, inputs):
        labels = list(t)
        while len(set(labels)) < len(labels):  # a repeated label: keep the diagonal
            c = next(c for c in labels if labels.count(c) > 1)
            p, q = [i for i, x in enumerate(labels) if x == c][:2]
            n = ctx.shape(v)[p]
            eye = np.eye(n, dtype=ctx.dtype(v)).reshape([n if i in (p, q) else 1 for i in range(len(labels))])
            v = ctx.op("sum", [ctx.op("multiply", [v, ctx.param(eye, "eye")])],
                       {"axis": (q,), "keepdims": False})
            labels.pop(q)
        for c, d in zip(labels, ctx.shape(v)):
            sizes[c] = max(sizes.get(c, 1), d)
        mine = [c for c in order if c in labels]
        v = ctx.transpose(v, tuple(labels.index(c) for c in mine))
        shape = dict(zip(mine, ctx.shape(v)))
        laid_out.append(ctx.reshape(v, tuple(shape.get(c, 1) for c in order)))
    product = laid_out[0]
    for v in laid_out[1:]:
        product = ctx.op("multiply", [product, v])
    summed = tuple(i for i, c in enumerate(order) if c not in out_labels)
    if summed:
        product = ctx.op("sum", [product], {"axis": summed, "keepdims": False})
    kept = [c for c in order if c in out_labels]
    if ctx.shape(product) != tuple(sizes[c] for c in kept):
        product = ctx.op("broadcast_to", [product], {"shape": tuple(sizes[c] for c in kept)})
    return ctx.transpose(product, tuple(kept.index(c) for c in out_labels))


# -- operators whose output shape is decided by input values ------------------------------------------
# Inputs known when importing (constants, or graph inputs that ``nnvm_frontend_onnx.backend`` specializes
# on) give constants here; inputs computed at run time raise ``DataDependentOpError`` (``ctx.deciding``):
# ``nnvm.compile`` then runs the node on the host between compiled stages (``staging``).
@converter("NonZero")
def convert_nonzero(ctx: Context, inputs):
    return ctx.param(host_ops.nonzero(ctx.deciding(inputs[0], "the input")), "nonzero")


@converter("Unique")
def convert_unique(ctx: Context, inputs):
    x = ctx.deciding(inputs[0], "the input")
    axis = ctx.attr("axis")
    if axis is not None:
        axis = normalize_axis(axis, x.ndim, ctx)
    values, first, inverse, counts = host_ops.unique(x, axis, bool(ctx.attr("sorted", 1)))
    return [ctx.param(values, "unique"), ctx.param(first, "indices"), ctx.param(inverse, "inverse"),
            ctx.param(counts, "counts")]


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """``(y_min, x_min, y_max, x_max)`` per box from either ONNX box format."""
    if center_point_box:
        x, y, w, h = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
        return np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], axis=1)
    return np.stack([np.minimum(boxes[:, 0], boxes[:, 2]), np.minimum(boxes[:, 1], boxes[:, 3]),
                     np.maximum(boxes[:, 0], boxes[:, 2]), np.maximum(boxes[:, 1], boxes[:, 3])], axis=1)


def _overlaps(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    """Whether boxes ``a`` and ``b`` (corner form) overlap by an IoU above ``threshold``."""
    ih = min(a[2], b[2]) - max(a[0], b[0])
    iw = min(a[3], b[3]) - max(a[1], b[1])
    if ih <= 0 or iw <= 0:
        return False
    inter = ih * iw
    area_a, area_b = (a[2] - a[0]) * (a[3] - a[1]), (b[2] - b[0]) * (b[3] - b[1])
    union = area_a + area_b - inter
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return inter / union > threshold


@converter("NonMaxSuppression")
def convert_nms(ctx: Context, inputs):
    """Greedy non-maximum suppression per batch and class, as ONNX specifies it: candidates above the
    score threshold by decreasing score (ties: lower index first), each kept unless it overlaps a kept
    box by more than the IoU threshold, at most ``max_output_boxes_per_class`` per class."""
    what = "the {} input (its values decide the output shape)"
    boxes = np.asarray(ctx.const(inputs[0], what.format("boxes")), dtype=np.float64)
    scores = np.asarray(ctx.const(inputs[1], what.format("scores")), dtype=np.float64)

    def optional(k, name, default):
        if len(inputs) > k and inputs[k]:
            value = np.asarray(ctx.const(inputs[k], what.format(name))).reshape(-1)
            return value[0] if value.size else default
        return default

    limit = max(int(optional(2, "max_output_boxes_per_class", 0)), 0)
    iou = float(optional(3, "iou_threshold", 0.0))
    has_score = len(inputs) > 4 and bool(inputs[4])
    score_min = float(optional(4, "score_threshold", 0.0))
    center = int(ctx.attr("center_point_box", 0))
    picked = []
    for b in range(boxes.shape[0]):
        corners = _corners(boxes[b], center)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = [i for i in sorted(range(len(s)), key=lambda i: (-s[i], i))
                     if not has_score or s[i] > score_min]
            kept: list = []
            for i in order:
                if len(kept) >= limit:
                    break
                if not any(_overlaps(corners[i], corners[j], iou) for j in kept):
                    kept.append(i)
                    picked.append((b, c, i))
    return ctx.param(np.asarray(picked, dtype=np.int64).reshape(-1, 3), "selected")


@converter("TensorScatter")
def convert_tensor_scatter(ctx: Context, inputs):
    """Write ``update`` into a KV cache at per-batch positions (``linear``, or ``circular`` modulo the
    cache length): the cache and the update are joined along the axis and one ``gather_elements``
    picks, for every cache position, the cache or the update element (positions are specialized on)."""
    past, update = inputs[0], inputs[1]
    shape, ushape = ctx.shape(past), ctx.shape(update)
    axis = normalize_axis(ctx.attr("axis", -2), len(shape), ctx)
    batch, length, count = shape[0], shape[axis], ushape[axis]
    starts = ctx.const_ints(inputs[2], "the write_indices input") if len(inputs) > 2 and inputs[2] \
        else (0,) * batch
    circular = ctx.attr("mode", "linear") == "circular"
    s = np.arange(length)
    table = []
    for w in starts:
        offset = (s - w) % length if circular else s - w
        table.append(np.where((offset >= 0) & (offset < count), length + offset, s))
    view = [1] * len(shape)
    view[0], view[axis] = batch, length
    index = np.ascontiguousarray(np.broadcast_to(np.asarray(table).reshape(view), shape)).astype(np.int64)
    joined = ctx.op("concatenate", [past, update], {"axis": axis})
    return ctx.op("gather_elements", [joined, ctx.param(index, "positions")], {"axis": axis})


@converter("ImageDecoder")
def convert_image_decoder(ctx: Context, inputs):
    """Decoded when importing (the encoded bytes decide the image's shape, so they are specialized on)
    with Pillow, an optional dependency; ``pixel_format`` RGB, BGR or Grayscale."""
    import io

    data = np.asarray(ctx.const(inputs[0], "the encoded image (its bytes decide the output shape)"))
    try:
        from PIL import Image
    except ImportError:
        raise ctx.error("decoding images needs Pillow (pip install 'nnvm-frontend-onnx[image]')") from None
    fmt = ctx.attr("pixel_format", "RGB")
    try:
        img = Image.open(io.BytesIO(data.astype(np.uint8).tobytes()))
        if fmt == "Grayscale":
            pixels = np.asarray(img.convert("L"))[:, :, None]
        else:
            pixels = np.asarray(img.convert("RGB"))
            pixels = pixels[:, :, ::-1] if fmt == "BGR" else pixels
    except (OSError, ValueError) as exc:
        raise ctx.error(f"the image cannot be decoded ({exc})") from None
    return ctx.param(np.ascontiguousarray(pixels, dtype=np.uint8), "image")

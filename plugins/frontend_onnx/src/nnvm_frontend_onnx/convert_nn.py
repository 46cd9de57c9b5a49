"""Neural-network operators: convolution, pooling, normalization, dense layers, softmax."""

from __future__ import annotations

import math

from nnvm.frontend.compose import conv2d_transpose
from nnvm.frontend.padding import explicit_pads, same_pads
from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def spatial_padding(ctx: Context, in_spatial, kernel, strides, dilations) -> tuple[list, list]:
    """(begins, ends) per spatial axis from ``pads`` or ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID)."""
    n = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad == "NOTSET":
        pads = tuple(ctx.attr("pads", (0,) * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads={pads} should have {2 * n} values")
        return explicit_pads(pads, n)
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    return same_pads(in_spatial, kernel, strides, dilations, upper=auto_pad == "SAME_UPPER")


def _window(ctx: Context, x: str, kernel) -> tuple:
    """Spatial rank, strides, dilations and padding (t, l, b, r) of a conv or pool on 4-D or 3-D ``x``."""
    nsp = ctx.rank(x) - 2
    if nsp not in (1, 2):
        raise ctx.error(f"only 1-D and 2-D windows are supported; input has {nsp} spatial dimensions")
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(ctx.attr("strides", (1,) * nsp))
    dilations = tuple(ctx.attr("dilations", (1,) * nsp))
    begins, ends = spatial_padding(ctx, ctx.shape(x)[2:], kernel, strides, dilations)
    if nsp == 1:  # a 1-D window is a 2-D one over a height of 1
        kernel, strides, dilations = (1,) + kernel, (1,) + strides, (1,) + dilations
        begins, ends = [0] + begins, [0] + ends
    padding = (int(begins[0]), int(begins[1]), int(ends[0]), int(ends[1]))
    return nsp, kernel, tuple(map(int, strides)), tuple(map(int, dilations)), padding


def _as_2d(ctx: Context, x: str, nsp: int) -> str:
    if nsp == 2:
        return x
    n, c, w = ctx.shape(x)
    return ctx.reshape(x, (n, c, 1, w))


def _from_2d(ctx: Context, y: str, nsp: int) -> str:
    if nsp == 2:
        return y
    n, c, _, w = ctx.shape(y)
    return ctx.reshape(y, (n, c, w))


@converter("Conv")
def convert_conv(ctx: Context, inputs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else ""
    if ctx.rank(w) != ctx.rank(x):
        raise ctx.error(f"weight of rank {ctx.rank(w)} does not match data of rank {ctx.rank(x)}")
    nsp, kernel, strides, dilations, padding = _window(ctx, x, ctx.shape(w)[2:])
    attrs = {"strides": strides, "padding": padding, "dilation": dilations,
             "groups": int(ctx.attr("group", 1))}
    out = ctx.op("conv2d", [_as_2d(ctx, x, nsp), _as_2d(ctx, w, nsp)], attrs)
    if bias:
        out = ctx.op("bias_add", [out, bias], {"axis": 1})
    return _from_2d(ctx, out, nsp)


@converter("MaxPool", "AveragePool")
def convert_pool(ctx: Context, inputs):
    x = inputs[0]
    if ctx.op_type == "MaxPool" and ctx.output_used(1):
        if ctx.rank(x) != 4:
            raise ctx.error("the Indices output is supported for 2-D pooling only")
        values = convert_pool_values(ctx, x)
        return [values, _max_pool_indices(ctx, x, values)]
    return convert_pool_values(ctx, x)


def convert_pool_values(ctx: Context, x: str) -> str:
    if not ctx.has_attr("kernel_shape"):
        raise ctx.error("the kernel_shape attribute is missing")
    if ctx.rank(x) == 5:
        return _pool3d(ctx, x)
    nsp, kernel, strides, dilations, padding = _window(ctx, x, ctx.attr("kernel_shape"))
    attrs = {"pool_size": kernel, "strides": strides, "padding": padding, "dilation": dilations,
             "ceil_mode": bool(ctx.attr("ceil_mode", 0))}
    if ctx.op_type == "AveragePool":
        attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    op = "max_pool2d" if ctx.op_type == "MaxPool" else "avg_pool2d"
    return _from_2d(ctx, ctx.op(op, [_as_2d(ctx, x, nsp)], attrs), nsp)


def _max_pool_indices(ctx: Context, x: str, values: str) -> str:
    """MaxPool's Indices: for each window, the flat NCHW index (row- or column-major per
    ``storage_order``) of its first element equal to the maximum. Each kernel offset is a strided view
    of the input padded with -inf; the first offset that matches wins."""
    import numpy as np

    n, c, h, w = ctx.shape(x)
    _, _, oh, ow = ctx.shape(values)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides", (1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1)))
    begins, ends = spatial_padding(ctx, (h, w), kernel, strides, dilations)
    reach = [(o - 1) * s + (k - 1) * d + 1 for o, s, k, d in zip((oh, ow), strides, kernel, dilations)]
    after = [max(0, r - size - b) for r, size, b in zip(reach, (h, w), begins)]
    padded = ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, begins[0], after[0], begins[1], after[1]),
                                 "pad_value": float("-inf"), "mode": "constant"})
    column_major = bool(ctx.attr("storage_order", 0))
    nn_, cc, yy, xx = np.meshgrid(np.arange(n), np.arange(c), np.arange(oh), np.arange(ow), indexing="ij")
    index = None
    for ky, kx in reversed(list(np.ndindex(*kernel))):
        y0, x0 = ky * dilations[0], kx * dilations[1]
        view = ctx.op("strided_slice", [padded], {
            "begin": (y0, x0), "end": (y0 + (oh - 1) * strides[0] + 1, x0 + (ow - 1) * strides[1] + 1),
            "strides": (strides[0], strides[1]), "axes": (2, 3)})
        row = yy * strides[0] + y0 - begins[0]
        col = xx * strides[1] + x0 - begins[1]
        flat = (nn_ * c + cc) * h * w + (col * h + row if column_major else row * w + col)
        here = ctx.param(flat.astype(np.int64), "index")
        index = here if index is None else ctx.op("where", [ctx.op("equal", [view, values]), here, index])
    return index


def _pool3d(ctx: Context, x: str, op: str | None = None, count_include_pad: bool | None = None) -> str:
    """A 3-D max or average pool as two 2-D ones: over (H, W) with depth folded into the channels,
    then over D with H*W as the width. A box window is separable for both: the maximum of maxima,
    and the mean of means (the count of valid elements in a box is the product of per-axis counts)."""
    n, c, d, h, w = ctx.shape(x)
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides", (1, 1, 1)))
    dilations = tuple(ctx.attr("dilations", (1, 1, 1)))
    begins, ends = spatial_padding(ctx, (d, h, w), kernel, strides, dilations)
    op = op or ("max_pool2d" if ctx.op_type == "MaxPool" else "avg_pool2d")
    common = {"ceil_mode": bool(ctx.attr("ceil_mode", 0))}
    if op == "avg_pool2d":
        common["count_include_pad"] = bool(ctx.attr("count_include_pad", 0)) if count_include_pad is None \
            else count_include_pad
    y = ctx.reshape(x, (n, c * d, h, w))
    y = ctx.op(op, [y], {"pool_size": kernel[1:], "strides": tuple(map(int, strides[1:])),
                         "padding": (int(begins[1]), int(begins[2]), int(ends[1]), int(ends[2])),
                         "dilation": tuple(map(int, dilations[1:])), **common})
    _, _, h2, w2 = ctx.shape(y)
    y = ctx.reshape(y, (n, c, d, h2 * w2))
    y = ctx.op(op, [y], {"pool_size": (kernel[0], 1), "strides": (int(strides[0]), 1),
                         "padding": (int(begins[0]), 0, int(ends[0]), 0), "dilation": (int(dilations[0]), 1),
                         **common})
    return ctx.reshape(y, (n, c, ctx.shape(y)[2], h2, w2))


@converter("LpPool")
def convert_lp_pool(ctx: Context, inputs):
    """``(sum |x|^p over the window)^(1/p)``: an average pool counting the padding, times the window size."""
    x = inputs[0]
    p = float(ctx.attr("p", 2))
    kernel = tuple(int(k) for k in ctx.attr("kernel_shape"))
    powered = ctx.op("power", [ctx.op("abs", [x]), ctx.scalar(p, x)])
    if ctx.rank(x) == 5:
        mean = _pool3d(ctx, powered, "avg_pool2d", True)
        total = ctx.op("multiply", [mean, ctx.scalar(float(math.prod(kernel)), x)])
        return ctx.op("power", [total, ctx.scalar(1.0 / p, x)])
    nsp, kernel, strides, dilations, padding = _window(ctx, powered, kernel)
    attrs = {"pool_size": kernel, "strides": strides, "padding": padding, "dilation": dilations,
             "ceil_mode": bool(ctx.attr("ceil_mode", 0)), "count_include_pad": True}
    mean = ctx.op("avg_pool2d", [_as_2d(ctx, powered, nsp)], attrs)
    total = ctx.op("multiply", [mean, ctx.scalar(float(math.prod(kernel)), x)])
    return _from_2d(ctx, ctx.op("power", [total, ctx.scalar(1.0 / p, x)]), nsp)


@converter("GlobalLpPool")
def convert_global_lp_pool(ctx: Context, inputs):
    x = inputs[0]
    p = float(ctx.attr("p", 2))
    axes = tuple(range(2, ctx.rank(x)))
    powered = ctx.op("power", [ctx.op("abs", [x]), ctx.scalar(p, x)])
    total = ctx.op("sum", [powered], {"axis": axes, "keepdims": True})
    return ctx.op("power", [total, ctx.scalar(1.0 / p, x)])


@converter("GlobalAveragePool", "GlobalMaxPool")
def convert_global_pool(ctx: Context, inputs):
    x = inputs[0]
    if ctx.rank(x) == 4:
        op = "global_avg_pool2d" if ctx.op_type == "GlobalAveragePool" else "global_max_pool2d"
        return ctx.op(op, [x])
    axes = tuple(range(2, ctx.rank(x)))
    op = "mean" if ctx.op_type == "GlobalAveragePool" else "max"
    return ctx.op(op, [x], {"axis": axes, "keepdims": True})


# -- normalization ----------------------------------------------------------------------------------
@converter("BatchNormalization")
def convert_batch_norm(ctx: Context, inputs):
    x, gamma, beta, mean, var = inputs[:5]
    if ctx.attr("training_mode", 0) or any(ctx.output_used(k) for k in range(1, 5)):
        raise ctx.error("training-mode batch normalization (batch statistics outputs) is not supported")
    if ctx.rank(gamma) != 1:
        raise ctx.error("per-element (spatial=0) batch normalization is not supported")
    return ctx.op(
        "batch_norm", [x, gamma, beta, mean, var], {"epsilon": float(ctx.attr("epsilon", 1e-5)), "axis": 1}
    )


@converter("InstanceNormalization")
def convert_instance_norm(ctx: Context, inputs):
    return ctx.op("instance_norm", inputs[:3], {"epsilon": float(ctx.attr("epsilon", 1e-5))})


@converter("LayerNormalization")
def convert_layer_norm(ctx: Context, inputs):
    x, gamma = inputs[0], inputs[1]
    beta = inputs[2] if len(inputs) > 2 else ""
    if ctx.output_used(1) or ctx.output_used(2):
        raise ctx.error("the Mean and InvStdDev outputs are not supported")
    shape = ctx.shape(x)
    axis = normalize_axis(ctx.attr("axis", -1), len(shape), ctx)
    tail = shape[axis:]  # nnvm's layer_norm, like ONNX's, normalizes over axes axis..end

    def affine(v: str) -> str:
        if ctx.shape(v) == tail:
            return v
        if math.prod(ctx.shape(v)) == math.prod(tail):
            return ctx.reshape(v, tail)
        return ctx.op("broadcast_to", [v], {"shape": tail})

    operands = [x, affine(gamma)] + ([affine(beta)] if beta else [])
    return ctx.op("layer_norm", operands, {"axis": axis, "epsilon": float(ctx.attr("epsilon", 1e-5))})


@converter("LRN")
def convert_lrn(ctx: Context, inputs):
    return ctx.op(
        "lrn",
        inputs[:1],
        {
            "size": int(ctx.attr("size")),
            "alpha": float(ctx.attr("alpha", 1e-4)),
            "beta": float(ctx.attr("beta", 0.75)),
            "bias": float(ctx.attr("bias", 1.0)),
        },
    )


# -- dense layers -----------------------------------------------------------------------------------
@converter("Gemm")
def convert_gemm(ctx: Context, inputs):
    """``alpha * A' @ B' + beta * C`` as ``dense`` (weights [N, K]) plus a bias; constants fold."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else ""
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if ctx.rank(a) != 2 or ctx.rank(b) != 2:
        raise ctx.error(f"inputs should be 2-D, got {ctx.shape(a)} and {ctx.shape(b)}")
    if ctx.attr("transA", 0):
        a = ctx.transpose(a, (1, 0))
    weight = b if ctx.attr("transB", 0) else ctx.transpose(b, (1, 0))
    constant_weight = ctx.const_value(weight) is not None
    if alpha != 1.0 and constant_weight:
        weight = ctx.op("multiply", [weight, ctx.scalar(alpha, weight)])
    out = ctx.op("dense", [a, weight])
    if alpha != 1.0 and not constant_weight:
        out = ctx.op("multiply", [out, ctx.scalar(alpha, out)])
    if c and beta != 0.0:
        if beta != 1.0:
            c = ctx.op("multiply", [c, ctx.scalar(beta, c)])
        n = ctx.shape(out)[1]
        if ctx.shape(c) == (n,):
            out = ctx.op("bias_add", [out, c], {"axis": 1})
        else:
            out = ctx.op("add", [out, c])
    return out


@converter("MatMul")
def convert_matmul(ctx: Context, inputs):
    return ctx.op("matmul", inputs[:2])


@converter("Softmax", "LogSoftmax")
def convert_softmax(ctx: Context, inputs):
    """Softmax-13 normalizes one axis; before 13 the input is coerced to 2-D at ``axis``."""
    x = inputs[0]
    shape = ctx.shape(x)
    op = "softmax" if ctx.op_type == "Softmax" else "log_softmax"
    axis = normalize_axis(ctx.attr("axis", -1 if ctx.opset >= 13 else 1), len(shape), ctx)
    if ctx.opset >= 13 or axis == len(shape) - 1:
        return ctx.op(op, [x], {"axis": axis})
    flat = ctx.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return ctx.reshape(ctx.op(op, [flat], {"axis": 1}), shape)


@converter("ConvTranspose")
def convert_conv_transpose(ctx: Context, inputs):
    """The gradient of a convolution, built by the shared ``nnvm.frontend.compose.conv2d_transpose``
    from the padding ONNX's attributes give (pads, auto_pad, output_shape); 1-D runs as 2-D with a unit
    axis, 3-D as 2-D per depth tap (``_conv_transpose_3d``)."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else ""
    nsp = ctx.rank(x) - 2
    if nsp not in (1, 2, 3):
        raise ctx.error(
            f"only 1-D to 3-D transposed convolutions are supported; input has {nsp} spatial dimensions"
        )
    sizes = list(ctx.shape(x)[2:])
    kernel = list(ctx.shape(w)[2:])
    groups = int(ctx.attr("group", 1))

    def per_axis(key, default):
        return [int(a) for a in ctx.attr(key, (default,) * nsp)]

    strides, dilations = per_axis("strides", 1), per_axis("dilations", 1)
    out_pad = per_axis("output_padding", 0)
    full = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    natural = [s * (i - 1) + op + f for s, i, op, f in zip(strides, sizes, out_pad, full)]
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if ctx.has_attr("output_shape") or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if ctx.has_attr("output_shape"):
            target = list(ctx.attr("output_shape"))[-nsp:]
        else:
            target = [i * s for i, s in zip(sizes, strides)]
        total = [nat - t for nat, t in zip(natural, target)]
        if auto_pad == "SAME_UPPER":
            begins, ends = [t // 2 for t in total], [t - t // 2 for t in total]
        else:
            begins, ends = [t - t // 2 for t in total], [t // 2 for t in total]
    elif auto_pad == "VALID":
        begins, ends = [0] * nsp, [0] * nsp
    else:
        pads = tuple(ctx.attr("pads", (0,) * (2 * nsp)))
        begins, ends = list(pads[:nsp]), list(pads[nsp:])
    if nsp == 3:
        out = _conv_transpose_3d(ctx, x, w, strides, dilations, begins, ends, out_pad, groups)
    else:
        lead = [1] if nsp == 1 else []  # 1-D: a unit height
        out = conv2d_transpose(ctx, _as_2d(ctx, x, nsp), _as_2d(ctx, w, nsp), lead + strides,
                               lead + dilations, [0] * len(lead) + begins, [0] * len(lead) + ends,
                               [0] * len(lead) + out_pad, groups)
        out = _from_2d(ctx, out, nsp)
    if bias:
        out = ctx.op("bias_add", [out, bias], {"axis": 1})
    return out


def _conv_transpose_3d(ctx: Context, x: str, w: str, strides, dilations, begins, ends, out_pad,
                       groups: int) -> str:
    """A 3-D transposed convolution as one 2-D one per kernel depth tap ``kd``, over every input depth
    slice at once (depth folded into the batch): slice ``z`` of tap ``kd`` lands at output depth
    ``z * stride + kd * dilation - begin``, so each tap's slices are spread with ``stride - 1`` zeros
    between them, shifted by that offset (``pad``, or a crop), and the taps added."""
    n, c, depth, h, wd = ctx.shape(x)
    _, m_per_group, kd_size, kh, kw = ctx.shape(w)
    m = m_per_group * groups
    slices = ctx.reshape(ctx.transpose(x, (0, 2, 1, 3, 4)), (n * depth, c, h, wd))
    out_depth = (strides[0] * (depth - 1) + (kd_size - 1) * dilations[0] + 1 - begins[0] - ends[0]
                 + out_pad[0])
    spread = strides[0] * (depth - 1) + 1
    total = None
    for kd in range(kd_size):
        tap = ctx.op("strided_slice", [w], {"begin": (kd,), "end": (kd + 1,), "strides": (1,), "axes": (2,)})
        y = conv2d_transpose(ctx, slices, ctx.reshape(tap, (c, m_per_group, kh, kw)), strides[1:],
                             dilations[1:], begins[1:], ends[1:], out_pad[1:], groups)
        _, _, oh, ow = ctx.shape(y)
        plane = m * oh * ow
        y = ctx.reshape(y, (n, depth, 1, plane))
        if strides[0] > 1:  # zeros between the slices
            y = ctx.op("pad", [y], {"pad_width": (0, 0, 0, 0, 0, strides[0] - 1, 0, 0), "pad_value": 0.0,
                                    "mode": "constant"})
        y = ctx.reshape(y, (n, depth * strides[0], plane))
        first = kd * dilations[0] - begins[0]  # output depth of slice 0
        lo, hi = first, out_depth - first - spread  # zeros before and after the spread slices
        begin, end = max(-lo, 0), min(spread, spread + hi)
        if begin >= end:
            continue  # the padding crops this tap away
        y = ctx.op("strided_slice", [y], {"begin": (begin,), "end": (end,), "strides": (1,), "axes": (1,)})
        if max(lo, 0) or max(hi, 0):
            y = ctx.op("pad", [y], {"pad_width": (0, 0, max(lo, 0), max(hi, 0), 0, 0), "pad_value": 0.0,
                                    "mode": "constant"})
        total = y if total is None else ctx.op("add", [total, y])
    if total is None:
        raise ctx.error("the padding crops away every output depth slice")
    return ctx.transpose(ctx.reshape(total, (n, out_depth, m, oh, ow)), (0, 2, 1, 3, 4))


@converter("Col2Im")
def convert_col2im(ctx: Context, inputs):
    """Sum sliding blocks back into an image: every column element lands on one image position (or in
    the padding), a constant map, so the result is a ``matmul`` with a 0/1 matrix per channel."""
    import numpy as np

    x = inputs[0]
    image = ctx.const_ints(inputs[1], "the image_shape input")
    block = ctx.const_ints(inputs[2], "the block_shape input")
    nd = len(image)
    dil = tuple(ctx.attr("dilations", (1,) * nd))
    strides = tuple(ctx.attr("strides", (1,) * nd))
    pads = tuple(ctx.attr("pads", (0,) * (2 * nd)))
    n, ck, cols = ctx.shape(x)
    kernel = math.prod(block)
    c = ck // kernel
    grid = [(image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
            for i in range(nd)]
    if math.prod(grid) != cols:
        raise ctx.error(f"{cols} columns do not match the {tuple(grid)} block positions")
    pixels = math.prod(image)
    scatter = np.zeros((kernel * cols, pixels), dtype=ctx.dtype(x))
    for k, offs in enumerate(np.ndindex(*block)):
        for col, where in enumerate(np.ndindex(*grid)):
            pos = [where[i] * strides[i] + offs[i] * dil[i] - pads[i] for i in range(nd)]
            if all(0 <= p < image[i] for i, p in enumerate(pos)):
                scatter[k * cols + col, int(np.ravel_multi_index(pos, image))] = 1
    columns = ctx.reshape(x, (n, c, kernel * cols))
    out = ctx.op("matmul", [columns, ctx.param(scatter, "col2im")])
    return ctx.reshape(out, (n, c) + tuple(image))


@converter("MaxUnpool")
def convert_max_unpool(ctx: Context, inputs):
    """Place each pooled value at its recorded flat index in a zero tensor of the inferred shape
    (``scatter_elements``); a larger ``output_shape`` pads that with zeros at the end of each axis, as the
    reference does (the indices address the inferred shape)."""
    import numpy as np

    x, indices = inputs[0], inputs[1]
    shape = ctx.shape(x)
    nsp = len(shape) - 2
    kernel = tuple(ctx.attr("kernel_shape"))
    strides = tuple(ctx.attr("strides", (1,) * nsp))
    pads = tuple(ctx.attr("pads", (0,) * (2 * nsp)))
    inferred = shape[:2] + tuple((shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + nsp] + kernel[i]
                                 for i in range(nsp))
    out_shape = inferred
    if len(inputs) > 2 and inputs[2]:
        out_shape = ctx.const_ints(inputs[2], "the output_shape input")
        if len(out_shape) != len(shape) or any(o < i for o, i in zip(out_shape, inferred)):
            raise ctx.error(f"output_shape {list(out_shape)} is smaller than the unpooled shape "
                            f"{list(inferred)}")
    zeros = ctx.param(np.zeros(math.prod(inferred), dtype=ctx.dtype(x)), "zeros")
    flat = ctx.op("scatter_elements", [zeros, ctx.reshape(indices, (math.prod(shape),)),
                                       ctx.reshape(x, (math.prod(shape),))], {"axis": 0})
    y = ctx.reshape(flat, tuple(inferred))
    if tuple(out_shape) == tuple(inferred):
        return y
    width = tuple(v for o, i in zip(out_shape, inferred) for v in (0, int(o) - int(i)))
    return ctx.op("pad", [y], {"pad_width": width, "pad_value": 0.0, "mode": "constant"})

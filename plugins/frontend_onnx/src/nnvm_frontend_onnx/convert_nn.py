"""Neural-network operators: convolution, pooling, normalization, dense layers, softmax."""

from __future__ import annotations

import math

from nnvm_frontend_onnx.context import Context, converter, normalize_axis


def spatial_padding(ctx: Context, in_spatial, kernel, strides, dilations) -> tuple[list, list]:
    """(begins, ends) per spatial axis from ``pads`` or ``auto_pad`` (SAME_UPPER/SAME_LOWER/VALID)."""
    n = len(kernel)
    auto_pad = ctx.attr("auto_pad", "NOTSET") or "NOTSET"
    if auto_pad == "NOTSET":
        pads = tuple(ctx.attr("pads", (0,) * (2 * n)))
        if len(pads) != 2 * n:
            raise ctx.error(f"pads={pads} should have {2 * n} values")
        return list(pads[:n]), list(pads[n:])
    if auto_pad == "VALID":
        return [0] * n, [0] * n
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"auto_pad={auto_pad!r} is not supported")
    begins, ends = [], []
    for size, k, s, d in zip(in_spatial, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins, ends


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
        raise ctx.error("the Indices output is not supported")
    if not ctx.has_attr("kernel_shape"):
        raise ctx.error("the kernel_shape attribute is missing")
    nsp, kernel, strides, dilations, padding = _window(ctx, x, ctx.attr("kernel_shape"))
    attrs = {"pool_size": kernel, "strides": strides, "padding": padding, "dilation": dilations,
             "ceil_mode": bool(ctx.attr("ceil_mode", 0))}
    if ctx.op_type == "AveragePool":
        attrs["count_include_pad"] = bool(ctx.attr("count_include_pad", 0))
    op = "max_pool2d" if ctx.op_type == "MaxPool" else "avg_pool2d"
    return _from_2d(ctx, ctx.op(op, [_as_2d(ctx, x, nsp)], attrs), nsp)


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
    return ctx.op("batch_norm", [x, gamma, beta, mean, var],
                  {"epsilon": float(ctx.attr("epsilon", 1e-5)), "axis": 1})


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
    return ctx.op("lrn", inputs[:1], {"size": int(ctx.attr("size")), "alpha": float(ctx.attr("alpha", 1e-4)),
                                      "beta": float(ctx.attr("beta", 0.75)),
                                      "bias": float(ctx.attr("bias", 1.0))})


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

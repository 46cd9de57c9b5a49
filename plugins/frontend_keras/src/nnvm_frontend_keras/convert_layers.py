"""Converters of Keras layers (the classes keras.applications uses, and common others).

Each takes the layer's input values (``ctx.attrs`` is the layer's config, ``ctx.weights`` its weights
in Keras's order) and returns its output values; see ``context`` for how layouts are tracked.
"""

from __future__ import annotations

import numpy as np

from nnvm.frontend import compose
from nnvm.frontend.channels_last import depthwise_to_oihw, hwio_to_oihw, hwoi_to_iohw
from nnvm.frontend.padding import same_pads
from nnvm_frontend_keras.context import CONVERTERS, Context


def _pair(v, n: int = 2) -> tuple:
    if isinstance(v, int | float):
        return (int(v),) * n
    return tuple(int(x) for x in v)


def _name(v) -> str:
    """An activation's name: configs hold a string, or a serialized function/object."""
    if v is None:
        return "linear"
    if isinstance(v, dict):
        if v.get("class_name") != "function":
            return str(v.get("class_name", "")).lower()
        inner = v.get("config")
        return str(inner.get("name") if isinstance(inner, dict) else inner)
    return str(v)


def activation(ctx: Context, x: str, act) -> str:
    """``x`` through the Keras activation ``act`` (keeps ``x``'s layout)."""
    name = _name(act).lower()
    if name in ("linear", "", "none"):
        return x
    if name in ("relu", "sigmoid", "tanh", "softplus", "exp", "elu"):
        return ctx.like(ctx.op(name, [x]), x)
    if name == "exponential":
        return ctx.like(ctx.op("exp", [x]), x)
    if name == "relu6":
        return ctx.like(ctx.op("clip", [x], {"a_min": 0.0, "a_max": 6.0}), x)
    if name in ("swish", "silu"):
        return ctx.like(ctx.op("multiply", [x, ctx.op("sigmoid", [x])]), x)
    if name == "gelu":  # Keras's default is the exact (erf) form
        return ctx.like(ctx.op("gelu", [x], {"approximate": "none"}), x)
    if name == "hard_sigmoid":
        # Keras 3: relu6(x + 3) / 6; Keras 2: clip(0.2 x + 0.5, 0, 1).
        alpha = 1.0 / 6.0 if ctx.keras_major >= 3 else 0.2
        return ctx.like(ctx.op("hard_sigmoid", [x], {"alpha": alpha, "beta": 0.5}), x)
    if name in ("hard_swish", "hard_silu"):
        return ctx.like(ctx.op("hard_swish", [x]), x)
    if name == "selu":
        return ctx.like(ctx.op("selu", [x]), x)
    if name == "leaky_relu":
        return ctx.like(ctx.op("leaky_relu", [x], {"alpha": 0.2}), x)
    if name == "softsign":
        one = ctx.scalar(1.0, x)
        return ctx.like(ctx.op("divide", [x, ctx.op("add", [ctx.op("abs", [x]), one])]), x)
    if name in ("softmax", "log_softmax"):
        return ctx.like(ctx.op(name, [x], {"axis": ctx.keras_axis(x, -1)}), x)
    raise ctx.error(f"activation {name!r} is not supported")


def _add_bias(ctx: Context, y: str, bias) -> str:
    """``y`` (channels-first) plus a per-output-channel bias."""
    b = np.asarray(bias, dtype=np.float32)
    shape = (b.size,) + (1,) * (ctx.rank(y) - 2)
    return ctx.mark_first(ctx.op("add", [y, ctx.param(b.reshape(shape), "bias")]))


def _conv(ctx: Context, x: str, w_oihw, strides, dilation, padding: str, groups: int) -> str:
    """A channels-first conv2d of the channels-first ``x`` with Keras 'valid'/'same' padding."""
    kh, kw = w_oihw.shape[2:]
    if padding == "same":
        begins, ends = same_pads(ctx.shape(x)[2:], (kh, kw), strides, dilation)
    elif padding == "valid":
        begins, ends = [0, 0], [0, 0]
    else:
        raise ctx.error(f"padding {padding!r} is not supported")
    attrs = {"strides": tuple(strides), "dilation": tuple(dilation), "groups": int(groups),
             "padding": (begins[0], begins[1], ends[0], ends[1])}
    return ctx.mark_first(ctx.op("conv2d", [x, ctx.param(w_oihw, "kernel")], attrs))


def _check_channels_last(ctx: Context) -> None:
    if ctx.attr("data_format", "channels_last") not in (None, "channels_last"):
        raise ctx.error(f"data_format {ctx.attr('data_format')!r} is not supported (only channels_last)")


@CONVERTERS.register("Conv2D")
def conv2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    w = hwio_to_oihw(ctx.weight(0, "the kernel"))
    y = _conv(ctx, x, w, _pair(ctx.attr("strides", 1)), _pair(ctx.attr("dilation_rate", 1)),
              ctx.attr("padding", "valid"), ctx.attr("groups", 1))
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))


@CONVERTERS.register("DepthwiseConv2D")
def depthwise_conv2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    w = depthwise_to_oihw(ctx.weight(0, "the depthwise kernel"))
    y = _conv(ctx, x, w, _pair(ctx.attr("strides", 1)), _pair(ctx.attr("dilation_rate", 1)),
              ctx.attr("padding", "valid"), ctx.shape(x)[1])
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))


@CONVERTERS.register("SeparableConv2D")
def separable_conv2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    dw = depthwise_to_oihw(ctx.weight(0, "the depthwise kernel"))
    pw = hwio_to_oihw(ctx.weight(1, "the pointwise kernel"))
    y = _conv(ctx, x, dw, _pair(ctx.attr("strides", 1)), _pair(ctx.attr("dilation_rate", 1)),
              ctx.attr("padding", "valid"), ctx.shape(x)[1])
    y = _conv(ctx, y, pw, (1, 1), (1, 1), "valid", 1)
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(2, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))


@CONVERTERS.register("Dense")
def dense(ctx: Context, inputs):
    kernel = ctx.weight(0, "the kernel")
    if inputs[0] in ctx.cf and ctx.rank(inputs[0]) == 4:
        # Dense on a channels-first image is a 1x1 convolution: it stays channels-first (ConvNeXt).
        w = np.ascontiguousarray(kernel.T.reshape(kernel.shape[1], kernel.shape[0], 1, 1))
        y = _conv(ctx, inputs[0], w, (1, 1), (1, 1), "valid", 1)
        if ctx.attr("use_bias", True):
            y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
        return activation(ctx, y, ctx.attr("activation"))
    x = ctx.last(inputs[0])
    if ctx.rank(x) == 2:
        y = ctx.op("dense", [x, ctx.param(np.ascontiguousarray(kernel.T), "kernel")])
    else:  # Dense on any rank acts on the last (channels) axis
        y = ctx.op("matmul", [x, ctx.param(kernel, "kernel")])
    if ctx.attr("use_bias", True):
        y = ctx.op("add", [y, ctx.param(ctx.weight(1, "the bias"), "bias")])
    return activation(ctx, y, ctx.attr("activation"))


def _axes(ctx: Context, x: str, default=-1) -> list:
    axis = ctx.attr("axis", default)
    axes = list(axis) if isinstance(axis, list | tuple) else [axis]
    return [ctx.normalize_axis(a, ctx.rank(x)) for a in axes]


@CONVERTERS.register("BatchNormalization")
def batch_norm(ctx: Context, inputs):
    x = inputs[0]
    axes = _axes(ctx, x)
    if len(axes) != 1:
        raise ctx.error(f"normalizing over several axes {axes} is not supported")
    i = 0
    gamma = beta = None
    if ctx.attr("scale", True):
        gamma, i = ctx.weight(i, "gamma"), i + 1
    if ctx.attr("center", True):
        beta, i = ctx.weight(i, "beta"), i + 1
    mean, var = ctx.weight(i, "the moving mean"), ctx.weight(i + 1, "the moving variance")
    gamma = np.ones_like(mean) if gamma is None else gamma
    beta = np.zeros_like(mean) if beta is None else beta
    named = ((gamma, "gamma"), (beta, "beta"), (mean, "mean"), (var, "var"))
    params = [ctx.param(p, hint) for p, hint in named]
    y = ctx.op("batch_norm", [x, *params], {"epsilon": float(ctx.attr("epsilon", 1e-3)),
                                           "axis": ctx.keras_axis(x, axes[0])})
    return ctx.like(y, x)


@CONVERTERS.register("LayerNormalization")
def layer_norm(ctx: Context, inputs):
    if inputs[0] in ctx.cf and _axes(ctx, inputs[0]) == [ctx.rank(inputs[0]) - 1]:
        return _channel_norm(ctx, inputs[0])
    x = ctx.last(inputs[0])
    rank = ctx.rank(x)
    axes = sorted(_axes(ctx, x))
    if axes != list(range(axes[0], rank)):
        raise ctx.error(f"normalizing over axes {axes} that are not the last ones is not supported")
    norm_shape = ctx.shape(x)[axes[0]:]
    i = 0
    gamma = beta = None
    if ctx.attr("scale", True):
        gamma, i = ctx.weight(i, "gamma"), i + 1
    if ctx.attr("center", True):
        beta = ctx.weight(i, "beta")
    if ctx.attr("rms_scaling", False):
        raise ctx.error("rms_scaling is not supported")
    gamma = np.ones(norm_shape, np.float32) if gamma is None else gamma.reshape(norm_shape)
    beta = np.zeros(norm_shape, np.float32) if beta is None else beta.reshape(norm_shape)
    return ctx.op("layer_norm", [x, ctx.param(gamma, "gamma"), ctx.param(beta, "beta")],
                  {"epsilon": float(ctx.attr("epsilon", 1e-3)), "axis": axes[0]})


def _channel_norm(ctx: Context, x: str) -> str:
    """LayerNormalization over the channels of a channels-first tensor (axis 1), composed of reductions
    so that the tensor need not be transposed (ConvNeXt normalizes between convolutions)."""
    if ctx.attr("rms_scaling", False):
        raise ctx.error("rms_scaling is not supported")
    i, c = 0, ctx.shape(x)[1]
    gamma = beta = None
    if ctx.attr("scale", True):
        gamma, i = ctx.weight(i, "gamma"), i + 1
    if ctx.attr("center", True):
        beta = ctx.weight(i, "beta")
    mean = ctx.op("mean", [x], {"axis": (1,), "keepdims": True})
    d = ctx.op("subtract", [x, mean])
    var = ctx.op("mean", [ctx.op("multiply", [d, d])], {"axis": (1,), "keepdims": True})
    inv = ctx.op("rsqrt", [ctx.op("add", [var, ctx.scalar(float(ctx.attr("epsilon", 1e-3)), x)])])
    y = ctx.op("multiply", [d, inv])
    if gamma is not None:
        y = ctx.op("multiply", [y, ctx.channel_vector(x, gamma.reshape(c))])
    if beta is not None:
        y = ctx.op("add", [y, ctx.channel_vector(x, beta.reshape(c))])
    return ctx.mark_first(y)


@CONVERTERS.register("Normalization")
def normalization(ctx: Context, inputs):
    x = inputs[0]
    mean, var = ctx.attr("mean"), ctx.attr("variance")
    if mean is None or var is None:  # adapted: the statistics are weights (mean, variance, count)
        mean, var = ctx.weight(0, "the mean"), ctx.weight(1, "the variance")
    mean = np.asarray(mean, np.float32).reshape(-1)
    var = np.asarray(var, np.float32).reshape(-1)
    axes = _axes(ctx, x)
    if len(axes) != 1 and mean.size > 1:
        raise ctx.error(f"statistics over several axes {axes} are not supported")
    std = np.maximum(np.sqrt(var), np.float32(1e-7))  # Keras divides by max(sqrt(var), epsilon)
    m, s = ctx.channel_vector(x, mean, axes[0]), ctx.channel_vector(x, std, axes[0])
    if ctx.attr("invert", False):
        return ctx.like(ctx.op("add", [ctx.op("multiply", [x, s]), m]), x)
    return ctx.like(ctx.op("divide", [ctx.op("subtract", [x, m]), s]), x)


@CONVERTERS.register("Rescaling")
def rescaling(ctx: Context, inputs):
    x = inputs[0]
    y = ctx.op("multiply", [x, ctx.channel_vector(x, ctx.attr("scale", 1.0))])
    offset = ctx.attr("offset", 0.0)
    if np.any(np.asarray(offset) != 0):
        y = ctx.op("add", [y, ctx.channel_vector(x, offset)])
    return ctx.like(y, x)


def _pads2d(v) -> tuple:
    """ZeroPadding2D/Cropping2D amounts as ((top, bottom), (left, right))."""
    if isinstance(v, int):
        return (v, v), (v, v)
    a, b = v
    a = (a, a) if isinstance(a, int) else tuple(a)
    b = (b, b) if isinstance(b, int) else tuple(b)
    return a, b


@CONVERTERS.register("ZeroPadding2D")
def zero_padding2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    (t, bo), (le, r) = _pads2d(ctx.attr("padding", 1))
    return ctx.mark_first(ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, t, bo, le, r)}))


@CONVERTERS.register("Cropping2D")
def cropping2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    (t, bo), (le, r) = _pads2d(ctx.attr("cropping", 0))
    _, _, h, w = ctx.shape(x)
    return ctx.mark_first(ctx.op("strided_slice", [x], {"begin": (t, le), "end": (h - bo, w - r),
                                                        "axes": (2, 3)}))


def _pool(ctx: Context, x: str, op: str) -> str:
    _check_channels_last(ctx)
    x = ctx.first(x)
    k = _pair(ctx.attr("pool_size", 2))
    s = _pair(ctx.attr("strides") or k)
    padding = ctx.attr("padding", "valid")
    if padding == "same":
        begins, ends = same_pads(ctx.shape(x)[2:], k, s)
    elif padding == "valid":
        begins, ends = [0, 0], [0, 0]
    else:
        raise ctx.error(f"padding {padding!r} is not supported")
    attrs = {"pool_size": k, "strides": s, "padding": (begins[0], begins[1], ends[0], ends[1])}
    if op == "avg_pool2d":
        attrs["count_include_pad"] = False  # Keras's 'same' average divides by the pixels inside
    return ctx.mark_first(ctx.op(op, [x], attrs))


@CONVERTERS.register("MaxPooling2D", "MaxPool2D")
def max_pool(ctx: Context, inputs):
    return _pool(ctx, inputs[0], "max_pool2d")


@CONVERTERS.register("AveragePooling2D", "AvgPool2D")
def avg_pool(ctx: Context, inputs):
    return _pool(ctx, inputs[0], "avg_pool2d")


def _global_pool(ctx: Context, x: str, op: str) -> str:
    _check_channels_last(ctx)
    x = ctx.first(x)
    y = ctx.mark_first(ctx.op(op, [x]))
    if ctx.attr("keepdims", False):
        return y
    return ctx.reshape(y, ctx.shape(y)[:2])


@CONVERTERS.register("GlobalAveragePooling2D", "GlobalAvgPool2D")
def global_avg_pool(ctx: Context, inputs):
    return _global_pool(ctx, inputs[0], "global_avg_pool2d")


@CONVERTERS.register("GlobalMaxPooling2D", "GlobalMaxPool2D")
def global_max_pool(ctx: Context, inputs):
    return _global_pool(ctx, inputs[0], "global_max_pool2d")


@CONVERTERS.register("UpSampling2D")
def upsampling2d(ctx: Context, inputs):
    _check_channels_last(ctx)
    if ctx.attr("interpolation", "nearest") != "nearest":
        raise ctx.error(f"interpolation {ctx.attr('interpolation')!r} is not supported (only nearest)")
    x = ctx.first(inputs[0])
    sh, sw = _pair(ctx.attr("size", 2))
    n, c, h, w = ctx.shape(x)
    y = ctx.reshape(x, (n, c, h, 1, w, 1))
    y = ctx.op("broadcast_to", [y], {"shape": (n, c, h, sh, w, sw)})
    return ctx.mark_first(ctx.reshape(y, (n, c, h * sh, w * sw)))


# -- activations ----------------------------------------------------------------------------------------
@CONVERTERS.register("Activation")
def activation_layer(ctx: Context, inputs):
    return activation(ctx, inputs[0], ctx.attr("activation"))


@CONVERTERS.register("ReLU")
def relu_layer(ctx: Context, inputs):
    x = inputs[0]
    max_value = ctx.attr("max_value")
    slope = float(ctx.attr("negative_slope", 0.0) or 0.0)
    threshold = float(ctx.attr("threshold", 0.0) or 0.0)
    if threshold != 0.0:
        raise ctx.error("a non-zero threshold is not supported")
    if slope:
        y = ctx.op("leaky_relu", [x], {"alpha": slope})
        if max_value is not None:
            y = ctx.op("minimum", [y, ctx.scalar(max_value, x)])
        return ctx.like(y, x)
    if max_value is not None:
        return ctx.like(ctx.op("clip", [x], {"a_min": 0.0, "a_max": float(max_value)}), x)
    return ctx.like(ctx.op("relu", [x]), x)


@CONVERTERS.register("LeakyReLU")
def leaky_relu_layer(ctx: Context, inputs):
    slope = ctx.attr("negative_slope", ctx.attr("alpha", 0.3))
    return ctx.like(ctx.op("leaky_relu", [inputs[0]], {"alpha": float(slope)}), inputs[0])


@CONVERTERS.register("ELU")
def elu_layer(ctx: Context, inputs):
    return ctx.like(ctx.op("elu", [inputs[0]], {"alpha": float(ctx.attr("alpha", 1.0))}), inputs[0])


@CONVERTERS.register("Softmax")
def softmax_layer(ctx: Context, inputs):
    x = inputs[0]
    axis = ctx.attr("axis", -1)
    if isinstance(axis, list | tuple):
        if len(axis) != 1:
            raise ctx.error(f"softmax over several axes {axis} is not supported")
        axis = axis[0]
    return ctx.like(ctx.op("softmax", [x], {"axis": ctx.keras_axis(x, axis)}), x)


@CONVERTERS.register("PReLU")
def prelu_layer(ctx: Context, inputs):
    x = ctx.last(inputs[0])
    alpha = ctx.weight(0, "alpha")  # the input's shape without the batch, 1 along shared axes
    neg = ctx.op("multiply", [ctx.op("minimum", [x, ctx.scalar(0.0, x)]), ctx.param(alpha, "alpha")])
    return ctx.op("add", [ctx.op("relu", [x]), neg])


# -- merging -------------------------------------------------------------------------------------------
def _merge(ctx: Context, inputs, op: str) -> str:
    values = ctx.common_layout(inputs)
    y = values[0]
    for v in values[1:]:
        y = ctx.op(op, [y, v])
    return ctx.like(y, values[0])


@CONVERTERS.register("Add")
def add_layer(ctx: Context, inputs):
    return _merge(ctx, inputs, "add")


@CONVERTERS.register("Multiply")
def multiply_layer(ctx: Context, inputs):
    return _merge(ctx, inputs, "multiply")


@CONVERTERS.register("Maximum")
def maximum_layer(ctx: Context, inputs):
    return _merge(ctx, inputs, "maximum")


@CONVERTERS.register("Minimum")
def minimum_layer(ctx: Context, inputs):
    return _merge(ctx, inputs, "minimum")


@CONVERTERS.register("Subtract")
def subtract_layer(ctx: Context, inputs):
    if len(inputs) != 2:
        raise ctx.error(f"Subtract takes two inputs, got {len(inputs)}")
    return _merge(ctx, inputs, "subtract")


@CONVERTERS.register("Average")
def average_layer(ctx: Context, inputs):
    y = _merge(ctx, inputs, "add")
    return ctx.like(ctx.op("divide", [y, ctx.scalar(float(len(inputs)), y)]), y)


@CONVERTERS.register("Concatenate")
def concatenate_layer(ctx: Context, inputs):
    values = ctx.common_layout(inputs)
    axis = ctx.keras_axis(values[0], ctx.attr("axis", -1))
    return ctx.like(ctx.op("concatenate", values, {"axis": axis}), values[0])


# -- shapes --------------------------------------------------------------------------------------------
@CONVERTERS.register("Flatten")
def flatten(ctx: Context, inputs):
    x = ctx.last(inputs[0])
    shape = ctx.shape(x)
    return ctx.reshape(x, (shape[0], int(np.prod(shape[1:], dtype=np.int64))))


@CONVERTERS.register("Reshape")
def reshape_layer(ctx: Context, inputs):
    x = ctx.last(inputs[0])
    shape = ctx.shape(x)
    target = [int(d) for d in ctx.attr("target_shape")]
    total = int(np.prod(shape[1:], dtype=np.int64))
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1], dtype=np.int64))
        target[target.index(-1)] = total // known if known else 0
    if int(np.prod(target, dtype=np.int64)) != total:
        raise ctx.error(f"cannot reshape {shape[1:]} to {tuple(target)}")
    return ctx.reshape(x, (shape[0], *target))


@CONVERTERS.register("Permute")
def permute_layer(ctx: Context, inputs):
    x = ctx.last(inputs[0])
    return ctx.transpose(x, (0, *[int(d) for d in ctx.attr("dims")]))


@CONVERTERS.register("RepeatVector")
def repeat_vector(ctx: Context, inputs):
    x = ctx.last(inputs[0])
    n, f = ctx.shape(x)
    k = int(ctx.attr("n"))
    return ctx.op("broadcast_to", [ctx.reshape(x, (n, 1, f))], {"shape": (n, k, f)})


@CONVERTERS.register("Dropout", "SpatialDropout1D", "SpatialDropout2D", "SpatialDropout3D",
                     "GaussianNoise", "GaussianDropout", "AlphaDropout", "ActivityRegularization", "Identity")
def identity_layer(ctx: Context, inputs):
    return inputs[0]  # inference: the input unchanged, in its own layout


@CONVERTERS.register("LayerScale")
def layer_scale(ctx: Context, inputs):
    x = inputs[0]
    return ctx.like(ctx.op("multiply", [x, ctx.channel_vector(x, ctx.weight(0, "gamma"))]), x)


@CONVERTERS.register("Conv1D")
def conv1d(ctx: Context, inputs):
    """A Conv1D is a conv2d over a height of 1: (N, C, L) -> (N, C, 1, L); 'causal' pads on the left."""
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    n, c, length = ctx.shape(x)
    w = hwio_to_oihw(ctx.weight(0, "the kernel"))  # (out, in / groups, k)
    (k,), (s,), (d,) = w.shape[2:], _pair(ctx.attr("strides", 1), 1), _pair(ctx.attr("dilation_rate", 1), 1)
    padding = ctx.attr("padding", "valid")
    if padding == "causal":
        x = ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, (k - 1) * d, 0)})
        length += (k - 1) * d
        padding = "valid"
    x4 = ctx.reshape(x, (n, c, 1, length))
    y = _conv(ctx, x4, w.reshape(w.shape[0], w.shape[1], 1, k), (1, s), (1, d), padding,
              ctx.attr("groups", 1))
    y = ctx.mark_first(ctx.reshape(y, (n, w.shape[0], ctx.shape(y)[3])))
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))


@CONVERTERS.register("GroupNormalization")
def group_norm(ctx: Context, inputs):
    """Statistics per sample and group of channels, over the group's channels and every spatial axis."""
    x = inputs[0]
    if ctx.normalize_axis(ctx.attr("axis", -1), ctx.rank(x)) != ctx.rank(x) - 1:
        raise ctx.error("only the channels axis (-1) is supported")
    x = ctx.first(x) if ctx.rank(x) >= 3 else x
    shape = ctx.shape(x)
    n, c, spatial = shape[0], shape[1], shape[2:]
    g = int(ctx.attr("groups", 32))
    if c % g:
        raise ctx.error(f"{c} channels do not split into {g} groups")
    grouped = ctx.reshape(x, (n, g, c // g, *spatial))
    axes = tuple(range(2, 2 + 1 + len(spatial)))
    mean = ctx.op("mean", [grouped], {"axis": axes, "keepdims": True})
    d = ctx.op("subtract", [grouped, mean])
    var = ctx.op("mean", [ctx.op("multiply", [d, d])], {"axis": axes, "keepdims": True})
    inv = ctx.op("rsqrt", [ctx.op("add", [var, ctx.scalar(float(ctx.attr("epsilon", 1e-3)), x)])])
    y = ctx.reshape(ctx.op("multiply", [d, inv]), shape)
    if x in ctx.cf:
        ctx.mark_first(y)
    i = 0
    if ctx.attr("scale", True):
        y = ctx.like(ctx.op("multiply", [y, ctx.channel_vector(y, ctx.weight(0, "gamma"))]), y)
        i = 1
    if ctx.attr("center", True):
        y = ctx.like(ctx.op("add", [y, ctx.channel_vector(y, ctx.weight(i, "beta"))]), y)
    return y


@CONVERTERS.register("Dot")
def dot_layer(ctx: Context, inputs):
    """Keras's batched dot of two rank-2 or rank-3 tensors over ``axes`` (one per input, batch excluded)."""
    if len(inputs) != 2:
        raise ctx.error(f"Dot takes two inputs, got {len(inputs)}")
    x, y = ctx.last(inputs[0]), ctx.last(inputs[1])
    rank = ctx.rank(x)
    if rank != ctx.rank(y) or rank not in (2, 3):
        raise ctx.error(f"only two rank-2 or two rank-3 inputs are supported, got ranks {rank} and "
                        f"{ctx.rank(y)}")
    axes = ctx.attr("axes", -1)
    ax, ay = (axes, axes) if isinstance(axes, int) else axes
    ax, ay = ctx.normalize_axis(ax, rank), ctx.normalize_axis(ay, rank)
    if ctx.attr("normalize", False):
        x, y = _l2_normalize(ctx, x, ax), _l2_normalize(ctx, y, ay)
    if rank == 2:
        return ctx.op("sum", [ctx.op("multiply", [x, y])], {"axis": (1,), "keepdims": True})
    x = ctx.transpose(x, (0, 2, 1)) if ax == 1 else x  # contract x's last axis ...
    y = ctx.transpose(y, (0, 2, 1)) if ay == 2 else y  # ... with y's axis 1
    return ctx.op("matmul", [x, y])


def _l2_normalize(ctx: Context, x: str, axis: int) -> str:
    sq = ctx.op("sum", [ctx.op("multiply", [x, x])], {"axis": (axis,), "keepdims": True})
    inv = ctx.op("rsqrt", [ctx.op("maximum", [sq, ctx.scalar(1e-12, x)])])
    return ctx.op("multiply", [x, inv])


def _transpose_pads(k: int, s: int, d: int, padding: str, output_padding) -> tuple[int, int]:
    """Padding of the zero-upsampled input that makes a correlation with the flipped kernel give Keras's
    transposed convolution: 'valid' gives (n - 1) s + max(k, s) outputs, 'same' n s."""
    k = (k - 1) * d + 1
    if padding == "valid":
        extra = max(k, s) - k if output_padding is None else output_padding
        return k - 1, k - 1 + extra
    total = s + k - 2 if output_padding is None else k + k % 2 - 2 + output_padding
    left = min(total // 2 + total % 2, k - 1)
    return left, total - left


@CONVERTERS.register("Conv2DTranspose")
def conv2d_transpose(ctx: Context, inputs):
    """The shared ``compose.conv2d_transpose``, with Keras's padding turned into its begin/end crops."""
    _check_channels_last(ctx)
    x = ctx.first(inputs[0])
    kernel = ctx.weight(0, "the kernel")  # (kh, kw, out, in)
    strides, dilations = _pair(ctx.attr("strides", 1)), _pair(ctx.attr("dilation_rate", 1))
    padding = ctx.attr("padding", "valid")
    if padding not in ("valid", "same"):
        raise ctx.error(f"padding {padding!r} is not supported")
    out_pad = ctx.attr("output_padding")
    out_pad = (None, None) if out_pad is None else _pair(out_pad)
    begins, ends = [], []
    for k, s, d, op in zip(kernel.shape[:2], strides, dilations, out_pad):
        left, right = _transpose_pads(k, s, d, padding, op)
        full = (k - 1) * d + 1  # compose pads full - 1 - begin before and full - 1 - end after
        begins.append(full - 1 - left)
        ends.append(full - 1 - right)
    w = ctx.param(hwoi_to_iohw(kernel), "kernel")
    y = ctx.mark_first(compose.conv2d_transpose(ctx, x, w, strides, dilations, begins, ends, (0, 0), 1))
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))


@CONVERTERS.register("Embedding")
def embedding(ctx: Context, inputs):
    """Rows of the (input_dim, output_dim) table gathered by the integer ids; float ids are truncated to
    int32 first, as Keras casts them."""
    if ctx.attr("mask_zero", False):
        raise ctx.error("mask_zero=True is not supported (nnvm does not propagate Keras masks)")
    ids = ctx.last(inputs[0])
    if not ctx.dtype(ids).startswith("int"):
        ids = ctx.cast(ids, "int32")
    return ctx.op("take", [ctx.param(ctx.weight(0, "the embeddings"), "embeddings"), ids], {"axis": 0})


@CONVERTERS.register("Conv3D")
def conv3d(ctx: Context, inputs):
    """nnvm has no 3-D convolution: the kd depth taps of each output depth are stacked into channels
    ((N, C, D, H, W) -> (N * D_out, kd * C, H, W), one strided depth slice per tap) and one conv2d with
    the kernel reshaped to (out, kd * in, kh, kw) convolves height and width."""
    _check_channels_last(ctx)
    if ctx.attr("groups", 1) != 1:
        raise ctx.error(f"groups={ctx.attr('groups')} is not supported (only 1)")
    x = ctx.first(inputs[0])
    if ctx.rank(x) != 5:
        raise ctx.error(f"takes a rank-5 input (N, D, H, W, C), got rank {ctx.rank(x)}")
    n, c, depth = ctx.shape(x)[:3]
    kernel = ctx.weight(0, "the kernel")  # (kd, kh, kw, in, out)
    if kernel.ndim != 5 or kernel.shape[3] != c:
        raise ctx.error(f"kernel of shape {kernel.shape} does not fit {c} input channels")
    kd, kh, kw, _, out = kernel.shape
    strides, dilation = _pair(ctx.attr("strides", 1), 3), _pair(ctx.attr("dilation_rate", 1), 3)
    padding = ctx.attr("padding", "valid")
    if padding == "same":
        begins, ends = same_pads(ctx.shape(x)[2:], kernel.shape[:3], strides, dilation)
        if begins[0] or ends[0]:
            x = ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, begins[0], ends[0], 0, 0, 0, 0)})
            depth += begins[0] + ends[0]
    elif padding != "valid":
        raise ctx.error(f"padding {padding!r} is not supported")
    (sd, *s_hw), (dd, *d_hw) = strides, dilation
    d_out = (depth - (kd - 1) * dd - 1) // sd + 1
    if d_out < 1:
        raise ctx.error(f"the kernel depth {kd} (dilation {dd}) is larger than the input depth {depth}")
    taps = [ctx.op("strided_slice", [x], {"begin": (j * dd,), "end": (j * dd + (d_out - 1) * sd + 1,),
                                          "strides": (sd,), "axes": (2,)}) for j in range(kd)]
    stacked = taps[0] if kd == 1 else ctx.op("concatenate", taps, {"axis": 1})  # (N, kd * C, D_out, H, W)
    h, w = ctx.shape(stacked)[3:]
    x4 = ctx.reshape(ctx.transpose(stacked, (0, 2, 1, 3, 4)), (n * d_out, kd * c, h, w))
    w4 = np.ascontiguousarray(kernel.transpose(4, 0, 3, 1, 2).reshape(out, kd * c, kh, kw))
    y = _conv(ctx, x4, w4, s_hw, d_hw, padding, 1)  # (N * D_out, out, H', W')
    y = ctx.reshape(y, (n, d_out, out, *ctx.shape(y)[2:]))
    y = ctx.mark_first(ctx.transpose(y, (0, 2, 1, 3, 4)))
    if ctx.attr("use_bias", True):
        y = _add_bias(ctx, y, ctx.weight(1, "the bias"))
    return activation(ctx, y, ctx.attr("activation"))

"""Neural-network operators: convolution, pooling, normalization, dense layers, activations, softmax."""

from __future__ import annotations

import math

import numpy as np

from nnvm.frontend.compose import conv2d_transpose, recurrent_direction, take
from nnvm.frontend.padding import full_pooling_pads
from nnvm_frontend_mxnet.context import Context, converter


def _as_2d(ctx: Context, x: str) -> tuple[str, int]:
    """A 1-D (N, C, W) window operand as 2-D (N, C, 1, W); 2-D ones as they are."""
    nsp = ctx.rank(x) - 2
    if nsp == 2:
        return x, 2
    if nsp == 1:
        n, c, w = ctx.shape(x)
        return ctx.reshape(x, (n, c, 1, w)), 1
    raise ctx.error(f"only 1-D and 2-D windows are supported; the input has {nsp} spatial dimensions")


def _from_2d(ctx: Context, y: str, nsp: int) -> str:
    if nsp == 2:
        return y
    n, c, _, w = ctx.shape(y)
    return ctx.reshape(y, (n, c, w))


def _window(ctx: Context, nsp: int, kernel_key: str = "kernel"):
    kernel = ctx.attr_ints(kernel_key, None)
    if kernel is None or len(kernel) != nsp:
        raise ctx.error(f"attribute {kernel_key}={kernel} should have {nsp} values")
    stride = ctx.attr_ints("stride", (1,) * nsp, nsp)
    dilate = ctx.attr_ints("dilate", (1,) * nsp, nsp)
    pad = ctx.attr_ints("pad", (0,) * nsp, nsp)
    if nsp == 1:
        kernel, stride, dilate, pad = (1, *kernel), (1, *stride), (1, *dilate), (0, *pad)
    return kernel, stride, dilate, pad


def _check_layout(ctx: Context, nsp: int) -> None:
    layout = ctx.attr("layout")
    if layout not in (None, "NCHW", "NCW"):
        raise ctx.error(f"layout={layout!r} is not supported (only channels-first NCW/NCHW)")


@converter("Convolution", "Convolution_v1")
def convert_convolution(ctx: Context, inputs):
    x, nsp = _as_2d(ctx, inputs[0])
    _check_layout(ctx, nsp)
    w = _as_2d(ctx, inputs[1])[0]
    kernel, stride, dilate, pad = _window(ctx, nsp)
    attrs = {"strides": stride, "padding": (pad[0], pad[1], pad[0], pad[1]), "dilation": dilate,
             "groups": ctx.attr_int("num_group", 1)}
    out = ctx.op("conv2d", [x, w], attrs)
    if not ctx.attr_bool("no_bias", False) and len(inputs) > 2 and inputs[2]:
        out = ctx.op("bias_add", [out, inputs[2]], {"axis": 1})
    return _from_2d(ctx, out, nsp)


@converter("Deconvolution")
def convert_deconvolution(ctx: Context, inputs):
    """A transposed convolution (``nnvm.frontend.compose``): output ``stride * (in - 1) + (k - 1) * dilate
    + 1 - 2 * pad + adj`` per axis."""
    x, nsp = _as_2d(ctx, inputs[0])
    _check_layout(ctx, nsp)
    w = _as_2d(ctx, inputs[1])[0]
    kernel, stride, dilate, pad = _window(ctx, nsp)
    adj = ctx.attr_ints("adj", (0,) * nsp, nsp)
    adj = (0, *adj) if nsp == 1 else adj
    if ctx.attr("target_shape") not in (None, ()):
        raise ctx.error("target_shape is not supported; give pad and adj instead")
    groups = ctx.attr_int("num_group", 1)
    out = conv2d_transpose(ctx, x, w, stride, dilate, pad, pad, adj, groups)
    if not ctx.attr_bool("no_bias", True) and len(inputs) > 2 and inputs[2]:
        out = ctx.op("bias_add", [out, inputs[2]], {"axis": 1})
    return _from_2d(ctx, out, nsp)


@converter("Pooling", "Pooling_v1")
def convert_pooling(ctx: Context, inputs):
    x, nsp = _as_2d(ctx, inputs[0])
    _check_layout(ctx, nsp)
    pool_type = ctx.attr_str("pool_type", "max")
    if pool_type not in ("max", "avg", "sum", "lp"):
        raise ctx.error(f"pool_type={pool_type!r} is not supported")
    if ctx.attr_bool("global_pool", False):
        return _from_2d(ctx, _global_pool(ctx, x, pool_type), nsp)
    kernel, stride, _, pad = _window(ctx, nsp)
    _, _, h, w = ctx.shape(x)
    convention = ctx.attr_str("pooling_convention", "valid")
    include_pad = ctx.attr_bool("count_include_pad", True)
    ceil_mode, padding_window = False, False
    if convention == "valid":
        before, after = list(pad), list(pad)
    elif convention == "full":
        rules = [full_pooling_pads(size, k, s, p) for size, k, s, p in zip((h, w), kernel, stride, pad)]
        before, after = [r[0] for r in rules], [r[1] for r in rules]
        padding_window = any(r[3] for r in rules)
        ceil_mode = not padding_window
    else:
        # 'same' included: MXNet 1.9.1 itself fails on it (1-D max pooling only, and that crashes)
        raise ctx.error(f"pooling_convention={convention!r} is not supported")
    if padding_window:
        if pool_type != "max":
            raise ctx.error(f"{pool_type} pooling with pooling_convention='full' where a window lies "
                            "wholly in the padding is not supported")
        lowest = float(np.finfo(ctx.dtype(x)).min) if ctx.dtype(x).startswith("float") else 0.0
        x = ctx.op("pad", [x], {"pad_width": (0, 0, 0, 0, before[0], after[0], before[1], after[1]),
                                "mode": "constant", "pad_value": lowest})
        before, after = [0, 0], [0, 0]
    attrs = {"pool_size": kernel, "strides": stride, "padding": (before[0], before[1], after[0], after[1]),
             "ceil_mode": ceil_mode}
    if pool_type == "max":
        return _from_2d(ctx, ctx.op("max_pool2d", [x], attrs), nsp)
    if pool_type == "avg":
        return _from_2d(ctx, ctx.op("avg_pool2d", [x], {**attrs, "count_include_pad": include_pad}), nsp)
    if pool_type == "sum":
        if convention != "valid":
            raise ctx.error(f"sum pooling with pooling_convention={convention!r} is not supported")
        y = ctx.op("avg_pool2d", [x], {**attrs, "count_include_pad": True})
        return _from_2d(ctx, ctx.op("multiply", [y, ctx.scalar(math.prod(kernel), y)]), nsp)
    p = ctx.attr_int("p_value", 2)
    if convention != "valid":
        raise ctx.error(f"lp pooling with pooling_convention={convention!r} is not supported")
    powered = ctx.op("power", [ctx.op("abs", [x]), ctx.scalar(p, x)])
    y = ctx.op("avg_pool2d", [powered], {**attrs, "count_include_pad": True})
    y = ctx.op("multiply", [y, ctx.scalar(math.prod(kernel), y)])
    return _from_2d(ctx, ctx.op("power", [y, ctx.scalar(1.0 / p, y)]), nsp)


def _global_pool(ctx: Context, x: str, pool_type: str) -> str:
    if pool_type == "max":
        return ctx.op("global_max_pool2d", [x])
    if pool_type == "avg":
        return ctx.op("global_avg_pool2d", [x])
    if pool_type == "sum":
        return ctx.op("sum", [x], {"axis": (2, 3), "keepdims": True})
    p = ctx.attr_int("p_value", 2)
    s = ctx.op("sum", [ctx.op("power", [ctx.op("abs", [x]), ctx.scalar(p, x)])], {"axis": (2, 3),
                                                                                   "keepdims": True})
    return ctx.op("power", [s, ctx.scalar(1.0 / p, s)])


@converter("BatchNorm", "BatchNorm_v1", "CuDNNBatchNorm")
def convert_batch_norm(ctx: Context, inputs):
    """Inference batch normalization with the moving statistics; ``fix_gamma`` (default True) reads
    gamma as 1 whatever is stored."""
    x, gamma, beta, mean, var = inputs[:5]
    if ctx.attr_bool("fix_gamma", True):
        gamma = ctx.param(np.ones(ctx.shape(gamma), dtype=ctx.dtype(gamma)), "gamma_fixed")
    axis = ctx.normalize_axis(ctx.attr_int("axis", 1), ctx.rank(x))
    eps = ctx.attr_float("eps", 1e-3)
    return ctx.op("batch_norm", [x, gamma, beta, mean, var], {"epsilon": eps, "axis": axis})


@converter("InstanceNorm")
def convert_instance_norm(ctx: Context, inputs):
    return ctx.op("instance_norm", inputs[:3], {"epsilon": ctx.attr_float("eps", 1e-3)})


@converter("LayerNorm")
def convert_layer_norm(ctx: Context, inputs):
    x, gamma, beta = inputs[:3]
    axis = ctx.normalize_axis(ctx.attr_int("axis", -1), ctx.rank(x))
    eps = ctx.attr_float("eps", 1e-5)
    if axis == ctx.rank(x) - 1:
        return ctx.op("layer_norm", [x, gamma, beta], {"axis": axis, "epsilon": eps})
    mean = ctx.op("mean", [x], {"axis": (axis,), "keepdims": True})
    centered = ctx.op("subtract", [x, mean])
    var = ctx.op("mean", [ctx.op("multiply", [centered, centered])], {"axis": (axis,), "keepdims": True})
    std = ctx.op("sqrt", [ctx.op("add", [var, ctx.scalar(eps, var)])])
    shape = [1] * ctx.rank(x)
    shape[axis] = ctx.shape(x)[axis]
    y = ctx.op("divide", [centered, std])
    return ctx.op("add", [ctx.op("multiply", [y, ctx.reshape(gamma, shape)]), ctx.reshape(beta, shape)])


@converter("L2Normalization")
def convert_l2_normalization(ctx: Context, inputs):
    x = inputs[0]
    mode = ctx.attr_str("mode", "instance")
    eps = ctx.attr_float("eps", 1e-10)
    rank = ctx.rank(x)
    axes = {"instance": tuple(range(1, rank)), "channel": (1,), "spatial": tuple(range(2, rank))}.get(mode)
    if axes is None:
        raise ctx.error(f"mode={mode!r} is not supported")
    sq = ctx.op("sum", [ctx.op("multiply", [x, x])], {"axis": axes, "keepdims": True})
    norm = ctx.op("sqrt", [ctx.op("add", [sq, ctx.scalar(eps, sq)])])
    return ctx.op("divide", [x, norm])


@converter("LRN")
def convert_lrn(ctx: Context, inputs):
    attrs = {"size": ctx.attr_int("nsize", None), "alpha": ctx.attr_float("alpha", 1e-4),
             "beta": ctx.attr_float("beta", 0.75), "bias": ctx.attr_float("knorm", 2.0)}
    return ctx.op("lrn", [inputs[0]], attrs)


@converter("FullyConnected")
def convert_fully_connected(ctx: Context, inputs):
    """``flatten`` (default True) reads the input as (N, rest); else the last axis is the features."""
    x, w = inputs[0], inputs[1]
    shape = ctx.shape(x)
    if ctx.attr_bool("flatten", True):
        x2 = ctx.reshape(x, (shape[0], math.prod(shape[1:])))
        lead = (shape[0],)
    else:
        x2 = ctx.reshape(x, (math.prod(shape[:-1]), shape[-1]))
        lead = shape[:-1]
    out = ctx.op("dense", [x2, w])
    if not ctx.attr_bool("no_bias", False) and len(inputs) > 2 and inputs[2]:
        out = ctx.op("bias_add", [out, inputs[2]], {"axis": 1})
    return ctx.reshape(out, (*lead, ctx.shape(out)[-1]))


_ACTIVATIONS = {"relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "softrelu": "softplus"}


@converter("Activation")
def convert_activation(ctx: Context, inputs):
    act = ctx.attr_str("act_type", "relu")
    x = inputs[0]
    if act in _ACTIVATIONS:
        return ctx.op(_ACTIVATIONS[act], [x])
    if act == "softsign":
        return ctx.op("divide", [x, ctx.op("add", [ctx.op("abs", [x]), ctx.scalar(1, x)])])
    if act == "log_sigmoid":
        return ctx.op("negative", [ctx.op("softplus", [ctx.op("negative", [x])])])
    if act == "mish":
        return ctx.op("multiply", [x, ctx.op("tanh", [ctx.op("softplus", [x])])])
    raise ctx.error(f"act_type={act!r} is not supported")


@converter("LeakyReLU")
def convert_leaky_relu(ctx: Context, inputs):
    act = ctx.attr_str("act_type", "leaky")
    x = inputs[0]
    slope = ctx.attr_float("slope", 0.25)
    if act == "leaky":
        return ctx.op("leaky_relu", [x], {"alpha": slope})
    if act == "prelu":
        gamma = inputs[1]
        if ctx.rank(x) > 1 and ctx.shape(gamma) != (1,):
            gamma = ctx.reshape(gamma, (ctx.shape(gamma)[0],) + (1,) * (ctx.rank(x) - 2))
        return ctx.op("prelu", [x, gamma])
    if act == "elu":
        return ctx.op("elu", [x], {"alpha": slope})
    if act == "selu":
        return ctx.op("selu", [x])
    if act == "gelu":
        return ctx.op("gelu", [x])
    if act == "rrelu":  # at inference the slope is the middle of its range
        lower, upper = ctx.attr_float("lower_bound", 0.125), ctx.attr_float("upper_bound", 0.334)
        return ctx.op("leaky_relu", [x], {"alpha": (lower + upper) / 2})
    raise ctx.error(f"act_type={act!r} is not supported")


@converter("Dropout")
def convert_dropout(ctx: Context, inputs):
    if ctx.attr_str("mode", "training") == "always":
        raise ctx.error("mode='always' drops at random at inference too; nnvm compiles deterministic graphs")
    return inputs[0]


def _softmax(ctx: Context, x: str, axis: int, log: bool = False) -> str:
    temperature = ctx.attr_float("temperature", None)
    if temperature not in (None, 1.0):
        x = ctx.op("divide", [x, ctx.scalar(temperature, x)])
    return ctx.op("log_softmax" if log else "softmax", [x], {"axis": ctx.normalize_axis(axis, ctx.rank(x))})


@converter("softmax")
def convert_softmax(ctx: Context, inputs):
    if ctx.attr_bool("use_length", False):
        raise ctx.error("use_length=True is not supported")
    return _softmax(ctx, inputs[0], ctx.attr_int("axis", -1))


@converter("log_softmax")
def convert_log_softmax(ctx: Context, inputs):
    return _softmax(ctx, inputs[0], ctx.attr_int("axis", -1), log=True)


@converter("SoftmaxOutput", "Softmax", ignore=(1,))
def convert_softmax_output(ctx: Context, inputs):
    """The training head at inference: a softmax over (N, rest), or over axis 1 with ``multi_output``."""
    x = inputs[0]
    shape = ctx.shape(x)
    if ctx.attr_bool("multi_output", False):
        return ctx.op("softmax", [x], {"axis": 1})
    if ctx.attr_bool("preserve_shape", False):
        return ctx.op("softmax", [x], {"axis": ctx.rank(x) - 1})
    flat = ctx.reshape(x, (shape[0], math.prod(shape[1:])))
    return ctx.reshape(ctx.op("softmax", [flat], {"axis": 1}), shape)


@converter("SoftmaxActivation")
def convert_softmax_activation(ctx: Context, inputs):
    """``channel``: over axis 1; ``instance``: over the last axis (MXNet flattens to 2-D keeping it)."""
    x = inputs[0]
    axis = 1 if ctx.attr_str("mode", "instance") == "channel" else ctx.rank(x) - 1
    return ctx.op("softmax", [x], {"axis": axis})


@converter("LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput", ignore=(1,))
def convert_regression_output(ctx: Context, inputs):
    if ctx.op_type == "LogisticRegressionOutput":
        return ctx.op("sigmoid", [inputs[0]])
    return inputs[0]


@converter("UpSampling")
def convert_upsampling(ctx: Context, inputs):
    if ctx.attr_str("sample_type", "nearest") != "nearest":
        raise ctx.error("only sample_type='nearest' is supported")
    if len([v for v in inputs if v]) != 1:
        raise ctx.error("nearest UpSampling of several inputs is not supported")
    scale = ctx.attr_int("scale", None)
    x = inputs[0]
    n, c, h, w = ctx.shape(x)
    y = ctx.reshape(x, (n, c, h, 1, w, 1))
    y = ctx.op("broadcast_to", [y], {"shape": (n, c, h, scale, w, scale)})
    return ctx.reshape(y, (n, c, h * scale, w * scale))


@converter("Embedding")
def convert_embedding(ctx: Context, inputs):
    data, weight = inputs[0], inputs[1]
    if not ctx.dtype(data).startswith("int"):
        data = ctx.cast(data, "int64")
    return ctx.op("take", [weight, data], {"axis": 0})


# MXNet's gate blocks in ONNX's order (what ``recurrent_direction`` takes): LSTM i f g o -> i o f c,
# GRU r z n -> z r n.
_GATE_ORDER = {"lstm": (0, 3, 1, 2), "gru": (1, 0, 2), "rnn_tanh": (0,), "rnn_relu": (0,)}
_CELL = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}


@converter("RNN")
def convert_rnn(ctx: Context, inputs):
    """The fused RNN operator (layout TNC), unrolled: its flat ``parameters`` hold every layer's and
    direction's i2h and h2h weights, then all their biases (gluon's packing order)."""
    mode = ctx.attr_str("mode", "lstm")
    if mode not in _GATE_ORDER:
        raise ctx.error(f"mode={mode!r} is not supported")
    for key in ("projection_size", "lstm_state_clip_min", "lstm_state_clip_max"):
        if ctx.attr(key) is not None:
            raise ctx.error(f"{key} is not supported")
    if ctx.attr_bool("use_sequence_length", False):
        raise ctx.error("use_sequence_length=True is not supported")
    x, flat, state = inputs[0], inputs[1], inputs[2]
    cell_state = inputs[3] if mode == "lstm" else None
    packed = ctx.const_value(flat)
    if packed is None:
        raise ctx.error("the parameters input must be a stored parameter")
    packed = np.asarray(packed).reshape(-1)
    hidden, layers = ctx.attr_int("state_size", None), ctx.attr_int("num_layers", 1)
    dirs = 2 if ctx.attr_bool("bidirectional", False) else 1
    order = _GATE_ORDER[mode]
    gates = len(order)
    steps, batch, size = ctx.shape(x)
    sizes = [size] + [dirs * hidden] * (layers - 1)
    need = sum(dirs * gates * hidden * (i + hidden + 2) for i in sizes)
    if packed.size != need:
        raise ctx.error(f"the parameters hold {packed.size} values; {layers} layer(s) of state_size {hidden} "
                        f"over {size} inputs need {need}")

    def reorder(a):  # gate blocks along axis 0 into ONNX's order
        return np.concatenate([a[k * hidden:(k + 1) * hidden] for k in order])

    pos = 0
    weights = []
    for i in sizes:
        for _ in range(dirs):
            w = packed[pos:pos + gates * hidden * i].reshape(gates * hidden, i)
            pos += w.size
            r = packed[pos:pos + gates * hidden * hidden].reshape(gates * hidden, hidden)
            pos += r.size
            weights.append([reorder(w), reorder(r)])
    for k in range(len(weights)):
        for _ in range(2):
            weights[k].append(reorder(packed[pos:pos + gates * hidden]))
            pos += gates * hidden

    cell = _CELL[mode]

    def act(k, v):
        if cell == "RNN":
            return ctx.op("relu" if mode == "rnn_relu" else "tanh", [v])
        return ctx.op("sigmoid" if k == 0 else "tanh", [v])

    hs, cs = [], []
    for layer in range(layers):
        per_dir = []
        for d in range(dirs):
            w, r, wb, rb = (ctx.param(a, "weights") for a in weights[layer * dirs + d])
            h0 = take(ctx, state, 0, layer * dirs + d)
            c0 = take(ctx, cell_state, 0, layer * dirs + d) if cell_state else None
            outs, h, c = recurrent_direction(ctx, cell, x, w, r, wb, rb, h0, c0, d == 1, act,
                                             linear_before_reset=True)
            per_dir.append(outs)
            hs.append(ctx.reshape(h, (1, batch, hidden)))
            if c is not None:
                cs.append(ctx.reshape(c, (1, batch, hidden)))
        parts = []
        for t in range(steps):  # (N, H) per direction -> (1, N, D*H)
            both = [per_dir[d][t] for d in range(dirs)]
            step = both[0] if dirs == 1 else ctx.op("concatenate", both, {"axis": 1})
            parts.append(ctx.reshape(step, (1, batch, dirs * hidden)))
        x = parts[0] if steps == 1 else ctx.op("concatenate", parts, {"axis": 0})
    if not ctx.attr_bool("state_outputs", False):
        return [x]

    def join(values):
        return values[0] if len(values) == 1 else ctx.op("concatenate", values, {"axis": 0})

    return [x, join(hs)] + ([join(cs)] if cs else [])

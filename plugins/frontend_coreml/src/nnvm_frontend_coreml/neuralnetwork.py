"""NeuralNetwork (``.mlmodel``) conversion: the layer list of a plain, classifier or regressor network.

Layers name their input and output blobs; weights are ``WeightParams`` (float32, float16 bytes, or
quantized: linear with per-channel scale and bias, or a lookup table). Inputs with the legacy shape
mapping (``arrayInputShapeMapping`` 0) are rank-5 [Seq, Batch, C, H, W] to CoreML; a declared (C, H, W)
or (C,) input is taken as batch 1, NCHW. A classifier's outputs are its network's outputs (the
probabilities); the label lookup is left to the caller.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import (
    ConversionContext,
    ConverterTable,
    bind_input,
    call_converter,
    check_shape_keys,
    check_supported,
)
from nnvm.frontend.compose import conv2d_transpose
from nnvm.frontend.padding import same_pads
from nnvm.graph.builder import GraphBuilder
from nnvm_frontend_coreml.reader import unpack_bits

TABLE = ConverterTable("CoreML NeuralNetwork")
register = TABLE.register


class LayerContext(ConversionContext):
    """The layer being converted: ``layer`` is its message (e.g. ``ConvolutionLayerParams``)."""

    layer = None

    @property
    def label(self) -> str:
        return f"layer {self.name} ({self.op_type})"

    def weights(self, params, shape=None, what: str = "weights") -> np.ndarray:
        """A ``WeightParams`` as float32, reshaped to ``shape``."""
        try:
            w = weight_array(params)
        except ModelLoadError as exc:
            raise self.error(f"{what}: {exc}") from None
        if shape is not None:
            if w.size != int(np.prod(shape, dtype=np.int64)):
                raise self.error(
                    f"{what} hold {w.size} values, not the {int(np.prod(shape))} of shape {tuple(shape)}"
                )
            w = w.reshape(shape)
        return w


def weight_array(params) -> np.ndarray:
    """The float32 values of a ``WeightParams``: float, float16, or quantized raw values."""
    if len(params.floatValue):
        return np.asarray(params.floatValue, np.float32)
    if len(params.float16Value):
        return np.frombuffer(params.float16Value, "<f2").astype(np.float32)
    raw = params.rawValue or params.int8RawValue
    if not raw:
        return np.zeros(0, np.float32)
    q = params.quantization
    bits = int(q.numberOfBits) or 8
    if params.int8RawValue:
        codes = np.frombuffer(raw, np.int8).astype(np.float32)
    elif bits == 8:
        codes = np.frombuffer(raw, np.uint8).astype(np.float32)
    else:
        codes = unpack_bits(np.frombuffer(raw, np.uint8), bits, None).astype(np.float32)
    kind = q.WhichOneof("QuantizationType")
    if kind == "linearQuantization":
        scale = np.asarray(q.linearQuantization.scale, np.float32)
        bias = np.asarray(q.linearQuantization.bias, np.float32) if len(q.linearQuantization.bias) else 0.0
        channels = len(scale)
        rows = codes.reshape(channels, -1) if channels > 1 else codes.reshape(1, -1)
        b = np.reshape(bias, (-1, 1)) if np.ndim(bias) else bias
        return (rows * scale.reshape(-1, 1) + b).ravel()
    if kind == "lookupTableQuantization":
        table = np.asarray(q.lookupTableQuantization.floatValue, np.float32)
        return table[codes.astype(np.int64)]
    raise ModelLoadError(f"quantized weights without a quantization scheme ({bits}-bit raw values)")


def convert_network(spec, nn, where: str, shapes):
    layers = list(nn.layers)
    check_supported(
        ((layer.WhichOneof("layer"), layer.name) for layer in layers),
        TABLE.supports,
        "CoreML NeuralNetwork",
        where,
    )
    b = GraphBuilder()
    inputs = [i for i in spec.description.input]
    shapes = check_shape_keys(shapes, [i.name for i in inputs], where)
    env: dict = {}
    for inp in inputs:
        env[inp.name] = _input(b, inp, nn, shapes, where)
    ctx = LayerContext(b)
    for layer in layers:
        kind = layer.WhichOneof("layer")
        ctx.begin(layer.name, kind, {})
        ctx.layer = getattr(layer, kind)
        missing = [i for i in layer.input if i not in env]
        if missing:
            raise ModelLoadError(
                f"{where}: layer {layer.name} reads {missing[0]!r}, which no input or earlier layer produces"
            )
        results = call_converter(ctx, TABLE.lookup(kind), [env[i] for i in layer.input])
        for out, value in zip(layer.output, results):
            env[out] = value
    outputs = []
    for out in spec.description.output:
        if out.name in env:
            outputs.append(env[out.name])
        elif out.name == spec.description.predictedFeatureName:
            continue  # a classifier's label: a lookup in its class list, left to the caller
        elif out.type.WhichOneof("Type") == "dictionaryType" and kind_of(spec) == "neuralNetworkClassifier":
            # the class probabilities, as the vector the network computes (in class-label order)
            layer_name = nn.labelProbabilityLayerName or layers[-1].output[0]
            outputs.append(env[layer_name])
        else:
            raise ModelLoadError(f"{where}: the model output {out.name!r} is produced by no layer")
    if not outputs:
        raise ModelLoadError(f"{where}: the model has no tensor output")
    for value in outputs:
        b.output(value)
    return b.build()


def kind_of(spec) -> str:
    return spec.WhichOneof("Type")


def _input(b: GraphBuilder, inp, nn, shapes, where: str) -> str:
    """An input as a graph input: multi-arrays with their shape (legacy (C, H, W) gets a batch of 1),
    images as (1, C, H, W) float32 with the network's preprocessing (scale, channel biases)."""
    kind = inp.type.WhichOneof("Type")
    if kind == "multiArrayType":
        declared = [int(d) for d in inp.type.multiArrayType.shape]
        if not declared:
            declared = None
        elif nn.arrayInputShapeMapping == 0 and len(declared) in (1, 3):  # legacy rank-5 mapping
            declared = [1, *declared] + ([1, 1] if len(declared) == 1 else [])
        return b.input(inp.name, bind_input(inp.name, declared, shapes, where), "float32")
    if kind == "imageType":
        img = inp.type.imageType
        channels = 1 if img.colorSpace == 10 else 3  # GRAYSCALE
        shape = bind_input(inp.name, [1, channels, int(img.height), int(img.width)], shapes, where)
        x = b.input(inp.name, shape, "float32")
        for pre in nn.preprocessing:
            if pre.featureName and pre.featureName != inp.name:
                continue
            if pre.WhichOneof("preprocessor") == "scaler":
                s = pre.scaler
                biases = (
                    [s.grayBias]
                    if channels == 1
                    else [s.blueBias, s.greenBias, s.redBias]
                    if img.colorSpace == 30
                    else [s.redBias, s.greenBias, s.blueBias]
                )
                scale = s.channelScale if s.channelScale else 1.0
                x = b.node1("multiply", [x, b.const(np.float32(scale))])
                x = b.node1("add", [x, b.const(np.asarray(biases, np.float32).reshape(1, channels, 1, 1))])
            else:
                raise ModelLoadError(
                    f"{where}: image input {inp.name!r} has mean-image preprocessing, which is not supported"
                )
        return x
    raise ModelLoadError(
        f"{where}: input {inp.name!r} is of type {kind}; only multi-arrays and images are supported"
    )


def _spatial_pads(ctx: LayerContext, m, size, kernel, strides, dilations) -> tuple[tuple, bool]:
    """nnvm's (top, left, bottom, right) and ceil mode for a layer's valid/same/includeLastPixel padding."""
    kind = m.WhichOneof("ConvolutionPaddingType" if hasattr(m, "isDeconvolution") else "PoolingPaddingType")
    if kind == "valid":
        amounts = list(m.valid.paddingAmounts.borderAmounts) or []
        begins = [int(a.startEdgeSize) for a in amounts] or [0, 0]
        ends = [int(a.endEdgeSize) for a in amounts] or [0, 0]
        return (begins[0], begins[1], ends[0], ends[1]), False
    if kind == "same":
        upper = m.same.asymmetryMode == 0  # BOTTOM_RIGHT_HEAVY
        begins, ends = same_pads(size, kernel, strides, dilations, upper=upper)
        return (begins[0], begins[1], ends[0], ends[1]), False
    if kind == "includeLastPixel":
        p = [int(v) for v in m.includeLastPixel.paddingAmounts] or [0, 0]
        return (p[0], p[1], p[0], p[1]), True
    raise ctx.error(f"padding type {kind} is not supported")


@register("convolution")
def convolution(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    if m.isDeconvolution:
        return _deconvolution(ctx, x, m)
    kernel = tuple(int(k) for k in m.kernelSize) or (3, 3)
    strides = tuple(int(s) for s in m.stride) or (1, 1)
    dilations = tuple(int(d) for d in m.dilationFactor) or (1, 1)
    groups = int(m.nGroups) or 1
    w = ctx.weights(m.weights, (int(m.outputChannels), int(m.kernelChannels), *kernel))
    pads, _ = _spatial_pads(ctx, m, ctx.shape(x)[2:], kernel, strides, dilations)
    y = ctx.op(
        "conv2d",
        [x, ctx.param(w, "weight")],
        {"strides": strides, "padding": pads, "dilation": dilations, "groups": groups},
    )
    if m.hasBias:
        y = ctx.op(
            "bias_add",
            [y, ctx.param(ctx.weights(m.bias, (int(m.outputChannels),), "bias"), "bias")],
            {"axis": 1},
        )
    return y


def _deconvolution(ctx: LayerContext, x: str, m) -> str:
    kernel = tuple(int(k) for k in m.kernelSize) or (3, 3)
    strides = tuple(int(s) for s in m.stride) or (1, 1)
    dilations = tuple(int(d) for d in m.dilationFactor) or (1, 1)
    groups = int(m.nGroups) or 1
    cin, cout = int(m.kernelChannels), int(m.outputChannels)
    w = ctx.weights(m.weights, (cin, cout // groups, *kernel))
    size = ctx.shape(x)[2:]
    full = [(n - 1) * s + d * (k - 1) + 1 for n, s, d, k in zip(size, strides, dilations, kernel)]
    if m.WhichOneof("ConvolutionPaddingType") == "same":  # output n * s; the extra cropped at the end
        crop = [max(f - n * s, 0) for f, n, s in zip(full, size, strides)]
        pads = (crop[0] // 2, crop[1] // 2, crop[0] - crop[0] // 2, crop[1] - crop[1] // 2)
    else:
        pads, _ = _spatial_pads(ctx, m, size, kernel, strides, dilations)
    extra = (0, 0)
    if len(m.outputShape):
        want = [int(v) for v in m.outputShape]
        extra = (want[0] - (full[0] - pads[0] - pads[2]), want[1] - (full[1] - pads[1] - pads[3]))
    weight = ctx.param(np.asarray(w, dtype=ctx.dtype(x)), "weight")
    y = conv2d_transpose(ctx, x, weight, strides, dilations, pads[:2], pads[2:], extra, groups)
    if m.hasBias:
        y = ctx.op("bias_add", [y, ctx.param(ctx.weights(m.bias, (cout,), "bias"), "bias")], {"axis": 1})
    return y


@register("innerProduct")
def inner_product(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    shape = ctx.shape(x)
    cin, cout = int(m.inputChannels), int(m.outputChannels)
    lead = shape[:-3] if len(shape) >= 4 else shape[:-1]
    flat = ctx.reshape(x, (int(np.prod(lead, dtype=np.int64)), cin))
    y = ctx.op("dense", [flat, ctx.param(ctx.weights(m.weights, (cout, cin)), "weight")])
    if m.hasBias:
        y = ctx.op("add", [y, ctx.param(ctx.weights(m.bias, (cout,), "bias"), "bias")])
    return ctx.reshape(y, (*lead, cout, 1, 1) if len(shape) >= 4 else (*lead, cout))


@register("batchnorm")
def batchnorm(ctx: LayerContext, inputs):
    m = ctx.layer
    c = int(m.channels)
    if m.computeMeanVar:
        raise ctx.error("batchnorm with computeMeanVar (statistics of the input) is not supported")
    params = [
        ctx.param(ctx.weights(getattr(m, k), (c,), k), k) for k in ("gamma", "beta", "mean", "variance")
    ]
    return ctx.op("batch_norm", [inputs[0], *params], {"epsilon": float(m.epsilon), "axis": 1})


def _per_channel(ctx: LayerContext, x: str, values: np.ndarray) -> str:
    """A per-channel (or scalar) parameter shaped to broadcast over NCHW ``x``."""
    if values.size == 1:
        return ctx.param(values.reshape(()).astype(np.float32))
    return ctx.param(values.reshape((-1,) + (1,) * (ctx.rank(x) - 2)).astype(np.float32))


@register("activation")
def activation(ctx: LayerContext, inputs):
    x = inputs[0]
    a = ctx.layer
    kind = a.WhichOneof("NonlinearityType")
    p = getattr(a, kind)
    simple = {"ReLU": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "softsign": None}
    if kind in simple and simple[kind]:
        return ctx.op(simple[kind], [x])
    if kind == "linear":
        return ctx.op("add", [ctx.op("multiply", [x, ctx.scalar(p.alpha, x)]), ctx.scalar(p.beta, x)])
    if kind == "leakyReLU":
        return ctx.op("leaky_relu", [x], {"alpha": float(p.alpha)})
    if kind == "ELU":
        return ctx.op("elu", [x], {"alpha": float(p.alpha)})
    if kind == "sigmoidHard":
        y = ctx.op("add", [ctx.op("multiply", [x, ctx.scalar(p.alpha, x)]), ctx.scalar(p.beta, x)])
        return ctx.op("clip", [y], {"a_min": 0.0, "a_max": 1.0})
    if kind == "scaledTanh":
        y = ctx.op("tanh", [ctx.op("multiply", [x, ctx.scalar(p.beta, x)])])
        return ctx.op("multiply", [y, ctx.scalar(p.alpha, x)])
    if kind == "thresholdedReLU":
        keep = ctx.op("greater", [x, ctx.scalar(p.alpha, x)])
        return ctx.op("where", [keep, x, ctx.scalar(0.0, x)])
    if kind == "softsign":
        return ctx.op("divide", [x, ctx.op("add", [ctx.op("abs", [x]), ctx.scalar(1.0, x)])])
    if kind == "softplus":
        return ctx.op("softplus", [x])
    if kind == "PReLU":
        return ctx.op("prelu", [x, _per_channel(ctx, x, ctx.weights(p.alpha, None, "alpha"))])
    if kind == "parametricSoftplus":
        alpha = _per_channel(ctx, x, ctx.weights(p.alpha, None, "alpha"))
        beta = _per_channel(ctx, x, ctx.weights(p.beta, None, "beta"))
        return ctx.op("multiply", [ctx.op("softplus", [ctx.op("multiply", [x, beta])]), alpha])
    raise ctx.error(f"activation {kind} is not supported")


@register("clip")
def clip(ctx: LayerContext, inputs):
    return ctx.op("clip", inputs[:1], {"a_min": float(ctx.layer.minVal), "a_max": float(ctx.layer.maxVal)})


@register("pooling")
def pooling(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    kinds = {0: "max", 1: "avg"}
    if m.type not in kinds:
        raise ctx.error("L2 pooling is not supported")
    if m.globalPooling:
        return ctx.op(f"global_{kinds[m.type]}_pool2d", [x])
    kernel = tuple(int(k) for k in m.kernelSize) or (3, 3)
    strides = tuple(int(s) for s in m.stride) or (1, 1)
    pads, ceil_mode = _spatial_pads(ctx, m, ctx.shape(x)[2:], kernel, strides, (1, 1))
    attrs = {"pool_size": kernel, "strides": strides, "padding": pads, "ceil_mode": ceil_mode}
    if m.type == 1:
        attrs["count_include_pad"] = not m.avgPoolExcludePadding
    return ctx.op(f"{kinds[m.type]}_pool2d", [x], attrs)


def _fold(ctx: LayerContext, op: str, inputs, alpha: float) -> str:
    if len(inputs) == 1:  # one input: with the layer's constant alpha
        return ctx.op(op, [inputs[0], ctx.scalar(alpha, inputs[0])])
    y = inputs[0]
    for v in inputs[1:]:
        y = ctx.op(op, [y, v])
    return y


@register("add")
def add(ctx: LayerContext, inputs):
    return _fold(ctx, "add", inputs, ctx.layer.alpha)


@register("multiply")
def multiply(ctx: LayerContext, inputs):
    return _fold(ctx, "multiply", inputs, ctx.layer.alpha)


@register("max")
def max_(ctx: LayerContext, inputs):
    return _fold(ctx, "maximum", inputs, 0.0)


@register("min")
def min_(ctx: LayerContext, inputs):
    return _fold(ctx, "minimum", inputs, 0.0)


@register("average")
def average(ctx: LayerContext, inputs):
    total = _fold(ctx, "add", inputs, 0.0)
    return ctx.op("multiply", [total, ctx.scalar(1.0 / len(inputs), total)])


@register("concat")
def concat(ctx: LayerContext, inputs):
    if ctx.layer.sequenceConcat:
        raise ctx.error("sequence concatenation is not supported")
    axis = (
        ctx.rank(inputs[0]) - 3 if ctx.rank(inputs[0]) >= 3 else ctx.rank(inputs[0]) - 1
    )  # C of (.., C, H, W)
    return inputs[0] if len(inputs) == 1 else ctx.op("concatenate", inputs, {"axis": axis})


@register("flatten")
def flatten(ctx: LayerContext, inputs):
    x = inputs[0]
    shape = ctx.shape(x)
    if ctx.layer.mode == 1 and len(shape) == 4:  # CHANNEL_LAST: (H, W, C) order
        x = ctx.transpose(x, (0, 2, 3, 1))
    n = shape[0] if len(shape) == 4 else 1
    return ctx.reshape(x, (n, int(np.prod(shape, dtype=np.int64)) // n, 1, 1))


@register("reshapeStatic")
def reshape_static(ctx: LayerContext, inputs):
    x = inputs[0]
    target = [int(d) for d in ctx.layer.targetShape]
    total = int(np.prod(ctx.shape(x), dtype=np.int64))
    known = int(np.prod([d for d in target if d > 0], dtype=np.int64))
    return ctx.reshape(x, [total // known if d == -1 else d for d in target])


@register("reshape")
def reshape(ctx: LayerContext, inputs):
    x = inputs[0]
    target = [int(d) for d in ctx.layer.targetShape]
    if len(target) == 3:  # (C, H, W) for the legacy layout, batch kept
        target = [ctx.shape(x)[0], *target]
    if ctx.layer.mode == 1:
        raise ctx.error("reshape in CHANNEL_LAST mode is not supported")
    return ctx.reshape(x, target)


@register("permute")
def permute(ctx: LayerContext, inputs):
    axes = [int(a) for a in ctx.layer.axis]  # over (Seq, C, H, W); batch stays
    if axes[0] != 0:
        raise ctx.error("permute that moves the sequence axis is not supported")
    return ctx.transpose(inputs[0], [0] + axes[1:])


@register("softmax")
def softmax(ctx: LayerContext, inputs):
    x = inputs[0]
    return ctx.op("softmax", [x], {"axis": ctx.rank(x) - 3 if ctx.rank(x) >= 3 else ctx.rank(x) - 1})


@register("softmaxND")
def softmax_nd(ctx: LayerContext, inputs):
    x = inputs[0]
    return ctx.op("softmax", [x], {"axis": ctx.normalize_axis(int(ctx.layer.axis), ctx.rank(x))})


@register("scale")
def scale(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    y = ctx.op("multiply", [x, _per_channel(ctx, x, ctx.weights(m.scale, None, "scale"))])
    if m.hasBias:
        y = ctx.op("add", [y, _per_channel(ctx, x, ctx.weights(m.bias, None, "bias"))])
    return y


@register("bias")
def bias(ctx: LayerContext, inputs):
    x = inputs[0]
    return ctx.op("add", [x, _per_channel(ctx, x, ctx.weights(ctx.layer.bias, None, "bias"))])


@register("padding")
def padding(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    amounts = list(m.paddingAmounts.borderAmounts) or []
    (top, bottom), (left, right) = [(int(a.startEdgeSize), int(a.endEdgeSize)) for a in amounts] or [
        (0, 0)
    ] * 2
    kind = m.WhichOneof("PaddingType")
    mode = {"constant": "constant", "reflection": "reflect", "replication": "edge"}[kind]
    value = float(m.constant.value) if kind == "constant" else 0.0
    width = (0, 0) * (ctx.rank(x) - 2) + (top, bottom, left, right)
    return ctx.op("pad", [x], {"pad_width": width, "pad_value": value, "mode": mode})


@register("unary")
def unary(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    y = ctx.op("add", [ctx.op("multiply", [x, ctx.scalar(m.scale or 1.0, x)]), ctx.scalar(m.shift, x)])
    kinds = {0: "sqrt", 1: "rsqrt", 2: "reciprocal", 4: "exp", 5: "log", 6: "abs"}
    if m.type == 3:  # POWER
        return ctx.op("power", [y, ctx.scalar(m.alpha, x)])
    if m.type == 7:  # THRESHOLD: max(x, alpha)
        return ctx.op("maximum", [y, ctx.scalar(m.alpha, x)])
    if m.type in (1, 2):  # x + epsilon first
        y = ctx.op("add", [y, ctx.scalar(m.epsilon or 1e-6, x)])
    return ctx.op(kinds[m.type], [y])


@register("l2normalize")
def l2normalize(ctx: LayerContext, inputs):
    x = inputs[0]
    rank = ctx.rank(x)
    axes = tuple(range(max(rank - 3, 1), rank))  # over (C, H, W)
    total = ctx.op("sum", [ctx.op("multiply", [x, x])], {"axis": axes, "keepdims": True})
    # x / sqrt(sum(x^2) + epsilon), as NeuralNetwork.proto documents it
    return ctx.op(
        "divide", [x, ctx.op("sqrt", [ctx.op("add", [total, ctx.scalar(ctx.layer.epsilon or 1e-6, x)])])]
    )


@register("upsample")
def upsample(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    n, c, h, w = ctx.shape(x)
    if len(m.fractionalScalingFactor):
        sh, sw = (float(v) for v in m.fractionalScalingFactor)
    else:
        sh, sw = (int(v) for v in m.scalingFactor) if len(m.scalingFactor) else (1, 1)
    if m.mode == 1:  # BILINEAR
        from nnvm_frontend_coreml.resize import resize_bilinear

        if m.linearUpsampleMode == 0:
            raise ctx.error("bilinear upsampling in the DEFAULT linear mode is not supported")
        return resize_bilinear(ctx, x, int(h * sh), int(w * sw), m.linearUpsampleMode == 1)
    if sh != int(sh) or sw != int(sw):
        raise ctx.error(f"nearest upsampling by fractional factors ({sh}, {sw}) is not supported")
    sh, sw = int(sh), int(sw)
    y = ctx.op("broadcast_to", [ctx.reshape(x, (n, c, h, 1, w, 1))], {"shape": (n, c, h, sh, w, sw)})
    return ctx.reshape(y, (n, c, h * sh, w * sw))


@register("crop")
def crop(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    _, _, h, w = ctx.shape(x)
    if len(inputs) == 2:  # crop to the second input's size from offset
        top, left = (int(v) for v in m.offset) if len(m.offset) else (0, 0)
        oh, ow = ctx.shape(inputs[1])[2:]
        return ctx.op(
            "strided_slice", [x], {"begin": (top, left), "end": (top + oh, left + ow), "axes": (2, 3)}
        )
    (top, bottom), (left, right) = [
        (int(a.startEdgeSize), int(a.endEdgeSize)) for a in m.cropAmounts.borderAmounts
    ]
    return ctx.op(
        "strided_slice", [x], {"begin": (top, left), "end": (h - bottom, w - right), "axes": (2, 3)}
    )


REDUCE_AXES = {0: (-3, -2, -1), 1: (-2, -1), 2: (-3,), 3: (-2,), 4: (-1,)}  # CHW, HW, C, H, W


@register("reduce")
def reduce(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    rank = ctx.rank(x)
    axes = tuple(sorted(ctx.normalize_axis(a, rank) for a in REDUCE_AXES[m.axis]))
    attrs = {"axis": axes, "keepdims": True}
    mode = m.mode
    if mode == 9:
        raise ctx.error("reduce ARGMAX is not supported")
    if mode in (0, 1, 2, 7, 8):  # SUM AVG PROD MAX MIN
        return ctx.op({0: "sum", 1: "mean", 2: "prod", 7: "max", 8: "min"}[mode], [x], attrs)
    if mode == 3:  # LOGSUM
        return ctx.op("log", [ctx.op("sum", [x], attrs)])
    if mode == 4:
        return ctx.op("sum", [ctx.op("multiply", [x, x])], attrs)
    if mode == 5:
        return ctx.op("sum", [ctx.op("abs", [x])], attrs)
    return ctx.op("sqrt", [ctx.op("sum", [ctx.op("multiply", [x, x])], attrs)])


@register("lrn")
def lrn(ctx: LayerContext, inputs):
    m = ctx.layer
    return ctx.op(
        "lrn",
        inputs[:1],
        {"size": int(m.localSize), "alpha": float(m.alpha), "beta": float(m.beta), "bias": float(m.k or 1.0)},
    )


@register("mvn")
def mvn(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    rank = ctx.rank(x)
    axes = tuple(range(rank - 3, rank)) if m.acrossChannels else tuple(range(rank - 2, rank))
    attrs = {"axis": axes, "keepdims": True}
    y = ctx.op("subtract", [x, ctx.op("mean", [x], attrs)])
    if m.normalizeVariance:
        std = ctx.op("sqrt", [ctx.op("mean", [ctx.op("multiply", [y, y])], attrs)])
        y = ctx.op("divide", [y, ctx.op("add", [std, ctx.scalar(m.epsilon or 1e-9, x)])])
    return y


@register("embedding")
def embedding(ctx: LayerContext, inputs):
    m = ctx.layer
    table = ctx.weights(m.weights, (int(m.outputChannels), int(m.inputDim))).T  # (vocab, out)
    if m.hasBias:
        table = table + ctx.weights(m.bias, (int(m.outputChannels),), "bias")
    x = inputs[0]
    ids = ctx.cast(ctx.reshape(x, (int(np.prod(ctx.shape(x), dtype=np.int64)),)), "int64")
    y = ctx.op("take", [ctx.param(np.ascontiguousarray(table, np.float32), "table"), ids], {"axis": 0})
    n = ctx.shape(x)[0]
    return ctx.reshape(y, (n, int(m.outputChannels), 1, 1)) if ctx.rank(x) == 4 else y


@register("split")
def split(ctx: LayerContext, inputs):
    x = inputs[0]
    axis = ctx.rank(x) - 3
    parts = int(ctx.layer.nOutputs)
    size = ctx.shape(x)[axis] // parts
    return ctx.ops(
        "split", [x], {"indices": tuple(size * (i + 1) for i in range(parts - 1)), "axis": axis}, parts
    )


@register("slice")
def slice_(ctx: LayerContext, inputs):
    m = ctx.layer
    x = inputs[0]
    axis = ctx.rank(x) - 3 + int(m.axis)
    n = ctx.shape(x)[axis]
    start = int(m.startIndex)
    end = int(m.endIndex) if m.endIndex != 0 else n
    end = end + n if end < 0 else end
    return ctx.op(
        "strided_slice",
        [x],
        {"begin": (start,), "end": (end,), "strides": (int(m.stride) or 1,), "axes": (axis,)},
    )

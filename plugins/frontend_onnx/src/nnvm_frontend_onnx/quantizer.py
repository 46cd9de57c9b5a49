"""nnvm's post-training quantizer for ONNX float models (``nnvm.quantize``): a QDQ model out.

The steps, each on a copy of the model:

1. prepare: local functions inlined, the opset raised to 13 (per-channel DequantizeLinear needs it),
   ``Constant`` nodes made initializers, BatchNormalization folded into the Conv before it;
2. plan which nodes run quantized (below) and which tensors carry a QuantizeLinear/DequantizeLinear pair;
3. calibrate: the prepared float model, with those tensors made graph outputs, compiled once by nnvm and
   run over the calibration inputs (``nnvm.calibration`` turns the values into ranges);
4. write: weights int8 (per output channel or per tensor), biases int32 at ``x_scale * w_scale``,
   activations uint8 behind ``Q -> DQ`` pairs that every reader of the tensor then reads.

The result follows onnxruntime's ``quantize_static`` (QDQ format) so that onnxruntime, OpenVINO and
nnvm's own QDQ fusion (``qdq.py``) run it in integers: Conv, Gemm and MatMul with a constant weight, Add
and Mul of two activations, average pooling and Concat quantize their inputs and output; MaxPool,
Flatten, Reshape, Transpose, Squeeze and Unsqueeze pass the quantization of their input through (their
output shares its scale, as onnxruntime does, so a MaxPool runs on the 8-bit tensor); a Relu, or a Clip
whose range holds 0, right after a quantized node is removed, since the uint8 saturation of the
calibrated range does its clamping (onnxruntime does the same). Graph outputs stay float (the last
quantized node dequantizes), so a classifier's logits are not rounded into ties. Every other operator
runs in float, on dequantized inputs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

import nnvm
from nnvm.calibration import (
    activation_qparams,
    bias_min_weight_scale,
    calibrate,
    check_method,
    quantize_bias,
    quantize_weight,
)
from nnvm.errors import CalibrationInputError, Error, ModelLoadError, reason
from nnvm_frontend_onnx.importer import ONNX_DOMAINS, _inline_functions, _opset, read_model

MIN_OPSET = 13
DIRECT_OPS = {"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze"}
REMOVABLE = {"Relu", "Clip"}
# Operators that mean the model is quantized already.
QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                 "QLinearMatMul", "ConvInteger", "MatMulInteger"}


def quantize_onnx(model, calibration_inputs, per_channel: bool = True, method: str = "minmax",
                  percentile: float = 99.99, target: str = "llvm", bias_correction: bool = True):
    """The QDQ ``onnx.ModelProto`` of an ONNX float ``model`` (path, bytes or ``ModelProto``), calibrated
    on ``calibration_inputs`` (a sequence of ``{input name: array}``, or of arrays for a one-input
    model) run by nnvm for ``target``. ``bias_correction``: see ``_bias_correction`` (an A/B switch for
    ``bench/quantize.py``)."""
    check_method(method, percentile)
    proto, path, _ = read_model(model, in_place=False)
    where = path or "the ONNX model"
    proto = _prepare(proto, where)
    graph = proto.graph
    samples = _check_samples(graph, calibration_inputs)
    float_model = _copy(proto)  # calibrated as it is: _plan removes the activations its Qs make redundant
    plan = _plan(graph, _float_tensors(proto))
    if not plan.nodes:
        raise Error(f"{where}: nothing to quantize (no Conv, Gemm, MatMul with a constant weight, or other "
                    f"quantizable operator on float tensors)")
    wanted = [t for t in plan.activations if t not in plan.shared]
    dims = {t.name: list(t.dims) for t in graph.initializer}
    stats = {}  # node index -> (its input, the mean its bias correction needs, from one input array)
    for index, (weight, _, _) in plan.nodes.items():
        node = graph.node[index]
        if weight is not None and bias_correction and node.op_type in ("Conv", "Gemm"):
            stats[index] = (node.input[0], _tap_means(node, dims[weight][2:]) if node.op_type == "Conv"
                            else _row_mean)
    ranges, means = _calibrate(float_model, wanted, stats, samples, method, percentile, target)
    return _write(proto, plan, ranges, means, per_channel)


# -- preparing ---------------------------------------------------------------------------------------
def _copy(proto):
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    return copy


def _prepare(proto, where: str):
    from onnx import version_converter

    proto = _inline_functions(proto, where) if proto.functions else _copy(proto)
    already = sorted({n.op_type for n in proto.graph.node if n.op_type in QUANTIZED_OPS
                      or n.op_type.startswith("QLinear")})
    if already:
        raise ModelLoadError(f"{where}: the model is quantized already (it has {', '.join(already)} nodes); "
                             f"nnvm.quantize takes a float model")
    if _opset(proto, where) < MIN_OPSET:
        try:
            proto = version_converter.convert_version(proto, MIN_OPSET)
        except Exception as exc:  # the converter raises plain RuntimeErrors
            raise ModelLoadError(f"{where}: opset {_opset(proto, where)} cannot be raised to {MIN_OPSET} for "
                                 f"per-channel quantization ({reason(exc)})") from None
    _constants_to_initializers(proto.graph)
    _fold_batch_norm(proto.graph)
    return proto


def _constants_to_initializers(graph) -> None:
    from onnx import numpy_helper

    keep = []
    for node in graph.node:
        value = next((a for a in node.attribute if a.name == "value"), None)
        if node.op_type == "Constant" and node.domain in ONNX_DOMAINS and value is not None:
            graph.initializer.append(numpy_helper.from_array(numpy_helper.to_array(value.t), node.output[0]))
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)


def _fold_batch_norm(graph) -> None:
    """Conv -> BatchNormalization (inference, constant statistics) becomes one Conv writing the
    normalization's output: w * g / sqrt(v + eps) per output channel, (b - m) * g / sqrt(v + eps) + beta."""
    from onnx import numpy_helper

    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}
    readers = _readers(graph)
    producer = {o: n for n in graph.node for o in n.output}
    taken = _names(graph)
    folded = set()
    for index, bn in enumerate(graph.node):
        if bn.op_type != "BatchNormalization" or bn.domain not in ONNX_DOMAINS or len(bn.output) != 1:
            continue
        conv = producer.get(bn.input[0])
        params = [inits.get(v) for v in bn.input[1:5]]
        if (conv is None or conv.op_type != "Conv" or conv.domain not in ONNX_DOMAINS
                or len(readers[bn.input[0]]) != 1 or bn.input[0] in outputs
                or any(p is None for p in params) or conv.input[1] not in inits):
            continue
        gamma, beta, mean, var = (numpy_helper.to_array(p).astype(np.float64) for p in params)
        factor = gamma / np.sqrt(var + _attr(bn, "epsilon", 1e-5))
        w = numpy_helper.to_array(inits[conv.input[1]])
        if w.dtype != np.float32 or w.shape[0] != factor.size:
            continue
        b = numpy_helper.to_array(inits[conv.input[2]]) if len(conv.input) > 2 and conv.input[2] else 0.0
        w_name, b_name = _fresh(f"{conv.input[1]}_bn_folded", taken), _fresh(f"{bn.output[0]}_bias", taken)
        shape = (-1,) + (1,) * (w.ndim - 1)
        graph.initializer.append(numpy_helper.from_array(
            (w.astype(np.float64) * factor.reshape(shape)).astype(np.float32), w_name))
        b = ((b - mean) * factor + beta).astype(np.float32)
        graph.initializer.append(numpy_helper.from_array(b, b_name))
        del conv.input[1:]
        conv.input.extend([w_name, b_name])
        conv.output[0] = bn.output[0]
        folded.add(index)
    keep = [n for k, n in enumerate(graph.node) if k not in folded]
    del graph.node[:]
    graph.node.extend(keep)
    _drop_unused_initializers(graph)


def _float_tensors(proto) -> set:
    """Names of the float32 tensors (shape inference fills the types of intermediates)."""
    import onnx
    from onnx import TensorProto

    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except Exception:  # inference failing only leaves intermediates untyped: they stay float, unquantized
        inferred = proto
    g = inferred.graph
    infos = list(g.input) + list(g.output) + list(g.value_info)
    floats = {v.name for v in infos if v.type.tensor_type.elem_type == TensorProto.FLOAT}
    return floats | {t.name for t in g.initializer if t.data_type == TensorProto.FLOAT}


# -- planning ----------------------------------------------------------------------------------------
@dataclass
class _Plan:
    nodes: dict = field(default_factory=dict)        # node index -> (weight input or None, axis, bias input)
    activations: list = field(default_factory=list)  # tensors given a Q -> DQ pair, in graph order
    shared: dict = field(default_factory=dict)       # tensor -> the tensor whose scale it shares


def _plan(graph, floats: set) -> _Plan:
    """Which nodes run quantized, after removing the Relu/Clip nodes their quantization makes
    redundant (``graph`` is changed in place: the producer writes the activation's output)."""
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}

    def act(v: str) -> bool:
        return bool(v) and v not in inits and v in floats

    def compute_kind(node):
        """(weight input or None, axis, bias input or "") if ``node`` runs quantized, else None."""
        if node.domain not in ONNX_DOMAINS or not node.output or not act(node.output[0]):
            return None
        op, ins = node.op_type, list(node.input)
        weight = len(ins) > 1 and ins[1] in inits and ins[1] in floats
        if op == "Conv" and act(ins[0]) and weight:
            bias = ins[2] if len(ins) > 2 and ins[2] in inits and ins[2] in floats else ""
            return (ins[1], 0, bias) if len(ins) < 3 or not ins[2] or bias else None
        if op == "Gemm" and act(ins[0]) and weight and not _attr(node, "transA", 0):
            if (_attr(node, "alpha", 1.0) != 1.0 or _attr(node, "beta", 1.0) != 1.0
                    or len(inits[ins[1]].dims) != 2):
                return None
            axis = 0 if _attr(node, "transB", 0) else 1
            n = inits[ins[1]].dims[axis]
            bias = ins[2] if len(ins) > 2 and ins[2] else ""
            if bias and not (bias in inits and bias in floats and list(inits[bias].dims) == [n]):
                return None
            return ins[1], axis, bias
        if op == "MatMul" and act(ins[0]) and weight and len(inits[ins[1]].dims) == 2:
            return ins[1], 1, ""
        if op in ("Add", "Mul") and len(ins) == 2 and all(act(v) for v in ins):
            return None, None, ""
        if op in ("GlobalAveragePool", "AveragePool") and act(ins[0]):
            return None, None, ""
        if op == "Concat" and all(act(v) for v in ins):
            return None, None, ""
        return None

    readers = _readers(graph)
    producer = {o: n for n in graph.node for o in n.output}
    removed = set()
    for index, node in enumerate(graph.node):
        if node.op_type not in REMOVABLE or node.domain not in ONNX_DOMAINS:
            continue
        x, y = node.input[0], node.output[0]
        src = producer.get(x)
        if (src is None or compute_kind(src) is None or len(readers[x]) != 1 or x in outputs or y in outputs
                or not act(y) or not _holds_zero(node, inits)):
            continue
        src.output[0] = y  # the Q after it clamps to the calibrated range of y, which lies in [lo, hi]
        removed.add(index)
    keep = [n for k, n in enumerate(graph.node) if k not in removed]
    del graph.node[:]
    graph.node.extend(keep)

    plan = _Plan()
    seen = set()

    def add(v: str, like: str | None = None) -> None:
        if v not in seen and v not in outputs:
            seen.add(v)
            plan.activations.append(v)
            if like is not None:
                plan.shared[v] = plan.shared.get(like, like)

    for index, node in enumerate(graph.node):
        kind = compute_kind(node)
        if kind is not None:
            plan.nodes[index] = kind
            for v in node.input[:1] if kind[0] is not None else node.input:
                add(v)
            add(node.output[0])
        elif (node.op_type in DIRECT_OPS and node.domain in ONNX_DOMAINS and node.input[0] in seen
              and len([o for o in node.output if o]) == 1 and act(node.output[0])):
            add(node.output[0], like=node.input[0])
    return plan


def _holds_zero(node, inits) -> bool:
    """A Relu, or a Clip with constant bounds lo <= 0 <= hi: the clamp a calibrated uint8 range implies."""
    from onnx import numpy_helper

    if node.op_type == "Relu":
        return True
    if len(node.input) > 1:  # opset 11+: bounds as inputs
        bounds = []
        for v, default in zip(node.input[1:3], (-np.inf, np.inf)):
            if not v:
                bounds.append(default)
            elif v in inits:
                bounds.append(float(numpy_helper.to_array(inits[v]).reshape(())))
            else:
                return False
        bounds += [np.inf] * (2 - len(bounds))
    else:
        bounds = [_attr(node, "min", -np.inf), _attr(node, "max", np.inf)]
    return bounds[0] <= 0.0 <= bounds[1]


# -- calibrating -------------------------------------------------------------------------------------
def _check_samples(graph, calibration_inputs) -> list[dict]:
    """The calibration inputs as ``{name: array}`` dicts, each checked against the model's inputs."""
    from onnx import helper

    inits = {t.name for t in graph.initializer}
    inputs = [i for i in graph.input if i.name not in inits]
    if isinstance(calibration_inputs, np.ndarray | dict) or not isinstance(calibration_inputs, Iterable):
        raise Error("calibration inputs: give a list of samples, each a dict by input name (or an array, "
                    "for a model with one input)")
    calibration_inputs = list(calibration_inputs)
    if not calibration_inputs:
        raise Error("nnvm.quantize needs at least one calibration input")
    samples = []
    for k, sample in enumerate(calibration_inputs):
        if not isinstance(sample, dict):
            if len(inputs) != 1:
                names = ", ".join(i.name for i in inputs)
                raise CalibrationInputError(k, None, f"the model has {len(inputs)} inputs ({names}): "
                                            f"give a dict by input name")
            sample = {inputs[0].name: sample}
        unknown = sorted(set(sample) - {i.name for i in inputs})
        if unknown:
            raise CalibrationInputError(k, unknown[0], "the model has no such input (its inputs: "
                                        f"{', '.join(i.name for i in inputs)})")
        checked = {}
        for info in inputs:
            if info.name not in sample:
                raise CalibrationInputError(k, info.name, "missing")
            array = np.asarray(sample[info.name])
            tt = info.type.tensor_type
            want = np.dtype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
            if array.dtype != want:
                raise CalibrationInputError(k, info.name, f"{array.dtype} where the model takes {want}")
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            first = samples[0][info.name].shape if samples else None
            if tt.HasField("shape") and (len(dims) != array.ndim
                                         or any(d is not None and d != s for d, s in zip(dims, array.shape))):
                shown = "x".join("?" if d is None else str(d) for d in dims)
                raise CalibrationInputError(k, info.name, f"shape {'x'.join(map(str, array.shape))} "
                                            f"where the model takes {shown}")
            if first is not None and array.shape != first:
                raise CalibrationInputError(k, info.name, f"shape {'x'.join(map(str, array.shape))} differs "
                                            f"from the first calibration input's {'x'.join(map(str, first))}")
            checked[info.name] = array
        samples.append(checked)
    return samples


def _calibrate(proto, tensors: list, stats: dict, samples: list, method: str, percentile: float,
               target: str) -> tuple[dict, dict]:
    """(ranges of ``tensors``, ``{node index: mean of stats[index][1](its input)}``), from nnvm running
    the float model ``proto`` with those tensors as extra outputs."""
    import onnx

    names = list(dict.fromkeys([*tensors, *(t for t, _ in stats.values())]))
    index = {o.name: k for k, o in enumerate(proto.graph.output)}
    for t in names:
        if t not in index:
            index[t] = len(proto.graph.output)
            proto.graph.output.append(onnx.ValueInfoProto(name=t))
    shapes = {name: a.shape for name, a in samples[0].items()}
    mod = nnvm.compile(proto, target=target, shapes=shapes)
    sums: dict = {}
    calls = [0]

    def run(sample):
        outs = mod.run(**sample)
        if calls[0] < len(samples):  # the first pass over the samples: the means too
            for node, (t, statistic) in stats.items():
                sums[node] = sums.get(node, 0.0) + statistic(outs[index[t]])
        calls[0] += 1
        return {t: outs[index[t]] for t in tensors}

    ranges = calibrate(run, samples, method, percentile)
    return ranges, {node: total / len(samples) for node, total in sums.items()}


# -- writing -----------------------------------------------------------------------------------------
def _write(proto, plan: _Plan, ranges: dict, means: dict, per_channel: bool):
    from onnx import helper, numpy_helper

    graph = proto.graph
    inits = {t.name: t for t in graph.initializer}
    taken = _names(graph)
    qparams = {}  # tensor -> (scale name, zero point name)
    scales = {}   # tensor -> float32 scale
    new_inits, head, after = [], [], {}

    def qparams_of(t: str):
        owner = plan.shared.get(t, t)
        if owner not in qparams:
            lo, hi = ranges.get(owner, (0.0, 0.0))  # an empty tensor has no range: scale 1
            scale, zp = activation_qparams(lo, hi)
            names = _fresh(f"{owner}_scale", taken), _fresh(f"{owner}_zero_point", taken)
            new_inits.append(numpy_helper.from_array(np.array(scale, np.float32), names[0]))
            new_inits.append(numpy_helper.from_array(np.array(zp, np.uint8), names[1]))
            qparams[owner], scales[owner] = names, scale
        return qparams[owner], scales[owner]

    rename = {}
    for t in plan.activations:
        (s, z), _ = qparams_of(t)
        q_out = _fresh(f"{t}_QuantizeLinear_Output", taken)
        dq_out = _fresh(f"{t}_DequantizeLinear_Output", taken)
        after[t] = [helper.make_node("QuantizeLinear", [t, s, z], [q_out],
                                     name=_fresh(f"{t}_QuantizeLinear", taken)),
                    helper.make_node("DequantizeLinear", [q_out, s, z], [dq_out],
                                     name=_fresh(f"{t}_DequantizeLinear", taken))]
        rename[t] = dq_out

    weights_done = {}
    for index, node in enumerate(graph.node):  # protobuf wrappers have no stable id(): go by index
        kind = plan.nodes.get(index)
        if kind is None or kind[0] is None:
            continue
        w_name, axis, bias = kind
        x_scale = scales[plan.shared.get(node.input[0], node.input[0])]
        w = numpy_helper.to_array(inits[w_name])
        b = numpy_helper.to_array(inits[bias]) if bias else None
        axis = axis if per_channel else None
        floor = None
        if b is not None:
            floor = bias_min_weight_scale(b, x_scale)
            floor = floor if axis is not None else floor.max(initial=0.0)
        key = (w_name, axis, None if floor is None else floor.tobytes())
        if key not in weights_done:
            q, w_scale = quantize_weight(w, axis, floor)
            weights_done[key] = (_dq_const(q, w_scale, axis, w_name, taken, new_inits, head), w_scale, q)
        node.input[1], w_scale, q = weights_done[key]
        if index in means:
            shift = _bias_correction(node, w, q, w_scale, axis, means[index])
            b = (b if b is not None else np.zeros_like(shift)) - shift
            bias = bias or _fresh(f"{node.name or w_name}_bias", taken)
            if len(node.input) < 3:
                node.input.append(bias)
        if b is not None:
            qb, b_scale = quantize_bias(b, x_scale, w_scale)
            b_axis = 0 if axis is not None else None
            node.input[2] = _dq_const(qb, b_scale, b_axis, bias, taken, new_inits, head)

    body = []
    for node in graph.node:
        for k, v in enumerate(node.input):
            if v in rename:
                node.input[k] = rename[v]
        body.append(node)
        for o in node.output:
            body.extend(after.pop(o, []))
    for t in list(after):  # graph inputs: their pairs come first
        head.extend(after.pop(t))
    del graph.node[:]
    graph.node.extend(head + body)
    graph.initializer.extend(new_inits)
    _drop_unused_initializers(graph)
    names = {v for n in graph.node for v in list(n.input) + list(n.output)}
    infos = [v for v in graph.value_info if v.name in names]
    del graph.value_info[:]
    graph.value_info.extend(infos)
    return proto


def _bias_correction(node, w, q, w_scale, axis, mean: np.ndarray) -> np.ndarray:
    """The mean shift the rounding of the weights puts on each output channel: (dequantized - float
    weights) applied to the mean input each weight sees over the calibration inputs (``_tap_means``,
    ``_row_mean``). Subtracted from the bias, it keeps the outputs' means where the float model has them
    (Nagel et al., "Data-Free Quantization", 2019, section 4.2, with measured means): with random-weight
    nets, whose activations carry large constant parts, it takes a quarter off the logits' error."""
    shape = [1] * w.ndim
    if axis is not None:
        shape[axis] = -1
    error = (q.astype(np.float64) * w_scale.reshape(shape)) - w.astype(np.float64)
    if node.op_type == "Conv":  # mean: [C, *kernel], per input channel and kernel tap
        groups = mean.shape[0] // error.shape[1]
        group_of = np.arange(error.shape[0]) // (error.shape[0] // groups)
        per_group = mean.reshape(groups, error.shape[1], -1)[group_of]  # [O, C / groups, taps]
        return (error.reshape(per_group.shape) * per_group).sum((1, 2))
    return error @ mean if _attr(node, "transB", 0) else mean @ error  # Gemm: [N, K] or [K, N]


def _row_mean(a: np.ndarray) -> np.ndarray:
    """A Gemm input's mean per column (its K axis)."""
    return a.reshape(-1, a.shape[-1]).mean(0, dtype=np.float64)


def _tap_means(node, kernel: list):
    """For a Conv: a function of its input giving, per input channel and kernel tap, the mean of the
    input values that tap reads over all output positions, padding zeros included, so the correction is
    right at the borders too (a third of the positions of a 3x3 convolution on a 7x7 map)."""
    strides = list(_attr(node, "strides", []))
    dilations = list(_attr(node, "dilations", []))
    pads = list(_attr(node, "pads", []))
    auto = _attr(node, "auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto

    def statistic(x: np.ndarray) -> np.ndarray:
        spatial = x.shape[2:]
        n = len(spatial)
        k = list(kernel)
        st, dl = strides or [1] * n, dilations or [1] * n
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = [max((-(-d // s) - 1) * s + (kk - 1) * di + 1 - d, 0)
                     for d, s, kk, di in zip(spatial, st, k, dl)]
            lo = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in total]
            pad = [(a, t - a) for a, t in zip(lo, total)]
        elif auto == "VALID":
            pad = [(0, 0)] * n
        else:
            p = pads or [0] * (2 * n)
            pad = list(zip(p[:n], p[n:]))
        padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *pad])
        out = [(d + a + b - (kk - 1) * di - 1) // s + 1
               for d, (a, b), kk, di, s in zip(spatial, pad, k, dl, st)]
        result = np.empty((x.shape[1], *k))
        for tap in np.ndindex(*k):
            window = tuple(slice(t * di, t * di + (o - 1) * s + 1, s)
                           for t, di, o, s in zip(tap, dl, out, st))
            reads = padded[(slice(None), slice(None), *window)]
            result[(slice(None), *tap)] = reads.mean((0, *range(2, 2 + n)))
        return result

    return statistic


def _dq_const(q, scale, axis, base: str, taken: set, new_inits: list, head: list) -> str:
    """An integer initializer behind its DequantizeLinear; returns the dequantized value's name."""
    from onnx import helper, numpy_helper

    names = [_fresh(f"{base}_{s}", taken) for s in ("quantized", "scale", "zero_point")]
    zp = np.zeros(np.shape(scale), q.dtype)
    new_inits.extend([numpy_helper.from_array(q, names[0]),
                      numpy_helper.from_array(np.asarray(scale, np.float32), names[1]),
                      numpy_helper.from_array(zp, names[2])])
    out = _fresh(f"{base}_DequantizeLinear_Output", taken)
    attrs = {"axis": axis} if axis is not None and np.ndim(scale) == 1 else {}
    name = _fresh(f"{base}_DequantizeLinear", taken)
    head.append(helper.make_node("DequantizeLinear", names, [out], name=name, **attrs))
    return out


# -- helpers -----------------------------------------------------------------------------------------
def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _readers(graph) -> dict:
    readers: dict = {}
    for node in graph.node:
        for v in node.input:
            if v:
                readers.setdefault(v, []).append(node)
    return readers


def _names(graph) -> set:
    names = {t.name for t in graph.initializer} | {v.name for v in [*graph.input, *graph.output]}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        names.add(node.name)
    return names


def _fresh(name: str, taken: set) -> str:
    """``name``, or ``name_1``, ``name_2`` ... if taken; the result is taken from then on."""
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


def _drop_unused_initializers(graph) -> None:
    """Initializers nothing reads any more go, with their graph input entries (old IR versions list
    initializers as inputs too)."""
    used = {v for n in graph.node for v in n.input} | {o.name for o in graph.output}
    for node in graph.node:
        used |= _subgraph_reads(node)
    dropped = {t.name for t in graph.initializer if t.name not in used}
    keep = [t for t in graph.initializer if t.name not in dropped]
    del graph.initializer[:]
    graph.initializer.extend(keep)
    inputs = [i for i in graph.input if i.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)


def _subgraph_reads(node) -> set:
    """Every name read inside ``node``'s subgraphs (If, Loop, Scan bodies): their implicit inputs."""
    reads = set()
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            for n in g.node:
                reads.update(n.input)
                reads |= _subgraph_reads(n)
    return reads

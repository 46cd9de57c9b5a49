"""Quantized operators: 8-bit tensors with a scale and zero point, int32 accumulation, requantization.

A quantized value ``q`` stands for the real number ``scale * (q - zero_point)``. The set is small on
purpose (docs/quantization.md):

- ``quantize`` (float to int8/uint8) and ``dequantize`` (back), per tensor;
- ``qconv2d`` and ``qdense``: the integer product of two 8-bit operands less their zero points,
  accumulated exactly in int32 (``sum((x - x_zp) * (w - w_zp))``);
- ``requantize``: int32 accumulator plus an int32 bias, times a float32 multiplier (per tensor or per
  output channel), rounded half to even, plus the output zero point, saturated to the output type
  (or clamped tighter: a fused ReLU or Clip), exactly as onnxruntime's MLAS requantizes.

The computes say what is computed on every target; x86 VNNI kernels recognise the ``qconv2d`` and
``qdense`` tags (their workloads carry the zero points).
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.common import (
    checked_evaluate,
    float_attr,
    normalize_axis,
    require_inputs,
    require_rank,
    shape_of,
)
from nnvm.ops.nn import _conv2d_eval, conv2d_geometry, pad_nchw
from nnvm.ops.registry import Attr, OpDef, OpPattern

QUANT_DTYPES = ("int8", "uint8")


def _type_range(dtype: str) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_quant_dtype(op: str, t: TensorType, what: str) -> None:
    if t.dtype not in QUANT_DTYPES:
        raise Error(f"{op}: the {what} must be int8 or uint8, got {t.dtype}")


def _check_zero_point(op: str, name: str, zp: int, dtype: str) -> None:
    lo, hi = _type_range(dtype)
    if not lo <= zp <= hi:
        raise Error(f"{op}: {name}={zp} is outside the range of {dtype} [{lo}, {hi}]")


# ---------------------------------------------------------------------------------------------------
# quantize, dequantize


def _quantize_infer(in_types, attrs):
    (x,) = require_inputs("quantize", in_types, ("data",))
    if x.dtype != "float32":
        raise Error(f"quantize: the data must be float32, got {x.dtype}")
    if attrs["out_dtype"] not in QUANT_DTYPES:
        raise Error(f"quantize: out_dtype must be int8 or uint8, got {attrs['out_dtype']!r}")
    if not attrs["scale"] > 0:
        raise Error(f"quantize: the scale must be positive, got {attrs['scale']}")
    _check_zero_point("quantize", "zero_point", attrs["zero_point"], attrs["out_dtype"])
    return [TensorType(x.shape, attrs["out_dtype"])]


def _saturate_round(v, zp: int, dtype: str, lo: int | None = None, hi: int | None = None):
    """``v`` (float32, zero point not yet added) clamped so that ``round(v) + zp`` lies in [lo, hi], rounded
    half to even, plus ``zp``, cast to ``dtype``. Clamping before rounding is exact: the bounds are
    integers (MLAS clamps first too)."""
    tlo, thi = _type_range(dtype)
    lo = tlo if lo is None else max(lo, tlo)
    hi = thi if hi is None else min(hi, thi)
    # the bound first: NaN-propagating maximum(bound, v) tests the bound, a constant, for NaN (folded
    # away), so x86 gets one vmaxps / vminps each where maximum(v, bound) took four instructions; the
    # same values (a NaN v gives NaN either way)
    v = te.minimum(te.const(float(hi - zp), "float32"), te.maximum(te.const(float(lo - zp), "float32"), v))
    r = te.round(v)
    if zp:
        r = r + te.const(float(zp), "float32")
    return r.astype(dtype)


def _np_saturate_round(v: np.ndarray, zp: int, dtype: str, lo: int | None = None, hi: int | None = None):
    tlo, thi = _type_range(dtype)
    lo = tlo if lo is None else max(lo, tlo)
    hi = thi if hi is None else min(hi, thi)
    v = np.clip(v.astype(np.float32), np.float32(lo - zp), np.float32(hi - zp))
    return (np.rint(v) + np.float32(zp)).astype(dtype)


def _quantize_compute(inputs, attrs, out_types):
    (x,) = inputs
    scale, zp, dt = attrs["scale"], attrs["zero_point"], attrs["out_dtype"]
    return [te.compute(shape_of(x), lambda *i: _saturate_round(x[i] / te.const(scale, "float32"), zp, dt),
                       name="quantize", tag="quantize")]


def _quantize_eval(xs, attrs):
    x = xs[0].astype(np.float32)
    return [_np_saturate_round(x / np.float32(attrs["scale"]), attrs["zero_point"], attrs["out_dtype"])]


def _dequantize_infer(in_types, attrs):
    (x,) = require_inputs("dequantize", in_types, ("data",))
    if x.dtype not in QUANT_DTYPES + ("int32",):
        raise Error(f"dequantize: the data must be int8, uint8 or int32, got {x.dtype}")
    if x.dtype != "int32":
        _check_zero_point("dequantize", "zero_point", attrs["zero_point"], x.dtype)
    return [TensorType(x.shape, "float32")]


def _dequantize_compute(inputs, attrs, out_types):
    (x,) = inputs
    scale, zp = attrs["scale"], attrs["zero_point"]

    def body(*i):
        v = x[i].astype("int32")
        if zp:
            v = v - te.const(zp, "int32")
        return v.astype("float32") * te.const(scale, "float32")

    return [te.compute(shape_of(x), body, name="dequantize", tag="dequantize")]


def _dequantize_eval(xs, attrs):
    v = xs[0].astype(np.int32) - np.int32(attrs["zero_point"])
    return [v.astype(np.float32) * np.float32(attrs["scale"])]


# ---------------------------------------------------------------------------------------------------
# qconv2d, qdense


def _qconv2d_infer(in_types, attrs):
    data, weight = require_inputs("qconv2d", in_types, ("data", "weight"))
    require_rank("qconv2d", data, 4, "NCHW data")
    require_rank("qconv2d", weight, 4, "OIHW weight")
    _check_quant_dtype("qconv2d", data, "data")
    _check_quant_dtype("qconv2d", weight, "weight")
    _check_zero_point("qconv2d", "data_zero_point", attrs["data_zero_point"], data.dtype)
    _check_zero_point("qconv2d", "weight_zero_point", attrs["weight_zero_point"], weight.dtype)
    return [TensorType(conv2d_geometry(data.shape, weight.shape, attrs), "int32")]


def _centered(value, zp: int):
    """``int32(value) - zp``."""
    v = value.astype("int32")
    return v - te.const(zp, "int32") if zp else v


def _qconv2d_compute(inputs, attrs, out_types):
    data, weight = inputs
    shape = out_types[0].shape
    (sh, sw), (dh, dw), groups = attrs["strides"], attrs["dilation"], attrs["groups"]
    xzp, wzp = attrs["data_zero_point"], attrs["weight_zero_point"]
    o_total, cg, kh, kw = shape_of(weight)
    # padding holds the zero point: the real value zero, as ONNX pads a quantized convolution
    padded = pad_nchw(data, *attrs["padding"], value=xzp)
    rc = te.reduce_axis((0, cg), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    og = o_total // groups

    def body(n, o, y, x):
        c = rc.var if groups == 1 else (o // og) * cg + rc.var
        return te.sum(_centered(padded[n, c, y * sh + ry * dh, x * sw + rx * dw], xzp)
                      * _centered(weight[o, rc, ry, rx], wzp), axis=[rc, ry, rx])

    workload = {
        "data_shape": shape_of(data), "kernel_shape": shape_of(weight), "strides": tuple(attrs["strides"]),
        "padding": tuple(attrs["padding"]), "dilation": tuple(attrs["dilation"]), "groups": groups,
        "data_dtype": data.dtype, "weight_dtype": weight.dtype, "data_zero_point": xzp,
        "weight_zero_point": wzp, "layout": "NCHW",
    }
    return [te.compute(shape, body, name="qconv2d", tag="qconv2d", attrs={"workload": workload, **workload})]


def _qconv2d_eval(xs, attrs):
    data = xs[0].astype(np.int64) - attrs["data_zero_point"]
    weight = xs[1].astype(np.int64) - attrs["weight_zero_point"]
    return _conv2d_eval([data, weight], attrs)


def _qdense_infer(in_types, attrs):
    data, weight = require_inputs("qdense", in_types[:2], ("data", "weight"))
    if len(data.shape) < 2:
        raise Error(f"qdense: the data must be [..., K] of rank 2 or more, got rank {len(data.shape)}")
    require_rank("qdense", weight, 2, "weight [N, K]")
    _check_quant_dtype("qdense", data, "data")
    _check_quant_dtype("qdense", weight, "weight")
    _check_zero_point("qdense", "data_zero_point", attrs["data_zero_point"], data.dtype)
    _check_zero_point("qdense", "weight_zero_point", attrs["weight_zero_point"], weight.dtype)
    if len(in_types) > 2:
        zp = in_types[2]
        if zp.shape not in ((), (1,)) or zp.dtype != data.dtype or attrs["data_zero_point"]:
            raise Error(f"qdense: a data zero point given as an input must be a {data.dtype} scalar (and the "
                        f"data_zero_point attribute 0), got {zp.dtype}{list(zp.shape)}")
    if data.shape[-1] != weight.shape[1]:
        raise Error(f"qdense: the data has K={data.shape[-1]} but the weight [N, K] has K={weight.shape[1]}")
    return [TensorType((*data.shape[:-1], weight.shape[0]), "int32")]


def _qdense_compute(inputs, attrs, out_types):
    data, weight = inputs[:2]
    shape = shape_of(data)
    k = shape[-1]
    n = shape_of(weight)[0]
    xzp, wzp = attrs["data_zero_point"], attrs["weight_zero_point"]
    rk = te.reduce_axis((0, k), name="k")
    workload = {"data_shape": shape, "weight_shape": (n, k), "data_dtype": data.dtype,
                "weight_dtype": weight.dtype, "data_zero_point": xzp, "weight_zero_point": wzp,
                "dynamic_zero_point": len(inputs) > 2}

    def body(*i):
        x = _centered(data[(*i[:-1], rk)], xzp)
        if len(inputs) > 2:  # a zero point computed at run time (DynamicQuantizeLinear's)
            zp = inputs[2]
            x = x - zp[(te.const(0),) * len(shape_of(zp))].astype("int32")
        return te.sum(x * _centered(weight[i[-1], rk], wzp), axis=rk)

    return [te.compute((*shape[:-1], n), body, name="qdense", tag="qdense",
                       attrs={"workload": workload, **workload})]


def _qdense_eval(xs, attrs):
    zp = int(np.asarray(xs[2]).reshape(-1)[0]) if len(xs) > 2 else attrs["data_zero_point"]
    data = xs[0].astype(np.int64) - zp
    weight = xs[1].astype(np.int64) - attrs["weight_zero_point"]
    return [(data @ weight.T).astype(np.int32)]


# ---------------------------------------------------------------------------------------------------
# requantize


def _requantize_infer(in_types, attrs):
    acc, scale = require_inputs("requantize", in_types[:2], ("data", "scale"))
    bias = in_types[2] if len(in_types) > 2 else None
    if acc.dtype != "int32":
        raise Error(f"requantize: the data must be an int32 accumulator, got {acc.dtype}")
    out = attrs["out_dtype"]
    if out not in QUANT_DTYPES + ("float32",):
        raise Error(f"requantize: out_dtype must be int8, uint8 or float32, got {out!r}")
    axis = normalize_axis("requantize", attrs["axis"], len(acc.shape))
    channels = acc.shape[axis]
    for t, name, dtype in ((scale, "scale", "float32"), (bias, "bias", "int32")):
        if t is None:
            continue
        if t.dtype != dtype:
            raise Error(f"requantize: the {name} must be {dtype}, got {t.dtype}")
        if t.shape not in ((), (1,), (channels,)) and not _broadcasts(t.shape, acc.shape):
            raise Error(f"requantize: the {name} must be a scalar, (1,), have shape ({channels},) for axis "
                        f"{axis} of {acc.shape} or broadcast against it at its rank, got {t.shape}")
    if out != "float32":
        _check_zero_point("requantize", "zero_point", attrs["zero_point"], out)
    lo, hi = attrs["out_min"], attrs["out_max"]
    if lo is not None and hi is not None and lo > hi:
        raise Error(f"requantize: out_min={lo} is above out_max={hi}")
    return [TensorType(acc.shape, out)]


def _broadcasts(shape: tuple, data_shape: tuple) -> bool:
    """A per-element operand of the data's rank (a per-channel one in a blocked layout, where the channel
    is two axes): each dimension 1 or the data's."""
    return len(shape) == len(data_shape) > 1 and all(d in (1, e) for d, e in zip(shape, data_shape))


def _requantize_compute(inputs, attrs, out_types):
    acc, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    shape = shape_of(acc)
    axis = attrs["axis"] % len(shape)
    out = attrs["out_dtype"]

    def per_channel(t, i):
        if not shape_of(t):
            return t[()]
        if _broadcasts(shape_of(t), shape):
            return t[tuple(te.const(0) if d == 1 else k for d, k in zip(shape_of(t), i))]
        return t[te.const(0)] if shape_of(t) == (1,) and shape[axis] != 1 else t[i[axis]]

    def body(*i):
        v = acc[i]
        if bias is not None:
            v = v + per_channel(bias, i)
        v = v.astype("float32") * per_channel(scale, i)
        if out == "float32":
            return v
        return _saturate_round(v, attrs["zero_point"], out, attrs["out_min"], attrs["out_max"])

    return [te.compute(shape, body, name="requantize", tag="requantize")]


def _requantize_eval(xs, attrs):
    acc, scale = xs[0].astype(np.int32), xs[1].astype(np.float32)
    axis = attrs["axis"] % acc.ndim
    shape = [1] * acc.ndim
    shape[axis] = -1

    def along(t):
        return t if t.ndim == acc.ndim else t.reshape(shape if t.size > 1 else ())

    if len(xs) > 2:
        acc = acc + along(xs[2].astype(np.int32))
    v = acc.astype(np.float32) * along(scale)
    if attrs["out_dtype"] == "float32":
        return [v]
    a = attrs
    return [_np_saturate_round(v, a["zero_point"], a["out_dtype"], a["out_min"], a["out_max"])]


def ops() -> list[OpDef]:
    """The quantized operators' OpDefs."""
    conv_attrs = {"strides": Attr(tuple, (1, 1)),
                  "padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right"),
                  "dilation": Attr(tuple, (1, 1)), "groups": Attr(int, 1)}
    zero_points = {"data_zero_point": Attr(int, 0), "weight_zero_point": Attr(int, 0)}
    return [
        OpDef("quantize", _quantize_infer, _quantize_compute, OpPattern.ELEMWISE,
              attrs={"scale": float_attr(1.0), "zero_point": Attr(int, 0), "out_dtype": Attr(str, "uint8")},
              num_inputs=(1, 1), evaluate=checked_evaluate(_quantize_infer, _quantize_eval),
              doc="float32 to int8/uint8: saturate(round_half_even(x / scale) + zero_point)"),
        OpDef("dequantize", _dequantize_infer, _dequantize_compute, OpPattern.ELEMWISE,
              attrs={"scale": float_attr(1.0), "zero_point": Attr(int, 0)},
              num_inputs=(1, 1), evaluate=checked_evaluate(_dequantize_infer, _dequantize_eval),
              doc="int8/uint8/int32 to float32: (x - zero_point) * scale"),
        OpDef("qconv2d", _qconv2d_infer, _qconv2d_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs={**conv_attrs, **zero_points}, num_inputs=(2, 2),
              evaluate=checked_evaluate(_qconv2d_infer, _qconv2d_eval),
              doc="int32 conv2d of 8-bit NCHW data and OIHW weights less their zero points"),
        OpDef("qdense", _qdense_infer, _qdense_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs=dict(zero_points), num_inputs=(2, 3),
              evaluate=checked_evaluate(_qdense_infer, _qdense_eval),
              doc="int32 data [..., K] times weight [N, K] transposed, less their zero points (the data's "
                  "optionally a scalar input, computed at run time)"),
        OpDef("requantize", _requantize_infer, _requantize_compute, OpPattern.BROADCAST,
              attrs={"axis": Attr(int, 1, "the channel axis of a per-channel scale or bias"),
                     "zero_point": Attr(int, 0), "out_dtype": Attr(str, "uint8", "int8, uint8 or float32"),
                     "out_min": Attr((int, type(None)), None, "a fused ReLU/Clip's bound, quantized"),
                     "out_max": Attr((int, type(None)), None, "a fused Clip's bound, quantized")},
              num_inputs=(2, 3), evaluate=checked_evaluate(_requantize_infer, _requantize_eval),
              doc="saturate(round_half_even(float32(acc + bias) * scale) + zero_point), or the float"),
    ]


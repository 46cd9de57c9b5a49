"""A patch embedding (a convolution whose stride is its kernel, ViT's 16x16/16) as a product of patches.

Its windows do not overlap, so gathering them is a copy of the input, not the ``kh * kw``-fold copy of
an im2col: ``patches`` lays out each output pixel's window as one row of ``C * kh * kw`` values, and the
convolution is ``dense_packed`` of those rows by the weight packed ``NK{b}n`` (``patch_weight_pack``,
folded at compile time). Its output, a pixel's channels in a row, is the convolution's in ``NHWC``.

Blocked ``conv2d_nchwc`` reading a 3-channel input broadcasts one input value per multiply-add over
16x16 windows at stride 16 (ViT-tiny's 3 -> 192: 0.84 ms, 34 GFLOP/s a core); the product runs at the
packed GEMM's rate. ``cpu_switches={"patch_dense": "0"}`` keeps such convolutions blocked, for A/B benchmarks.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.ir import TensorType
from nnvm.ops.blocked_layout import from_primal
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern


def is_patch_embedding(attrs: dict, weight_shape: tuple) -> bool:
    """Whether a plain convolution (normalized ``attrs``, OIHW weight) has non-overlapping windows that
    tile its input: stride equal to a kernel of more than one pixel, no padding, no dilation."""
    kernel = tuple(weight_shape[2:])
    return (attrs["groups"] == 1 and kernel[0] * kernel[1] > 1 and tuple(attrs["strides"]) == kernel
            and not any(attrs["padding"]) and tuple(attrs["dilation"]) == (1, 1))


def _patches_infer(in_types, attrs):
    (x,) = require_inputs("patches", in_types, ("data",))
    kh, kw = attrs["kernel"]
    if len(x.shape) != 4 or x.shape[2] < kh or x.shape[3] < kw:
        raise Error(f"patches: the data must be NCHW with at least one {kh}x{kw} window, got shape {x.shape}")
    n, c, h, w = x.shape
    return [TensorType((n, h // kh, w // kw, c * kh * kw), x.dtype)]


def _patches_compute(inputs, attrs, out_types):
    """``[N, C, H, W] -> [N, H/kh, W/kw, C*kh*kw]``, a window's values in (channel, row, column) order."""
    (x,) = inputs
    kh, kw = attrs["kernel"]

    def body(n, oh, ow, r):
        return x[n, r // (kh * kw), oh * kh + (r // kw) % kh, ow * kw + r % kw]

    return [te.compute(out_types[0].shape, body, name="patches", tag="injective")]


def _patches_eval(xs, attrs):
    (x,) = xs
    kh, kw = attrs["kernel"]
    n, c, h, w = x.shape
    oh, ow = h // kh, w // kw
    windows = x[:, :, :oh * kh, :ow * kw].reshape(n, c, oh, kh, ow, kw)
    return [np.ascontiguousarray(windows.transpose(0, 2, 4, 1, 3, 5).reshape(n, oh, ow, -1))]


PATCHES = OpDef("patches", _patches_infer, _patches_compute, OpPattern.INJECTIVE, num_inputs=(1, 1),
                attrs={"kernel": Attr(tuple, doc="(kh, kw): the windows' size and stride")},
                evaluate=checked_evaluate(_patches_infer, _patches_eval),
                doc="NCHW data as rows of non-overlapping kh x kw windows, [N, H/kh, W/kw, C*kh*kw]")


def _weight_infer(in_types, attrs):
    (w,) = require_inputs("patch_weight_pack", in_types, ("weight",))
    if len(w.shape) != 4:
        raise Error(f"patch_weight_pack: the weight must be OIHW, got shape {w.shape}")
    b = attrs["block"]
    o, c, kh, kw = w.shape
    return [TensorType((-(-o // b), c * kh * kw, b), w.dtype)]


def _weight_compute(inputs, attrs, out_types):
    """``[O, C, kh, kw] -> [O/b, C*kh*kw, b]``, zeros past the last output channel."""
    (w,) = inputs
    o, _, kh, kw = shape_of(w)
    b = attrs["block"]

    def body(ob, r, lane):
        oc = ob * b + lane
        value = w[te.minimum(oc, o - 1), r // (kh * kw), (r // kw) % kh, r % kw]
        return te.if_then_else(oc < o, value, te.const(0, w.dtype))

    return [te.compute(out_types[0].shape, body, name="patch_weight_pack", tag="injective")]


def _weight_eval(xs, attrs):
    (w,) = xs
    b = attrs["block"]
    flat = np.pad(w.reshape(w.shape[0], -1), [(0, -w.shape[0] % b), (0, 0)])  # [O padded, K]
    return [np.ascontiguousarray(from_primal(flat, "NK", f"NK{b}n"))]  # dense's own weight packing


PATCH_WEIGHT_PACK = OpDef(
    "patch_weight_pack", _weight_infer, _weight_compute, OpPattern.INJECTIVE, num_inputs=(1, 1),
    attrs={"block": Attr(int, doc="output channels a block")},
    evaluate=checked_evaluate(_weight_infer, _weight_eval),
    doc="an OIHW convolution weight as dense_packed's [O/b, C*kh*kw, b] over patches' rows")

"""Blocked data layouts: ``layout_transform`` and the convolution that reads and writes NCHW[x]c.

A layout string names the axes of a tensor in memory order, in TVM's notation: an upper-case letter
is a primal axis (``N``, ``C``, ``H``, ``W``, ``O``, ``I``), a number followed by the same letter in
lower case is a block split off that axis and stored innermost. ``NCHW16c`` is ``[N, C/16, H, W, 16]``
with channel ``c = C_outer * 16 + c_inner``; ``OIHW16i16o`` is ``[O/16, I/16, H, W, 16, 16]``.

Why blocked layouts exist: a conv2d over ``NCHW16c`` data keeps 16 output channels in one AVX-512
register and walks the input contiguously, which an ``NCHW`` schedule cannot do for both operands at
once. The AlterOpLayout pass (``nnvm.passes.alter_op_layout``) inserts ``layout_transform`` where
layouts change; transforms of weights are folded at compile time, so only activations pay for them.

``conv2d_nchwc`` (data ``NCHW{i}c`` or plain ``NCHW``, weight ``OIHW{i}i{o}o``, output ``NCHW{o}c``)
takes ``groups=1``; depthwise (``groups`` = channels, weight ``OIHW1i{o}o``, input block = output
block); or grouped: output block ``co`` reads a window of input channels (the weight's ``I``) from
where its first group starts. When ``o`` divides the output channels per group that window is one
group (the weight ``[O, I/groups, KH, KW]`` blocked as usual); a block straddling groups reads all of
theirs, with zero weights for the other groups' channels (``grouped_weight_pack`` in
``nnvm.cpu.layout_choice`` packs those), and ``out_channels`` names the real output count when the last
block is part padding.
The weight block ``i`` may be narrower than the data's (channel ``c`` read at block ``c // b``, lane
``c % b``: 68 channels per group in ``NCHW16c``). With ``split=1`` (1x1 only) each output block reads just
its first group, and the weight has one more block per group boundary for the next group's share of
the block straddling it (a second stage, ``conv2d_nchwc_extra``; ``split_weight_pack`` in
``nnvm.cpu.grouped`` packs it).
Its reduction stage is tagged ``conv2d_nchwc`` with the workload in its ``attrs``, so a
target's schedule recognizes it; the padding stage is tagged ``injective``. ``max_pool2d_nchwc`` pools
blocked data (the block rides along like the batch), so a pool between two convolutions needs no
transform. ``winograd_weight_transform`` and ``conv2d_winograd_nchwc`` compute a 3x3 stride-1
convolution by Winograd F(2x2, 3x3) or F(4x4, 3x3) (see their section below).
"""

from __future__ import annotations

import re

import numpy as np

from nnvm import te
from nnvm.errors import Error
from nnvm.graph.dims import Dim
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, int_tuple, require_dtype, require_inputs, same_dtypes, shape_of
from nnvm.ops.nn import _conv2d_eval
from nnvm.ops.pool import _params, pool_out_size
from nnvm.ops.registry import Attr, OpDef, OpPattern, get_op

_AXIS = re.compile(r"(\d*)([A-Za-z])")


def parse_layout(layout: str) -> list[tuple[str, int | None]]:
    """``"NCHW16c"`` -> ``[("N", None), ("C", None), ("H", None), ("W", None), ("c", 16)]``, checked."""
    if not isinstance(layout, str) or not layout or _AXIS.sub("", layout):
        raise Error(f"layout {layout!r} is not a layout string like 'NCHW' or 'NCHW16c'")
    axes: list = []
    for num, ch in _AXIS.findall(layout):
        if ch.isupper():
            if num:
                raise Error(f"layout {layout!r}: the primal axis {ch} cannot have a block size")
            axes.append((ch, None))
        else:
            if not num or int(num) < 1:
                raise Error(f"layout {layout!r}: the block axis {ch} needs a positive size before it")
            axes.append((ch, int(num)))
    names = [a for a, _ in axes]
    if len(set(names)) != len(names):
        raise Error(f"layout {layout!r} names an axis twice")
    for a, f in axes:
        if f is not None and a.upper() not in names:
            raise Error(f"layout {layout!r}: block axis {a} has no primal axis {a.upper()}")
    return axes


def _primal(layout: str) -> str:
    return "".join(a for a, f in parse_layout(layout) if f is None)


def _blocks(layout: str) -> dict:
    return {a.upper(): f for a, f in parse_layout(layout) if f is not None}


def transformed_shape(shape: tuple, src: str, dst: str, pad: bool = False) -> tuple:
    """The shape of a ``src``-layout tensor of ``shape`` once stored in layout ``dst``; with ``pad`` an
    axis that is not a whole number of blocks is rounded up to one (the rest zero-filled)."""
    sa, da = parse_layout(src), parse_layout(dst)
    if len(sa) != len(shape):
        raise Error(f"layout_transform: layout {src!r} has {len(sa)} axes but the data has shape {shape}")
    if sorted(_primal(src)) != sorted(_primal(dst)):
        raise Error(f"layout_transform: {src!r} and {dst!r} do not have the same primal axes")
    full = {}
    for (a, _), d in zip(sa, shape):
        key = a.upper()
        full[key] = full.get(key, 1) * d
    blocks = _blocks(dst)
    out = []
    for a, f in da:
        if f is None:
            b = blocks.get(a, 1)
            if pad:
                out.append((full[a] + b - 1) // b)  # a ceiling a symbolic dim can take too
                continue
            if full[a] % b:
                raise Error(f"layout_transform: axis {a} of size {full[a]} cannot be split into blocks of "
                            f"{b} ({src} -> {dst})")
            out.append(full[a] // b)
        else:
            out.append(f)
    return tuple(out)


def full_sizes(shape: tuple, layout: str) -> dict:
    """Primal axis -> its full size (outer x block) in a ``layout`` tensor of ``shape``."""
    full: dict = {}
    for (a, _), d in zip(parse_layout(layout), shape):
        full[a.upper()] = full.get(a.upper(), 1) * d
    return full


def _lt_infer(in_types, attrs):
    (x,) = require_inputs("layout_transform", in_types, ("data",))
    src, dst = attrs["src_layout"], attrs["dst_layout"]
    if not attrs.get("shape"):
        return [TensorType(transformed_shape(x.shape, src, dst), x.dtype)]
    # An explicit shape pads (zeros) or crops axes that are not whole blocks: channel counts such as
    # 1000 stored as 63 blocks of 16, and back.
    shape = tuple(d if isinstance(d, Dim) else int(d) for d in attrs["shape"])  # a symbolic batch stays
    rounded = transformed_shape(x.shape, src, dst, pad=True)
    axes = parse_layout(dst)
    if len(shape) != len(axes) or any(not isinstance(d, Dim) and d < 1 for d in shape) or any(
            f is not None and d != f for (_, f), d in zip(axes, shape)):
        raise Error(f"layout_transform: shape {shape} is not a {dst} shape (rank {len(axes)}, block axes "
                    f"{rounded})")
    return [TensorType(shape, x.dtype)]


def _lt_compute(inputs, attrs, out_types):
    (x,) = inputs
    src, dst = parse_layout(attrs["src_layout"]), parse_layout(attrs["dst_layout"])
    src_blocks, dst_blocks = _blocks(attrs["src_layout"]), _blocks(attrs["dst_layout"])
    dpos = {a: k for k, (a, _) in enumerate(dst)}
    have = full_sizes(shape_of(x), attrs["src_layout"])
    want = full_sizes(out_types[0].shape, attrs["dst_layout"])
    # axes whose extra (padding) elements read as zero; an axis the same in both (a symbolic batch) is not
    padded = [a for a in want if want[a] != have[a] and want[a] > have[a]]

    def body(*i):
        full = {}
        for a, f in dst:
            if f is None:
                b = dst_blocks.get(a)
                full[a] = i[dpos[a]] * b + i[dpos[a.lower()]] if b else i[dpos[a]]
        idx = []
        for a, f in src:
            if f is None:
                b = src_blocks.get(a)
                idx.append(full[a] // b if b else full[a])
            else:
                idx.append(full[a.upper()] % f)
        if padded:
            inside = te.all_of(*(full[a] < have[a] for a in padded))
            return te.if_then_else(inside, x[tuple(idx)], te.const(0, x.dtype))
        return x[tuple(idx)]

    return [te.compute(out_types[0].shape, body, name="layout_transform", tag="layout_transform")]


def to_primal(arr: np.ndarray, layout: str) -> np.ndarray:
    """A ``layout`` array unblocked into its primal axes, in the order they appear in ``layout``."""
    axes = parse_layout(layout)
    names = [a for a, _ in axes]
    order, shape = [], []
    for a, f in axes:
        if f is None:
            order.append(names.index(a))
            shape.append(arr.shape[names.index(a)])
            if a.lower() in names:
                order.append(names.index(a.lower()))
                shape[-1] *= arr.shape[names.index(a.lower())]
    return np.transpose(arr, order).reshape(shape)


def from_primal(arr: np.ndarray, primal: str, layout: str) -> np.ndarray:
    """The inverse of ``to_primal``: an array with axes ``primal`` stored in ``layout``."""
    axes = parse_layout(layout)
    blocks = _blocks(layout)
    split_shape, split_names = [], []
    for a, d in zip(primal, arr.shape):
        b = blocks.get(a)
        if b:
            split_shape += [d // b, b]
            split_names += [a, a.lower()]
        else:
            split_shape.append(d)
            split_names.append(a)
    arr = arr.reshape(split_shape)
    return np.transpose(arr, [split_names.index(a) for a, _ in axes])


def _lt_eval(xs, attrs):
    src, dst = attrs["src_layout"], attrs["dst_layout"]
    arr = to_primal(xs[0], src)
    if attrs.get("shape"):  # pad with zeros / crop each primal axis to the size the shape asks for
        want = full_sizes(tuple(attrs["shape"]), dst)
        names = _primal(src)
        arr = arr[tuple(slice(0, want[a]) for a in names)]
        arr = np.pad(arr, [(0, want[a] - d) for a, d in zip(names, arr.shape)])
    return [from_primal(arr, _primal(src), dst)]


# ---------------------------------------------------------------------------------------------------
# conv2d_nchwc


def _conv_nchwc_geometry(data: TensorType, weight: TensorType, attrs: dict):
    """(output shape, input block, output block, depthwise) after checking shapes and attributes."""
    strides = int_tuple("conv2d_nchwc", "strides", attrs["strides"], 2)
    pt, pl, pb, pr = int_tuple("conv2d_nchwc", "padding", attrs["padding"], 4)
    dh, dw = int_tuple("conv2d_nchwc", "dilation", attrs["dilation"], 2)
    if len(data.shape) == 4:
        n, c_outer, h, w = data.shape
        ic = 1
    elif len(data.shape) == 5:
        n, c_outer, h, w, ic = data.shape
    else:
        raise Error(f"conv2d_nchwc: data must be NCHW or NCHW[x]c (rank 4 or 5), got shape {data.shape}")
    if len(weight.shape) != 6:
        raise Error(f"conv2d_nchwc: the weight must be OIHW[i]i[o]o (rank 6), got shape {weight.shape}")
    o_outer, wi_outer, kh, kw, wi, oc = weight.shape
    channels = c_outer * ic
    groups = attrs["groups"]
    if attrs.get("split"):
        return _split_geometry(data, weight, attrs, (n, c_outer, h, w, ic))
    out_channels = attrs.get("out_channels") or o_outer * oc
    depthwise = (groups != 1 and groups == channels and wi_outer == 1 and wi == 1 and oc == ic
                 and o_outer == c_outer and out_channels == o_outer * oc)
    if groups < 1 or channels % groups or out_channels % groups or not 0 <= o_outer * oc - out_channels < oc:
        raise Error(f"conv2d_nchwc: groups={groups} must divide both the {channels} input channels and the "
                    f"{out_channels} output channels (in {o_outer} blocks of {oc})")
    # groups=1 may read sub-blocks of data padded to whole blocks (a 24-channel tensor in NCHW16c: the
    # weight's 24 channels in blocks of 8; the 8 padded lanes are never read)
    padded_read = groups == 1 and wi < ic and ic % wi == 0 and channels - ic < wi_outer * wi <= channels
    if groups == 1 and not padded_read and (wi_outer * wi != channels or wi != ic):
        raise Error(f"conv2d_nchwc: the weight {weight.shape} expects {wi_outer * wi} input channels in "
                    f"blocks of {wi}, the data {data.shape} has {channels} in blocks of {ic}")
    if not depthwise and groups != 1:
        window, per_group = wi_outer * wi, channels // groups
        need = max(group_window(co, oc, out_channels, groups, channels)[1] for co in range(o_outer))
        if ic % wi or per_group % wi or window % wi or not need <= window <= channels:
            raise Error(f"conv2d_nchwc: the grouped weight {weight.shape} reads windows of {window} input "
                        f"channels in blocks of {wi}; the data {data.shape} has {channels} in blocks of {ic} "
                        f"and the {groups} groups of {oc}-channel output blocks need windows of {need}")
    oh = (h + pt + pb - dh * (kh - 1) - 1) // strides[0] + 1
    ow = (w + pl + pr - dw * (kw - 1) - 1) // strides[1] + 1
    if oh < 1 or ow < 1:
        raise Error(f"conv2d_nchwc: the {kh}x{kw} kernel is larger than the padded {h}x{w} input")
    return (n, o_outer, oh, ow, oc), ic, oc, depthwise


def group_window(co: int, oc: int, out_channels: int, groups: int, channels: int) -> tuple[int, int]:
    """(first group, channels read) of output block ``co`` of a grouped conv2d_nchwc: a block of ``oc``
    output channels may straddle groups, and then reads every input channel of the groups it touches."""
    per_out, per_in = out_channels // groups, channels // groups
    first = co * oc // per_out
    last = (min(co * oc + oc, out_channels) - 1) // per_out
    return first, (last - first + 1) * per_in


def window_start(co, oc: int, out_channels: int, groups: int, channels: int, window: int):
    """The first input channel output block ``co`` reads (an expression of ``co``, or an int): its
    first group's, moved back where the window would run past the last channel."""
    start = (co * oc // (out_channels // groups)) * (channels // groups)
    if window == channels // groups:  # blocks within one group: the window never runs past the end
        return start
    if isinstance(start, int):
        return min(start, channels - window)
    return te.minimum(start, channels - window)


def _conv_nchwc_infer(in_types, attrs):
    data, weight = require_inputs("conv2d_nchwc", in_types, ("data", "weight"))
    dtype = same_dtypes("conv2d_nchwc", [data, weight])
    require_dtype("conv2d_nchwc", data, "number")
    return [TensorType(_conv_nchwc_geometry(data, weight, attrs)[0], dtype)]


def _pad_spatial(data: te.Tensor, top: int, left: int, bottom: int, right: int):
    """Zero padding of axes 2 and 3 of a rank-4 or rank-5 tensor; ``data`` itself without padding."""
    if not (top or left or bottom or right):
        return data
    shape = list(shape_of(data))
    h, w = shape[2], shape[3]
    shape[2] += top + bottom
    shape[3] += left + right

    def body(*i):
        y, x = i[2], i[3]
        inside = te.all_of(y >= top, y < top + h, x >= left, x < left + w)
        src = (i[0], i[1], y - top, x - left) + tuple(i[4:])
        return te.if_then_else(inside, data[src], te.const(0, data.dtype))

    return te.compute(tuple(shape), body, name="pad", tag="injective")


def _conv_nchwc_workload(data, weight, attrs, ic: int, oc: int, depthwise: bool) -> dict:
    """The ``workload`` attributes of a conv2d_nchwc reduction stage (the schedules' and tuning's key)."""
    return {
        "data_shape": shape_of(data), "kernel_shape": shape_of(weight), "strides": tuple(attrs["strides"]),
        "padding": tuple(attrs["padding"]), "dilation": tuple(attrs["dilation"]), "groups": attrs["groups"],
        "out_channels": attrs.get("out_channels", 0),
        "dtype": data.dtype, "layout": f"NCHW{ic}c" if len(shape_of(data)) == 5 else "NCHW",
        "out_layout": f"NCHW{oc}c", "depthwise": depthwise,
    }


def _conv_nchwc_subblock(padded, weight, attrs, shape, ic: int, oc: int, axes, data):
    """A grouped conv2d_nchwc whose weight blocks (``wi`` input channels) are narrower than the data's
    blocks (``ic``): ShuffleNet's 68 channels per group in a 272-channel ``NCHW16c`` tensor. Input
    channel ``c`` of the window is read where the blocked tensor keeps it (block ``c // ic``, lane
    ``c % ic``), so the tensor needs no transform back to NCHW; each one is a broadcast scalar either way.
    With ``groups=1`` the data is a tensor padded to whole blocks (24 channels in ``NCHW16c``, read in
    blocks of 8): its padded lanes are never read."""
    ry, rx = axes
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    _, ci_outer, _, _, wi, _ = shape_of(weight)
    rco = te.reduce_axis((0, ci_outer), name="rco")
    rci = te.reduce_axis((0, wi), name="rci")
    groups, channels = attrs["groups"], shape_of(data)[1] * ic
    out_channels = attrs.get("out_channels") or shape[1] * oc

    def body(n, co, y, x, ci):
        yy, xx = y * sh + ry * dh, x * sw + rx * dw
        start = 0 if groups == 1 else window_start(co, oc, out_channels, groups, channels, ci_outer * wi)
        c = start + rco.var * wi + rci.var
        return te.sum(padded[n, c // ic, yy, xx, c % ic] * weight[co, rco, ry, rx, rci, ci],
                      axis=[rco, ry, rx, rci])

    workload = _conv_nchwc_workload(data, weight, attrs, ic, oc, False)
    return te.compute(shape, body, name="conv2d_nchwc", tag="conv2d_nchwc",
                      attrs={"workload": workload, **workload})


def split_group_window(co, oc: int, out_channels: int, groups: int):
    """(first group, whether it straddles into the next) of output block ``co`` (an int or an expression)
    of a split grouped conv2d_nchwc."""
    per_out = out_channels // groups
    first = co * oc // per_out
    if isinstance(co, int):
        return first, (first + 1) * per_out < min(co * oc + oc, out_channels)
    return first, (first + 1) * per_out < te.minimum(co * oc + oc, out_channels)


def _split_geometry(data: TensorType, weight: TensorType, attrs: dict, dims):
    """conv2d_nchwc's geometry in ``split`` mode: the weight holds the output blocks' own windows (their
    first group's ``C / groups`` channels), then one block per group boundary for the next group."""
    n, c_outer, h, w, ic = dims
    segments, wi_outer, kh, kw, wi, oc = weight.shape
    groups, channels = attrs["groups"], c_outer * ic
    blocks = segments - (groups - 1)
    out_channels = attrs.get("out_channels") or blocks * oc
    per_group = channels // max(groups, 1)
    if (groups < 2 or channels % groups or out_channels % groups or ic % wi or wi_outer * wi != per_group
            or (kh, kw) != (1, 1) or any(attrs["padding"]) or out_channels // groups < oc
            or not 0 <= blocks * oc - out_channels < oc):
        raise Error(f"conv2d_nchwc: the split grouped weight {weight.shape} (output blocks, then one per "
                    f"group boundary, of {per_group} input channels) does not fit {groups} groups of the "
                    f"data {data.shape} (a 1x1 kernel, no padding, {oc} or more outputs per group)")
    sh, sw = attrs["strides"]
    return (n, blocks, (h - 1) // sh + 1, (w - 1) // sw + 1, oc), ic, oc, False


def _conv_nchwc_split(data, weight, attrs, shape, ic: int, oc: int):
    """A grouped 1x1 conv2d_nchwc in ``split`` mode. Output block ``co`` reads its first group's channels
    only; the block straddling the boundary into group ``b + 1`` starts from a second stage
    (``conv2d_nchwc_extra``, one block per boundary) that reads that group with weight block
    ``blocks + b``. ShuffleNet's 68 channels per group in blocks of 16: 20 block windows of 68 where
    straddling blocks read 17 windows of 136 (1.7x the multiply-adds)."""
    sh, sw = attrs["strides"]
    segments, ci_outer, _, _, wi, _ = shape_of(weight)
    groups, channels, rank5 = attrs["groups"], shape_of(data)[1] * ic, len(shape_of(data)) == 5
    blocks = shape[1]
    out_channels = attrs.get("out_channels") or blocks * oc
    per_in = channels // groups

    def pixel(n, c, y, x):
        return data[n, c // ic, y * sh, x * sw, c % ic] if rank5 else data[n, c, y * sh, x * sw]

    def reduce_axes():
        return te.reduce_axis((0, ci_outer), name="rco"), te.reduce_axis((0, wi), name="rci")

    rco, rci = reduce_axes()

    def extra_body(n, b, y, x, ci):
        c = (b + 1) * per_in + rco.var * wi + rci.var
        return te.sum(pixel(n, c, y, x) * weight[blocks + b, rco, 0, 0, rci, ci], axis=[rco, rci])

    extra_shape = (shape[0], groups - 1, *shape[2:])
    extra = te.compute(extra_shape, extra_body, name="conv2d_nchwc_extra", tag="conv2d_nchwc_extra")
    mco, mci = reduce_axes()

    def body(n, co, y, x, ci):
        first, straddles = split_group_window(co, oc, out_channels, groups)
        c = first * per_in + mco.var * wi + mci.var
        init = te.if_then_else(straddles, extra[n, te.minimum(first, groups - 2), y, x, ci],
                               te.const(0, data.dtype))
        return te.sum(pixel(n, c, y, x) * weight[co, mco, 0, 0, mci, ci], axis=[mco, mci], init=init)

    workload = {**_conv_nchwc_workload(data, weight, attrs, ic, oc, False), "split": 1}
    return te.compute(shape, body, name="conv2d_nchwc", tag="conv2d_nchwc",
                      attrs={"workload": workload, **workload})


def _split_eval(x, w, attrs, oc: int):
    """numpy reference of the split mode (x: NCHW, w: OIHW of the segments, [blocks + groups - 1] x oc)."""
    groups, channels = attrs["groups"], x.shape[1]
    blocks = w.shape[0] // oc - (groups - 1)
    out_channels = attrs.get("out_channels") or blocks * oc
    per_in = channels // groups
    sh, sw = attrs["strides"]
    xs = x[:, :, ::sh, ::sw]

    def seg(s, g):
        return np.einsum("nchw,oc->nohw", xs[:, g * per_in:(g + 1) * per_in], w[s * oc:(s + 1) * oc, :, 0, 0])

    out = []
    for co in range(blocks):
        first, straddles = split_group_window(co, oc, out_channels, groups)
        y = seg(co, first)
        out.append(y + seg(blocks + first, first + 1) if straddles else y)
    return np.concatenate(out, axis=1).astype(x.dtype)


def _conv_nchwc_compute(inputs, attrs, out_types):
    data, weight = inputs
    dtype_in = TensorType(shape_of(data), data.dtype)
    shape, ic, oc, depthwise = _conv_nchwc_geometry(dtype_in, TensorType(shape_of(weight), weight.dtype),
                                                    attrs)
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    padded = _pad_spatial(data, *attrs["padding"])
    _, ci_outer, kh, kw, _, _ = shape_of(weight)
    rank5 = len(shape_of(data)) == 5
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    if depthwise:  # plain NCHW data: blocks of 1 (checked by the geometry), so ci is 0
        def body(n, co, y, x, ci):
            yy, xx = y * sh + ry * dh, x * sw + rx * dw
            pix = padded[n, co, yy, xx, ci] if rank5 else padded[n, co, yy, xx]
            return te.sum(pix * weight[co, 0, ry, rx, 0, ci], axis=[ry, rx])
    elif attrs.get("split"):
        return [_conv_nchwc_split(data, weight, attrs, shape, ic, oc)]
    elif shape_of(weight)[4] < ic:  # grouped, or padded data: reading sub-blocks out of the data's blocks
        return [_conv_nchwc_subblock(padded, weight, attrs, shape, ic, oc, (ry, rx), data)]
    else:
        rco = te.reduce_axis((0, ci_outer), name="rco")
        rci = te.reduce_axis((0, ic), name="rci")
        # Grouped: output block ``co`` reads a window of ``ci_outer`` input blocks from where its first
        # group starts (the weight holds zeros for the channels of other groups when it straddles two).
        groups, channels = attrs["groups"], shape_of(data)[1] * ic
        out_channels = attrs.get("out_channels") or shape[1] * oc

        def body(n, co, y, x, ci):
            yy, xx = y * sh + ry * dh, x * sw + rx * dw
            c = rco.var if groups == 1 else window_start(co, oc, out_channels, groups, channels,
                                                           ci_outer * ic) // ic + rco.var
            pix = padded[n, c, yy, xx, rci] if rank5 else padded[n, c, yy, xx]
            return te.sum(pix * weight[co, rco, ry, rx, rci, ci], axis=[rco, ry, rx, rci])

    workload = {
        "data_shape": shape_of(data), "kernel_shape": shape_of(weight), "strides": (sh, sw),
        "padding": tuple(attrs["padding"]), "dilation": (dh, dw), "groups": attrs["groups"],
        "out_channels": attrs.get("out_channels", 0),
        "dtype": data.dtype, "layout": f"NCHW{ic}c" if rank5 else "NCHW", "out_layout": f"NCHW{oc}c",
        "depthwise": depthwise,
    }
    return [te.compute(shape, body, name="conv2d_nchwc", tag="conv2d_nchwc",
                       attrs={"workload": workload, **workload})]


def _conv_nchwc_eval(xs, attrs):
    data, weight = xs
    ic = data.shape[4] if data.ndim == 5 else 1
    oc = weight.shape[5]
    x = to_primal(data, f"NCHW{ic}c") if data.ndim == 5 else data
    w = to_primal(weight, f"OIHW{weight.shape[4]}i{oc}o")
    groups, channels = attrs["groups"], x.shape[1]
    depthwise = _conv_nchwc_geometry(TensorType(data.shape, "float32"), TensorType(weight.shape, "float32"),
                                     attrs)[3]
    if attrs.get("split"):
        y = _split_eval(x, w, attrs, oc)
    elif groups == 1 or depthwise:
        # (groups=1 may read data padded past the weight's channels: the padding is not read)
        (y,) = _conv2d_eval([x[:, :w.shape[1] * groups], w], attrs)
    else:  # grouped: each output block convolves its window of input channels with its weights
        out_channels, window = attrs.get("out_channels") or w.shape[0], w.shape[1]
        plain = {**attrs, "groups": 1}
        y = np.concatenate([_conv2d_eval([x[:, s:s + window], w[co * oc:(co + 1) * oc]], plain)[0]
                            for co in range(weight.shape[0])
                            for s in [window_start(co, oc, out_channels, groups, channels, window)]], axis=1)
    return [from_primal(y, "NCHW", f"NCHW{oc}c")]


# ---------------------------------------------------------------------------------------------------
# max_pool2d_nchwc


def _pool_nchwc_infer(in_types, attrs):
    (x,) = require_inputs("max_pool2d_nchwc", in_types, ("data",))
    if len(x.shape) != 5:
        raise Error(f"max_pool2d_nchwc: data must be NCHW[x]c (rank 5), got shape {x.shape}")
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = _pool_params(attrs)
    n, c, h, w, b = x.shape
    oh = pool_out_size(h, kh, sh, dh, pt, pb, attrs["ceil_mode"])
    ow = pool_out_size(w, kw, sw, dw, pl, pr, attrs["ceil_mode"])
    if oh < 1 or ow < 1:
        raise Error(f"max_pool2d_nchwc: the {kh}x{kw} window is larger than the padded {h}x{w} input")
    return [TensorType((n, c, oh, ow, b), x.dtype)]


def _pool_params(attrs):
    return _params("max_pool2d_nchwc", attrs)


def _pool_nchwc_compute(inputs, attrs, out_types):
    (x,) = inputs
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = _pool_params(attrs)
    h, w = shape_of(x)[2:4]
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def body(n, c, y, xx, b):
        iy, ix = y * sh + ry * dh - pt, xx * sw + rx * dw - pl
        inside = te.all_of(iy >= 0, iy < h, ix >= 0, ix < w)
        return te.max(x[n, c, iy, ix, b], axis=[ry, rx], where=inside)

    return [te.compute(out_types[0].shape, body, name="max_pool2d_nchwc", tag="max_pool2d_nchwc")]


def _pool_nchwc_eval(xs, attrs):
    (x,) = xs
    block = x.shape[4]
    pool = get_op("max_pool2d")
    (y,) = pool.evaluate([to_primal(x, f"NCHW{block}c")], pool.normalize_attrs(dict(attrs)))
    return [from_primal(y, "NCHW", f"NCHW{block}c")]


# ---------------------------------------------------------------------------------------------------
# Winograd F(m x m, 3x3) over NCHW[x]c, m = 2 or 4
#
# A 3x3 stride-1 convolution computes each m x m output tile from an (m+2) x (m+2) input tile as
# ``Y = A^T [(G g G^T) * (B^T d B)] A``. F(2x2, 3x3) does 16 multiplies per input channel for 4
# outputs instead of 36 (2.25x less work); F(4x4, 3x3) does 36 for 16 outputs instead of 144 (4x), with
# larger transforms and a little more rounding (still within 1e-4 of the direct convolution). The
# reduction is a batched matrix product over the (m+2)^2 tile positions. The weight transform
# ``G g G^T`` is its own operator on weights alone, folded at compile time; its output's leading
# extent (m + 2) tells the convolution which m it is.
# Matrices: Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks" (2016), points
# 0, +-1 (m = 2) and 0, +-1, +-2 (m = 4).

WINOGRAD_MATRICES = {  # m -> (G, B^T, A^T)
    2: (np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]),
        np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: (np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])),
}


def _winograd_tile(op: str, attrs: dict) -> int:
    tile = attrs.get("tile", 2)
    if tile not in WINOGRAD_MATRICES:
        raise Error(f"{op}: tile must be one of {sorted(WINOGRAD_MATRICES)} (F(m x m, 3x3)), got {tile!r}")
    return tile


def _wt_infer(in_types, attrs):
    (w,) = require_inputs("winograd_weight_transform", in_types, ("weight",))
    if len(w.shape) != 6 or w.shape[2:4] != (3, 3):
        raise Error(f"winograd_weight_transform: the weight must be OIHW[i]i[o]o with a 3x3 kernel, got "
                    f"shape {w.shape}")
    alpha = _winograd_tile("winograd_weight_transform", attrs) + 2
    o, i, _, _, ib, ob = w.shape
    return [TensorType((alpha, alpha, o, i, ib, ob), w.dtype)]


def _wt_compute(inputs, attrs, out_types):
    (w,) = inputs
    matrix_g = WINOGRAD_MATRICES[attrs["tile"]][0]
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")

    def g(row, col):  # G[row, col] as an expression of loop variables
        out = te.const(0.0, w.dtype)
        for r in range(matrix_g.shape[0]):
            for c in range(3):
                if matrix_g[r, c]:
                    out = te.select(te.all_of(row == r, col == c), te.const(float(matrix_g[r, c]), w.dtype),
                                    out)
        return out

    def body(e, nu, o, i, ib, ob):
        return te.sum(g(e, ry.var) * w[o, i, ry, rx, ib, ob] * g(nu, rx.var), axis=[ry, rx])

    return [te.compute(out_types[0].shape, body, name="winograd_weight", tag="winograd_weight_transform")]


def _wt_eval(xs, attrs):
    """``G w G^T`` per kernel, one side at a time (numpy's three-operand einsum loops over every index
    at once: two to four times as slow on VGG's weights; ``tensordot`` goes through BLAS, whose threads
    spin on a busy machine)."""
    matrix_g = WINOGRAD_MATRICES[attrs["tile"]][0]
    rows = np.einsum("eh,oihwab->eoiwab", matrix_g, xs[0].astype(np.float64))
    return [np.einsum("eoiwab,nw->enoiab", rows, matrix_g)]


def _wino_geometry(data: TensorType, weight: TensorType, attrs: dict) -> tuple:
    pt, pl, pb, pr = int_tuple("conv2d_winograd_nchwc", "padding", attrs["padding"], 4)
    alphas = [m + 2 for m in WINOGRAD_MATRICES]
    if (len(data.shape) != 5 or len(weight.shape) != 6 or weight.shape[0] != weight.shape[1]
            or weight.shape[0] not in alphas):
        raise Error(f"conv2d_winograd_nchwc: data must be NCHW[x]c and the weight winograd-transformed "
                    f"[m+2, m+2, O/o, I/i, i, o] with m+2 in {alphas}, got {data.shape} and {weight.shape}")
    n, c_outer, h, w, ic = data.shape
    _, _, o_outer, wi_outer, wi, oc = weight.shape
    if wi_outer != c_outer or wi != ic:
        raise Error(f"conv2d_winograd_nchwc: the weight {weight.shape} does not match the data {data.shape}")
    oh, ow = h + pt + pb - 2, w + pl + pr - 2
    if oh < 1 or ow < 1:
        raise Error(f"conv2d_winograd_nchwc: the 3x3 kernel is larger than the padded {h}x{w} input")
    return (n, o_outer, oh, ow, oc)


def _wino_infer(in_types, attrs):
    data, weight = require_inputs("conv2d_winograd_nchwc", in_types, ("data", "weight"))
    dtype = same_dtypes("conv2d_winograd_nchwc", [data, weight])
    return [TensorType(_wino_geometry(data, weight, attrs), dtype)]


def _rows(index, f, matrix):
    """``sum_k matrix[index, k] * f(k)`` for a loop variable ``index``, as a select over its values
    (after unrolling ``index`` each select folds to one row: a few adds and constant multiplies)."""
    out = None
    for r in range(matrix.shape[0] - 1, -1, -1):
        term = None
        for k, coef in enumerate(matrix[r]):
            if not coef:
                continue
            t = f(k)
            if abs(coef) != 1:
                t = t * te.const(float(abs(coef)), t.dtype)
            term = (t if coef > 0 else -t) if term is None else (term + t if coef > 0 else term - t)
        out = term if out is None else te.select(index == r, term, out)
    return out


def _wino_compute(inputs, attrs, out_types):
    data, weight = inputs
    alpha = shape_of(weight)[0]
    m = alpha - 2
    _, matrix_bt, matrix_at = WINOGRAD_MATRICES[m]
    n, c_outer, h, w, ic = shape_of(data)
    shape = out_types[0].shape
    _, o_outer, oh, ow, oc = shape
    pt, pl, pb, pr = attrs["padding"]
    th, tw = -(-oh // m), -(-ow // m)
    # Pad so that every input tile is inside (the last tiles may cover rows past the output).
    padded = _pad_spatial(data, pt, pl, m * th + 2 - h - pt, m * tw + 2 - w - pl)

    def v_body(e, nu, b, co, ty, tx, ci):
        return _rows(e, lambda i: _rows(nu, lambda j: padded[b, co, ty * m + i, tx * m + j, ci], matrix_bt),
                     matrix_bt)

    v = te.compute((alpha, alpha, n, c_outer, th, tw, ic), v_body, name="winograd_input",
                   tag="winograd_input")
    rco = te.reduce_axis((0, c_outer), name="rco")
    rci = te.reduce_axis((0, ic), name="rci")

    def m_body(e, nu, b, co, ty, tx, ci):
        return te.sum(v[e, nu, b, rco, ty, tx, rci] * weight[e, nu, co, rco, rci, ci], axis=[rco, rci])

    prod = te.compute((alpha, alpha, n, o_outer, th, tw, oc), m_body, name="winograd_gemm",
                      tag="winograd_gemm",
                      attrs={"workload": {"data_shape": shape_of(data), "kernel_shape": shape_of(weight),
                                          "padding": tuple(attrs["padding"]), "dtype": data.dtype}})

    def y_body(b, co, y, x, ci):
        def row(e):
            return _rows(x % m, lambda nu: prod[e, nu, b, co, y // m, x // m, ci], matrix_at)

        return _rows(y % m, row, matrix_at)

    return [te.compute(shape, y_body, name="conv2d_winograd_nchwc", tag="conv2d_winograd_nchwc")]


def _wino_eval(xs, attrs):
    data, u = xs
    m = u.shape[0] - 2
    alpha = m + 2
    _, matrix_bt, matrix_at = WINOGRAD_MATRICES[m]
    ic, oc = data.shape[4], u.shape[5]
    x = to_primal(data, f"NCHW{ic}c").astype(np.float64)
    pt, pl, pb, pr = attrs["padding"]
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh, ow = x.shape[2] - 2, x.shape[3] - 2
    th, tw = -(-oh // m), -(-ow // m)
    x = np.pad(x, ((0, 0), (0, 0), (0, m * th + 2 - x.shape[2]), (0, m * tw + 2 - x.shape[3])))
    rows = np.arange(th)[:, None] * m + np.arange(alpha)[None, :]
    cols = np.arange(tw)[:, None] * m + np.arange(alpha)[None, :]
    tiles = x[:, :, rows[:, None, :, None], cols[None, :, None, :]]  # [N, C, TH, TW, alpha, alpha]
    v = np.einsum("ei,bcyxij,uj->eubcyx", matrix_bt, tiles, matrix_bt)
    o_total, i_total = u.shape[2] * oc, u.shape[3] * ic
    big = u.astype(np.float64).transpose(0, 1, 2, 5, 3, 4).reshape(alpha, alpha, o_total, i_total)
    prod = np.einsum("euoc,eubcyx->euboyx", big, v)
    y = np.einsum("ae,euboyx,du->boyaxd", matrix_at, prod, matrix_at)
    y = y.reshape(data.shape[0], o_total, m * th, m * tw)[:, :, :oh, :ow]
    return [from_primal(y, "NCHW", f"NCHW{oc}c")]


def ops() -> list[OpDef]:
    """The blocked-layout operators' OpDefs."""
    return [
        OpDef("layout_transform", _lt_infer, _lt_compute, OpPattern.INJECTIVE,
              attrs={"src_layout": Attr(str, doc="layout of the input, e.g. NCHW"),
                     "dst_layout": Attr(str, doc="layout of the output, e.g. NCHW16c"),
                     "shape": Attr(tuple, (), "the output shape when axes are padded to whole blocks "
                                              "(zeros) or cropped back; () derives it")},
              num_inputs=(1, 1), evaluate=checked_evaluate(_lt_infer, _lt_eval),
              doc="the same tensor stored in another (blocked) layout"),
        OpDef("conv2d_nchwc", _conv_nchwc_infer, _conv_nchwc_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs={"strides": Attr(tuple, (1, 1)),
                     "padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right"),
                     "dilation": Attr(tuple, (1, 1)),
                     "groups": Attr(int, 1, "1, grouped, or the channels: depthwise"),
                     "out_channels": Attr(int, 0, "grouped: the output channels when the last block is "
                                                  "part padding; 0: every channel of the blocks"),
                     "split": Attr(int, 0, "grouped 1x1: 1 when every output block reads its first group "
                                           "and one more weight block per group boundary adds the next "
                                           "group to the block straddling it (split_group_window)")},
              num_inputs=(2, 2), evaluate=checked_evaluate(_conv_nchwc_infer, _conv_nchwc_eval),
              doc="2-D convolution over NCHW[x]c (or NCHW) data and OIHW[i]i[o]o weights, NCHW[o]c out"),
        OpDef("max_pool2d_nchwc", _pool_nchwc_infer, _pool_nchwc_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs={"pool_size": Attr(tuple, doc="window (height, width)"), "strides": Attr(tuple, (1, 1)),
                     "padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right"),
                     "dilation": Attr(tuple, (1, 1)), "ceil_mode": Attr(bool, False)},
              num_inputs=(1, 1), evaluate=checked_evaluate(_pool_nchwc_infer, _pool_nchwc_eval),
              doc="max_pool2d over NCHW[x]c data (the channel block is carried through)"),
        OpDef("winograd_weight_transform", _wt_infer, _wt_compute, OpPattern.OPAQUE, num_inputs=(1, 1),
              attrs={"tile": Attr(int, 2, "m of F(m x m, 3x3): 2 or 4")},
              evaluate=checked_evaluate(_wt_infer, _wt_eval),
              doc="G g G^T of each 3x3 OIHW[i]i[o]o kernel: the Winograd F(m x m, 3x3) weights, "
                  "[m+2, m+2, ...]"),
        OpDef("conv2d_winograd_nchwc", _wino_infer, _wino_compute, OpPattern.OUT_ELEMWISE_FUSABLE,
              attrs={"padding": Attr(tuple, (0, 0, 0, 0), "top, left, bottom, right")},
              num_inputs=(2, 2), evaluate=checked_evaluate(_wino_infer, _wino_eval), images_apart=True,
              doc="3x3 stride-1 conv2d over NCHW[x]c data by Winograd F(m x m, 3x3), m from the weights"),
    ]

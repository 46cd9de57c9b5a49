"""8-bit dense on CPUs with a byte dot product: ``qdense`` as ``qdense_packed``.

The layout pass (``alter_qdense``) rewrites a ``qdense`` of 8-bit data ``[M, K]`` and a constant int8
weight ``[N, K]`` with zero point 0 into ``qdense_packed`` over the weight packed at compile time by
``qdense_weight_pack`` as ``[N/L, K/4, L, 4]`` (zeros past N and K): the layout ``dot_u8s8`` reads, ``L``
outputs of four consecutive ``k`` per vector. The loop program (``cpu.qdense.packed``)::

    parallel for i_outer, n_outer:                   # tiles of m rows x nb blocks of L outputs (n_outer
                                                     # first where the weight is the larger operand)
      acc[nb, m, L] = 0
      for q in K/4:                                  # one dot_u8s8 call: m x nb accumulators in
        acc += x[i, 4q:4q+4] . w[n, q]               # registers, each weight vector read once
      for i_inner: vectorized for n_inner:
        y[i, n] = epilogue(acc - zp * wsum[n])       # requantize (bias, ReLU) or float out; zp * wsum:
                                                     # dot_zero_point_correction, folded at compile time

At batch 1 (a classifier, a decoder step) it reads the weight once, front to back; for the rows of a
transformer's dynamically quantized MatMul each weight vector serves ``m`` rows. The data is read in
place when it is uint8 with ``K`` a multiple of 4; int8 data (moved to uint8 by adding 128, its zero
point with it) or a ragged ``K`` (padded with the zero point) goes through one small copy first.
"""

from __future__ import annotations

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.schedule_helpers import divisors, extent, inline_epilogue, largest_divisor, tagged_stages
from nnvm.cpu.schedule_qconv import (
    check_correction,
    dot_lanes,
    tile_limits,
    zero_point_correction,
)
from nnvm.errors import Error
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.graph.ir import TensorType
from nnvm.ops.common import checked_evaluate, require_inputs, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.passes.alter_op_layout import AlteredNode


def _packed_shape(weight_shape: tuple, lanes: int) -> tuple:
    n, k = weight_shape
    return (-(-n // lanes), -(-k // 4), lanes, 4)


def _pack_infer(in_types, attrs):
    (w,) = require_inputs("qdense_weight_pack", in_types, ("weight",))
    if w.dtype != "int8" or len(w.shape) != 2:
        raise Error(f"qdense_weight_pack: expects an int8 [N, K] weight, got {w.dtype}{list(w.shape)}")
    return [TensorType(_packed_shape(w.shape, attrs["lanes"]), "int8")]


def _pack_compute(inputs, attrs, out_types):
    (w,) = inputs
    n, k = shape_of(w)
    lanes = attrs["lanes"]

    def body(ob, q, j, r):
        row, col = ob * lanes + j, q * 4 + r
        return te.if_then_else(te.all_of(row < n, col < k), w[row, col], te.const(0, "int8"))

    return [te.compute(out_types[0].shape, body, name="qdense_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    w = xs[0]
    ob, k4, lanes, _ = _packed_shape(w.shape, attrs["lanes"])
    full = np.zeros((ob * lanes, k4 * 4), np.int8)
    full[: w.shape[0], : w.shape[1]] = w
    return [full.reshape(ob, lanes, k4, 4).transpose(0, 2, 1, 3)]


QDENSE_WEIGHT_PACK = OpDef(
    "qdense_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE, attrs={"lanes": Attr(int)},
    num_inputs=(1, 1), evaluate=checked_evaluate(_pack_infer, _pack_eval),
    doc="an int8 [N, K] weight as [N/L, K/4, L, 4] for dot_u8s8 (zeros past N and K)")


def row_axis(shape: tuple) -> int:
    """The leading axis of ``[..., K]`` data that holds its rows: the one not 1 (the last if none is)."""
    big = [d for d, e in enumerate(shape[:-1]) if e != 1]
    return big[0] if big else len(shape) - 2


def _infer(in_types, attrs):
    data, packed = require_inputs("qdense_packed", in_types[:2], ("data", "packed_weight"))
    if (data.dtype not in ("uint8", "int8") or packed.dtype != "int8" or len(data.shape) < 2
            or sum(e != 1 for e in data.shape[:-1]) > 1):
        raise Error(f"qdense_packed: expects 8-bit [..., K] data (one leading axis not 1) and an int8 "
                    f"packed weight, got "
                    f"{data.dtype}{list(data.shape)} and {packed.dtype}{list(packed.shape)}")
    n = attrs["units"]
    if tuple(packed.shape) != _packed_shape((n, data.shape[-1]), attrs["lanes"]):
        raise Error(f"qdense_packed: the packed weight {list(packed.shape)} does not fit "
                    f"{[n, data.shape[-1]]}")
    channels = packed.shape[0] * packed.shape[2]
    if attrs["dynamic_zero_point"]:
        zp, sums = (in_types[2:] + [None, None])[:2]
        if (data.dtype != "uint8" or zp is None or zp.dtype != "uint8" or zp.shape not in ((), (1,))
                or sums is None or (sums.dtype, tuple(sums.shape)) != ("int32", (channels,))):
            got = [f"{t.dtype}{list(t.shape)}" for t in in_types]
            raise Error(f"qdense_packed: a zero point read at run time needs uint8 data, a uint8 scalar and "
                        f"the weight's sums int32[{channels}], got {got}")
    else:
        check_correction("qdense_packed", in_types, attrs, data.dtype, channels)
    return [TensorType((*data.shape[:-1], n), "int32")]


def _compute(inputs, attrs, out_types):
    data, packed = inputs[:2]
    shape = shape_of(data)
    k = shape[-1]
    m = int(np.prod(shape[:-1]))
    ob, k4, lanes, _ = shape_of(packed)
    signed = data.dtype == "int8"
    zp = attrs["data_zero_point"] + (128 if signed else 0)

    rows_axis = row_axis(shape)

    def row(i, c):  # data as [M, K]: at most one leading axis is not 1 (alter_qdense)
        return data[tuple(i if d == rows_axis else te.const(0) for d in range(len(shape) - 1)) + (c,)]

    if signed or k % 4 or len(shape) > 2:
        def prep(i, c):
            v = row(i, c)
            v = (v.astype("int32") + te.const(128, "int32")).astype("uint8") if signed else v
            return te.if_then_else(c < k, v, te.const(zp, "uint8")) if k % 4 else v

        src = te.compute((m, k4 * 4), prep, name="qdense_packed_data", tag="qdense_packed_data")
    else:
        src = data
    q = te.reduce_axis((0, k4), name="q")
    r = te.reduce_axis((0, 4), name="r")
    gemm = te.compute((ob, m, lanes), lambda o, i, j: te.sum(
        src[i, q * 4 + r].astype("int32") * packed[o, q, j, r].astype("int32"), axis=[q, r]),
        name="qdense_packed_gemm", tag="qdense_packed_gemm")
    workload = {"data_shape": shape, "units": attrs["units"], "lanes": lanes, "data_dtype": data.dtype,
                "data_zero_point": zp, "dynamic_zero_point": attrs["dynamic_zero_point"]}

    def flat(i):  # the row of output index i
        return i[rows_axis]

    if attrs["dynamic_zero_point"]:
        zero, sums = inputs[2], inputs[3]

        def body(*i):
            n = i[-1]
            dyn = zero[(te.const(0),) * len(shape_of(zero))].astype("int32")
            return gemm[n // lanes, flat(i), n % lanes] - dyn * sums[n]
    elif zp == 0:
        def body(*i):
            return gemm[i[-1] // lanes, flat(i), i[-1] % lanes]
    else:
        correction = inputs[2]

        def body(*i):
            return gemm[i[-1] // lanes, flat(i), i[-1] % lanes] - correction[i[-1]]

    return [te.compute(out_types[0].shape, body, name="qdense_packed", tag="qdense_packed",
                       attrs={"workload": workload, **workload})]


def _eval(xs, attrs):
    data, packed = xs[:2]
    ob, k4, lanes, _ = packed.shape
    weight = packed.transpose(0, 2, 1, 3).reshape(ob * lanes, k4 * 4)[: attrs["units"], : data.shape[-1]]
    zp = int(np.asarray(xs[2]).reshape(-1)[0]) if attrs["dynamic_zero_point"] else attrs["data_zero_point"]
    x = data.astype(np.int64) - zp
    return [(x @ weight.astype(np.int64).T).astype(np.int32)]


QDENSE_PACKED = OpDef(
    "qdense_packed", _infer, _compute, OpPattern.OUT_ELEMWISE_FUSABLE,
    attrs={"units": Attr(int), "lanes": Attr(int), "data_zero_point": Attr(int, 0),
           "dynamic_zero_point": Attr(bool, False, "zero point: input 2, the weight's sums: input 3")},
    num_inputs=(2, 4), evaluate=checked_evaluate(_infer, _eval),
    doc="qdense (weight zero point 0) of [..., K] data over a weight packed by qdense_weight_pack (and, "
        "with a data zero point, its dot_zero_point_correction; or, with one read at run time, that "
        "scalar and the weight's sums)")


def alter_qdense(target, node, in_types) -> AlteredNode | None:
    """qdense -> qdense_packed where the backend has ``dot_u8s8`` and the weight is an int8 constant with
    zero point 0; None: not mine (the generic schedule runs it, exactly). A data zero point given as an
    input (computed at run time) is read by the kernel, which takes off ``zp * sum(w)`` per output, the
    sums folded at compile time."""
    if node.op != "qdense" or len(in_types) not in (2, 3) or None in in_types:
        return None
    data, weight = in_types[:2]
    attrs = dict(node.attrs)
    dynamic = len(in_types) == 3
    if (weight.dtype != "int8" or data.dtype not in ("uint8", "int8") or attrs.get("weight_zero_point", 0)
            or data.symbolic or weight.symbolic or (dynamic and data.dtype != "uint8")
            or sum(e != 1 for e in data.shape[:-1]) > 1):
        return None
    lanes = dot_lanes(target)
    if lanes is None:
        return None
    new = {"units": int(weight.shape[0]), "lanes": lanes,
           "data_zero_point": int(attrs.get("data_zero_point", 0)), "dynamic_zero_point": dynamic}
    pack = ("qdense_weight_pack", {"lanes": lanes})
    if dynamic:  # the weight's sums: the correction for a zero point of 1
        return AlteredNode("qdense_packed", new, inputs=(None, None, None), outputs=((None, None),),
                           prepare=(None, pack, None), constant_inputs=(1,),
                           extra=zero_point_correction(1))
    zp = new["data_zero_point"] + (128 if data.dtype == "int8" else 0)
    return AlteredNode("qdense_packed", new, inputs=(None, None), outputs=((None, None),),
                       prepare=(None, pack), constant_inputs=(1,), extra=zero_point_correction(zp))


# ---------------------------------------------------------------------------------------------------
# the schedule

_TAGS = ("qdense_packed_data", "qdense_packed_gemm", "qdense_packed")


def _stages(group):
    return tagged_stages(group, "qdense_packed", _TAGS, _TAGS[1:])


def qdense_packed_template(target, group) -> ScheduleTemplate | None:
    """``cpu.qdense.packed``: tiles of ``m`` rows x ``nb`` blocks of ``L`` outputs, one ``dot_u8s8`` call
    each over the whole reduction; None to decline."""
    found = _stages(group)
    if found is None:
        return None
    gemm = found[1]["qdense_packed_gemm"]
    ob, rows, lanes = (extent(iv) for iv in gemm.op.axis)
    k4 = extent(gemm.op.reduce_axis[0])
    limit, budget = tile_limits(target, lanes)
    m = largest_divisor(rows, limit)
    nb_space = divisors(ob, 8)
    fitting = [d for d in nb_space if d * m <= budget]
    nb = max(fitting) if fitting else 1
    space = {"m": divisors(rows, limit), "nb": nb_space,
             "outputs_outer": [False, True]}
    # the larger operand read once from memory: a transformer's feed-forward weight (768 x 3072: 2.4 MB,
    # over L2) was streamed again for every tile of rows, 16 times over 128 tokens
    outputs_outer = ob * lanes * k4 * 4 > rows * k4 * 4
    return ScheduleTemplate("cpu.qdense.packed", space, {"m": m, "nb": nb, "outputs_outer": outputs_outer},
                            lambda config: build_qdense_packed(target, group, config),
                            flops=2.0 * ob * lanes * rows * k4 * 4)


def build_qdense_packed(target, group, config: dict):
    sch, stages = _stages(group)
    keep = {stages[t].op for t in _TAGS[:2] if t in stages}
    inline_epilogue(sch, keep)
    if "qdense_packed_data" in stages:
        schedule_loop_nest(stages["qdense_packed_data"])
    gemm = stages["qdense_packed_gemm"]
    lanes = extent(gemm.op.axis[-1])
    m, nb = config["m"], config["nb"]
    out = sch[group.outputs[0].op]
    *lead, n = out.op.axis
    rows = row_axis(tuple(extent(a) for a in lead) + (0,))
    i, ones = lead[rows], [a for k, a in enumerate(lead) if k != rows]  # the other leading axes are 1
    no, ni = out.split(n, factor=lanes * nb)
    nt, nl = out.split(ni, factor=lanes)  # one vector per accumulator block: contiguous, no gather
    io, ii = out.split(i, factor=m)
    if config.get("outputs_outer"):  # a block of outputs' weights stays in cache for all the rows
        out.reorder(*ones, no, io, ii, nt, nl)
        out.parallel(out.fuse(no, io))
    else:
        out.reorder(*ones, io, no, ii, nt, nl)
        out.parallel(out.fuse(io, no))
    out.vectorize(nl)
    gemm.compute_at(out, out.leaf_iter_vars[len(ones)])
    go, gi, j = gemm.op.axis
    q, r = gemm.op.reduce_axis
    gemm.reorder(go, gi, j, q, r)
    gemm.tensorize(go, te.backend_intrinsic(target, "dot_u8s8", m=m, k4=extent(q), nb=nb))
    return sch

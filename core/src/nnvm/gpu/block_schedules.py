"""GPU schedules for every target with the key ``gpu`` (cuda, opencl, metal): blocks of threads, shared
memory, barriers. Each is a tunable template (``templates``): tile sizes, threads per block, vector width,
reduction chunk and unrolling are knobs whose fallback values are the hand-picked defaults.

- ``conv2d`` (plain and grouped) and ``dense``: each block computes an output tile, each
  thread a few outputs accumulated in private (``local``) memory; the reduction runs in chunks, and
  for every chunk the block's threads cooperatively copy the input and weight tiles it needs into
  ``__local`` memory (barriers before and after), so each global value is read once per block.
- Large reductions over few outputs (softmax's sums, global pooling, mean): ``rfactor`` across the
  threads of a block, partial results in ``__local`` memory, combined by one thread.
- Depthwise conv2d: a row of outputs per thread in private memory, no local memory.
- Everything else (elementwise chains, pooling windows, transforms): all output axes fused, split
  over blocks and threads, with the innermost four elements as one ``float4`` where they are
  contiguous.

Knobs that are caps (``tile_x``, ``tile_y``, ``per_thread``) are upper bounds: the tile actually used is
the largest divisor of the axis not above the cap, so no thread of a block idles.

A schedule that does not fit a group's shapes raises ``ScheduleError`` while being built; the group
then gets the generic GPU schedule, which fits every group.
"""

from __future__ import annotations

import math

from nnvm import te
from nnvm.autotune.template import ScheduleTemplate
from nnvm.errors import ScheduleError
from nnvm.te.tensor import ComputeOp
from nnvm.tir.expr import Const
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import tensors_read

THREADS = 64  # threads per block of the generic schedule
VECTOR = 4  # float4
RFACTOR_MIN = 128  # reductions at least this long (over few outputs) are split across threads


def _ext(iv) -> int:
    e = simplify(iv.dom.extent)
    if not isinstance(e, Const):
        raise ScheduleError(f"axis {iv.var.name} needs a constant extent")
    return int(e.value)


def _extent(iv):
    """An axis's extent: an int, or an expression of symbolic dims."""
    e = simplify(iv.dom.extent)
    return int(e.value) if isinstance(e, Const) else e


def _shape(t) -> tuple:
    shape = tuple(simplify(d) for d in t.shape)
    if not all(isinstance(d, Const) for d in shape):
        raise ScheduleError(f"{t.op.name} needs a constant shape")
    return tuple(int(d.value) for d in shape)


def schedule_group(target, group, config: dict | None = None):
    """The schedule of one fused group; never None (the generic GPU schedule fits every group)."""
    return group_template(group).apply(config)


# ---------------------------------------------------------------------------------------------------
# the generic schedule


GENERIC = {"threads": THREADS, "vector": VECTOR}


def schedule_generic(outputs, config: dict | None = None):
    """Inline injective stages; every other stage: rfactor across threads (long reductions over few
    outputs) or fused output axes over blocks x threads, innermost float4 where it divides.
    ``config``: ``threads`` per block and ``vector`` width (1: scalar)."""
    config = {**GENERIC, **(config or {})}
    threads, vector = config["threads"], config["vector"]
    sch = te.create_schedule([t.op for t in outputs])
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
            stage.compute_inline()
    for stage in list(sch.stages):
        if isinstance(stage.op, ComputeOp) and stage.attach_type == "root" and ".rf" not in stage.name:
            if not _rfactor_reduction(sch, stage, threads):
                bind_flat(stage, threads, vector)
    return sch


def bind_flat(stage, threads: int = THREADS, vector: int = VECTOR) -> None:
    """All spatial axes fused, split into blockIdx.x x threadIdx.x (x a vector when it divides)."""
    op = stage.op
    if not op.axis:
        return
    if not all(isinstance(_extent(iv), int) for iv in op.axis):  # symbolic: the last block's tail guarded
        axes, vec, last = list(op.axis), None, _extent(op.axis[-1])
        if vector > 1 and not op.reduce_axis and isinstance(last, int) and last % vector == 0:
            axes[-1], vec = stage.split(axes[-1], factor=vector)  # a constant row: vectors, no tail
        fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
        if op.reduce_axis:
            stage.reorder(fused, *op.reduce_axis)
        bx, tx = stage.split(fused, factor=threads)
        stage.bind(bx, "blockIdx.x")
        stage.bind(tx, "threadIdx.x")
        if vec is not None:
            stage.vectorize(vec)
        return
    total = math.prod(_ext(iv) for iv in op.axis)
    if total == 0:
        return  # an empty tensor: the kernel's loops run zero times
    fused = stage.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
    vec = None
    if (vector > 1 and not op.reduce_axis and total % vector == 0 and _ext(op.axis[-1]) % vector == 0
            and total >= vector * 8):
        fused, vec = stage.split(fused, factor=vector)
        total //= vector
    if op.reduce_axis:
        stage.reorder(fused, *op.reduce_axis)
    bx, tx = stage.split(fused, factor=min(threads, total))
    stage.bind(bx, "blockIdx.x")
    stage.bind(tx, "threadIdx.x")
    if vec is not None:
        stage.vectorize(vec)


def _rfactor_reduction(sch, stage, threads: int = THREADS) -> bool:
    """Split a long reduction over few outputs across the threads of one block per output."""
    op = stage.op
    if len(op.reduce_axis) == 0 or len(op.body) != 1:
        return False
    if not all(isinstance(_extent(iv), int) for iv in list(op.reduce_axis) + list(op.axis)):
        # a symbolic reduction, or a symbolic count of outputs (rows of batch x seq: a block each was 10x
        # slower than a thread each for a feed-forward's 132 x 64 outputs): one thread per output
        return False
    red_total = math.prod(_ext(iv) for iv in op.reduce_axis)
    outputs = math.prod(_ext(iv) for iv in op.axis) if op.axis else 1
    if red_total < RFACTOR_MIN or outputs > 4096:
        return False
    k = stage.fuse(*op.reduce_axis) if len(op.reduce_axis) > 1 else op.reduce_axis[0]
    _, ki = stage.split(k, factor=threads)
    rf = sch.rfactor(op.outputs[0], ki)
    rf_stage = sch[rf]
    if op.axis:
        fused = stage.fuse(*op.axis) if len(op.axis) > 1 else op.axis[0]
        stage.bind(fused, "blockIdx.x")
        rf_stage.compute_at(stage, fused)
    else:
        rf_stage.compute_root()
    rf_stage.set_scope("shared" if op.axis else "global")
    rf_stage.bind(rf_stage.op.axis[0], "threadIdx.x")
    return True


# ---------------------------------------------------------------------------------------------------
# tiled reductions with local memory


def _cooperative(stage, threads: list) -> None:
    """The copy stage's axes fused and spread over the block's threads (``threads``: (tag, extent),
    outermost first) so consecutive threads copy consecutive elements."""
    fused = stage.fuse(*stage.op.axis) if len(stage.op.axis) > 1 else stage.op.axis[0]
    rest = fused
    for tag, ext in reversed(threads):
        if ext > 1:
            rest, inner = stage.split(rest, factor=ext)
            stage.bind(inner, tag)


def _accumulator(sch, anchor_stage, out):
    """(stage computing the reduction in local memory, output stage): the anchor's local cache when
    the anchor is the output, else the anchor itself moved to local memory."""
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and not stage.is_output and not op.reduce_axis:
            stage.compute_inline()
    if anchor_stage.is_output:
        local = sch.cache_write(anchor_stage.op.outputs[0], "local")
        return sch[local], anchor_stage
    others = [st for st in sch.stages if isinstance(st.op, ComputeOp) and st.attach_type == "root"
              and st is not anchor_stage and not st.is_output]
    if others:
        raise ScheduleError("the group has more than one reduction")
    anchor_stage.set_scope("local")
    return anchor_stage, sch[out]


def _divisor_at_most(n: int, cap: int) -> int:
    """The largest divisor of ``n`` not above ``cap``: tiles that divide need no guards."""
    return max(d for d in range(1, min(n, cap) + 1) if n % d == 0)


CONV2D = {"tile_x": 8, "tile_y": 8, "tile_z": 0, "per_thread": 0, "chunk": 0, "unroll": False}
# ``chunk`` 0: input channels per round such that each thread copies about this many values (input and
# weights) into shared memory per round, at most 8 channels: more gives ptxas more loads in flight than
# 64 registers hold (stride 2 triples the input tile), less gives more barriers per output
COPY_PER_THREAD = 8
DEPTHWISE = {"per_thread": 4, "threads": THREADS}


CONV_TAGS = ("conv2d", "qconv2d")  # qconv2d: the same loops over 8-bit operands, an int32 accumulator
DENSE_TAGS = ("dense", "qdense")


def _is_depthwise(op) -> bool:
    """One input channel per output channel (``conv2d`` says so; ``qconv2d``'s workload has the groups)."""
    if "depthwise" in op.attrs:
        return bool(op.attrs["depthwise"])
    groups = op.attrs.get("groups", 1)
    return groups > 1 and groups == op.attrs["data_shape"][1]


def _same_shape(a, b) -> bool:
    """Whether two tensors have the same shape, symbolic dims (a batch) compared as expressions."""
    return len(a.shape) == len(b.shape) and all(str(simplify(x)) == str(simplify(y))
                                                for x, y in zip(a.shape, b.shape))


def _conv_stage(sch, out):
    """The group's NCHW conv2d stage; its batch may be symbolic (a block's channels, rows and columns are
    constant tiles, the batch is a factor of the block count: no tail)."""
    conv = next((st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag in CONV_TAGS), None)
    if conv is None or len(conv.op.axis) != 4 or not _same_shape(out, conv.op.outputs[0]):
        raise ScheduleError("no NCHW conv2d stage of the output's shape")
    return conv


def schedule_conv2d(out, config: dict | None = None):
    """NCHW conv2d (+ fused elementwise): a block computes (TZ x OI channels) x TY rows x TX columns,
    thread (z, y, x) OI channels of one pixel; input and weight tiles per chunk of 8 input channels
    go through local memory. ``config``: ``CONV2D``'s knobs (``tile_z``/``per_thread`` 0: chosen from
    the tile's size), or ``DEPTHWISE``'s for a depthwise convolution."""
    sch = te.create_schedule([out.op])
    conv = _conv_stage(sch, out)
    if _is_depthwise(conv.op):
        return _schedule_depthwise(sch, conv, out, {**DEPTHWISE, **(config or {})})
    config = {**CONV2D, **(config or {})}
    data_t, weight_t = tensors_read(conv.op.body[0])[:2]
    o_total, oh, ow = (_ext(iv) for iv in conv.op.axis[1:])
    rc_ext = _ext(conv.op.reduce_axis[0])
    local, stage = _accumulator(sch, conv, out)
    tx = _divisor_at_most(ow, config["tile_x"])
    ty = _divisor_at_most(oh, config["tile_y"])
    # a grouped convolution's block stays inside one group (its tiles divide a group's channels)
    o_span = o_total // conv.op.attrs.get("groups", 1)
    tz = _divisor_at_most(o_span, config["tile_z"] or (4 if tx * ty <= 32 else 2))
    per = config["per_thread"]
    oi = (4 if o_span % (4 * tz) == 0 and o_span >= 16 * tz else 1) if not per else _divisor_at_most(
        o_span // tz, per)
    n, o, y, x = stage.op.axis
    oo, orest = stage.split(o, factor=tz * oi)
    oz, oin = stage.split(orest, factor=oi)
    yo, yi = stage.split(y, factor=ty)
    xo, xi = stage.split(x, factor=tx)
    stage.reorder(n, oo, yo, xo, oz, yi, xi, oin)
    bz = stage.fuse(n, oo)
    for iv, tag in ((bz, "blockIdx.z"), (yo, "blockIdx.y"), (xo, "blockIdx.x"), (oz, "threadIdx.z"),
                    (yi, "threadIdx.y"), (xi, "threadIdx.x")):
        stage.bind(iv, tag)
    local.compute_at(stage, xi)
    rc, ry, rx = local.op.reduce_axis
    chunk = config["chunk"] or _auto_chunk(conv.op.attrs, tx, ty, tz * oi, tx * ty * tz)
    rco, rci = local.split(rc, factor=_divisor_at_most(rc_ext, chunk))
    local.reorder(rco, rci, ry, rx, *local.op.axis)
    if config["unroll"]:
        local.unroll(rx)
    threads = [("threadIdx.z", tz), ("threadIdx.y", ty), ("threadIdx.x", tx)]
    # A grouped convolution reads input channel (o // og) * cg + rc: bound inference cannot see that a
    # block's o stay in one group, so an input tile would span every group's channels (ShuffleNet's
    # 544-channel 1x1s: 104 KiB, past the 48 KiB a block may have). Its input is read from global memory.
    for t in (data_t, weight_t) if o_span == o_total else (weight_t,):
        shared = sch.cache_read(t, "shared", [local])
        sch[shared].compute_at(local, rco)
        _cooperative(sch[shared], threads)
    return sch


def _auto_chunk(attrs: dict, tx: int, ty: int, outs: int, threads: int) -> int:
    """Input channels per round of the tiled convolution for ``COPY_PER_THREAD`` (``chunk`` 0)."""
    kh, kw = attrs["kernel_shape"][2:]
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilation"]
    per_channel = ((ty - 1) * sh + (kh - 1) * dh + 1) * ((tx - 1) * sw + (kw - 1) * dw + 1) + outs * kh * kw
    return max(1, min(8, COPY_PER_THREAD * threads // per_channel))


def _schedule_depthwise(sch, conv, out, config: dict):
    """Depthwise conv2d: one input channel per output channel leaves little for a block to share, so no
    local memory (and no barriers); each thread accumulates a row of up to four outputs in private
    memory, reusing each weight across them, and threads of a block take consecutive rows."""
    ow = _ext(conv.op.axis[3])
    local, stage = _accumulator(sch, conv, out)
    n, c, y, x = stage.op.axis
    xo, xi = stage.split(x, factor=_divisor_at_most(ow, config["per_thread"]))
    fused = stage.fuse(n, c, y, xo)
    bo, t = stage.split(fused, factor=config["threads"])
    stage.bind(bo, "blockIdx.x")
    stage.bind(t, "threadIdx.x")
    local.compute_at(stage, t)
    local.reorder(*local.op.reduce_axis, *local.op.axis)
    return sch


DENSE = {"tile_y": 8, "threads": THREADS, "chunk": 32, "unroll": False}


def _dot4(op, intrinsics: dict, k_ext: int, chunk: int):
    """The backend's ``dp4a`` intrinsic (four 8-bit products in one instruction) for a ``qdense`` stage
    whose reduction splits into whole words, or None: the plain int32 multiply-add then."""
    if op.tag != "qdense" or "dp4a" not in intrinsics or k_ext % chunk or chunk % 4:
        return None
    if op.attrs.get("dynamic_zero_point"):  # read at run time: not the intrinsic's body
        return None
    a = op.attrs
    return intrinsics["dp4a"](a_dtype=a["data_dtype"], b_dtype=a["weight_dtype"],
                              a_zero_point=a["data_zero_point"], b_zero_point=a["weight_zero_point"])


def schedule_dense(out, config: dict | None = None, intrinsics: dict | None = None):
    """dense (+ fused elementwise): a block computes TY rows x TX columns, one output per thread;
    data and weight tiles per chunk of 32 of K go through local memory. ``config``: ``DENSE``'s knobs.
    ``intrinsics``: the backend's tensor intrinsics; with ``dp4a`` there, ``qdense`` sums four
    consecutive ``k`` per instruction."""
    config = {**DENSE, **(config or {})}
    sch = te.create_schedule([out.op])
    dense = next((st for st in sch.stages if isinstance(st.op, ComputeOp) and st.op.tag in DENSE_TAGS), None)
    # (a qdense of [..., K] data, a transformer's, has more than two axes: the generic schedule's)
    if dense is None or len(dense.op.axis) != 2 or not _same_shape(out, dense.op.outputs[0]):
        raise ScheduleError("no dense stage of the output's shape")
    if dense.op.attrs.get("dynamic_zero_point"):  # a third tensor read: the tiles below are for two
        raise ScheduleError("qdense with a zero point read at run time")
    data_t, weight_t = tensors_read(dense.op.body[0])[:2]
    m, n_out = _extent(dense.op.axis[0]), _ext(dense.op.axis[1])
    k_ext = _ext(dense.op.reduce_axis[0])
    local, stage = _accumulator(sch, dense, out)
    # tiles that divide the output: no thread of a block idles (idle threads are still right, their guards
    # go below the barriers: test_tiles_that_do_not_divide_..., but they waste the block)
    # symbolic rows (batch x seq): tiles of tile_y rows, the last block's rows past m guarded
    ty = _divisor_at_most(m, config["tile_y"]) if isinstance(m, int) else config["tile_y"]
    tx = _divisor_at_most(n_out, max(config["threads"] // ty, 1))
    i, j = stage.op.axis
    io, ii = stage.split(i, factor=ty)
    jo, ji = stage.split(j, factor=tx)
    stage.reorder(io, jo, ii, ji)
    for iv, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        stage.bind(iv, tag)
    local.compute_at(stage, ji)
    chunk = min(config["chunk"], k_ext)
    ko, ki = local.split(local.op.reduce_axis[0], factor=chunk)
    dot = _dot4(dense.op, intrinsics or {}, k_ext, chunk)
    if dot is not None:
        ki, k4 = local.split(ki, factor=4)
        local.reorder(ko, ki, *local.op.axis, k4)
        local.tensorize(k4, dot)
    else:
        local.reorder(ko, ki, *local.op.axis)
    if config["unroll"] and config["chunk"] <= 16:
        local.unroll(ki)
    threads = [("threadIdx.y", ty), ("threadIdx.x", tx)]
    for t in (data_t, weight_t):
        shared = sch.cache_read(t, "shared", [local])
        sch[shared].compute_at(local, ko)
        _cooperative(sch[shared], threads)
    return sch



# ---------------------------------------------------------------------------------------------------
# templates: the schedules above with their knobs, one per kind of group

SPACES = {
    "conv2d": {"tile_x": [4, 8, 16], "tile_y": [4, 8], "tile_z": [0, 1, 2, 4], "per_thread": [0, 1, 2, 4],
               "chunk": [0, 4, 8, 16], "unroll": [False, True]},
    "depthwise_conv2d": {"per_thread": [1, 2, 4, 8], "threads": [32, 64, 128, 256]},
    "dense": {"tile_y": [1, 2, 4, 8, 16], "threads": [32, 64, 128, 256], "chunk": [8, 16, 32, 64],
              "unroll": [False, True]},
    "generic": {"threads": [32, 64, 128, 256], "vector": [1, 2, 4]},
}
DEFAULTS = {"conv2d": CONV2D, "depthwise_conv2d": DEPTHWISE, "dense": DENSE, "generic": GENERIC}


def group_kind(group) -> str:
    """Which template serves a group: ``conv2d``, ``depthwise_conv2d``, ``dense`` or ``generic`` (pooling,
    reductions, softmax, elementwise chains and every group the others do not fit)."""
    if len(group.outputs) != 1 or group.anchor_op not in CONV_TAGS + DENSE_TAGS:
        return "generic"
    out = group.outputs[0]
    sch = te.create_schedule([out.op])
    try:
        if group.anchor_op in CONV_TAGS:
            return "depthwise_conv2d" if _is_depthwise(_conv_stage(sch, out).op) else "conv2d"
    except ScheduleError:
        return "generic"
    return "dense"


def _flops(outputs) -> float:
    """Twice the multiply-adds of the group's largest reduction (0 without one)."""
    sch = te.create_schedule([t.op for t in outputs])
    best = 0
    for stage in sch.stages:
        op = stage.op
        if isinstance(op, ComputeOp) and op.reduce_axis:
            try:
                work = math.prod(_ext(iv) for iv in list(op.axis) + list(op.reduce_axis))
            except ScheduleError:
                continue
            best = max(best, work)
    return 2.0 * best


def group_template(group, target=None):
    """The ``ScheduleTemplate`` of one fused group on a ``gpu`` target. A config the group's shapes do
    not fit (``ScheduleError`` while building) falls back to the generic schedule, which fits all.
    ``target`` (optional): its backend's tensor intrinsics are used where they fit (``dp4a``)."""
    kind = group_kind(group)
    outputs = group.outputs
    intrinsics = target.backend.tensor_intrinsics(target) if target is not None else {}

    def build(config: dict):
        if kind == "generic":
            return schedule_generic(outputs, config)
        try:
            if kind == "dense":
                return schedule_dense(outputs[0], config, intrinsics)
            return schedule_conv2d(outputs[0], config)
        except ScheduleError:
            return schedule_generic(outputs)

    return ScheduleTemplate(f"gpu.{kind}", SPACES[kind], dict(DEFAULTS[kind]), build, flops=_flops(outputs))

"""Winograd F(2x2, 3x3) on CPUs: when to use it, and the schedule of its four stages.

``conv2d_winograd_nchwc`` (``nnvm.ops.blocked_layout``) is pad -> input transform ``V = B^T d B`` per 4x4
tile -> 16 matrix products ``M[e, nu] = U[e, nu] V[e, nu]`` over input channels -> output transform
``Y = A^T M A`` (+ the fused epilogue). The products are 2.25x fewer multiply-adds than a direct 3x3
convolution, but the transforms read and write ``V`` and ``M`` (4x the activations) through memory,
so it wins only where the products dominate: many channels on small images.

``cpu_switches["winograd"]``: ``1`` uses it for every eligible convolution, ``0`` never; unset, the rule of
``use_winograd`` decides (where it measured faster on this machine: see its docstring).

The loop program::

    pad at root (parallel, vectorized over the channel block)
    parallel for b, c_outer, ty:  for tx, e, nu (unrolled), ci (vectorized):  V[...] = B^T d B
    parallel for e.nu.b.o_outer (fused):  for ty, tx_outer:  for rco, rci:
        unrolled for txi, o_block: vectorized for oci:  M[e, nu, .., txi, oci] += V[..] * U[..]

The products' register tile is ``tw_block`` tiles x ``o_block`` output channel blocks, the blocks
chosen by ``cost_model.oc_blocks_for`` for the tile width (a tuned ``tw_block`` too): one block loads
a weight vector per multiply-add, two or three share each broadcast (ResNet-18 1 thread: 10% faster).
The fallback ``tw_block`` is the largest divisor of a row's tiles up to 8, or, without a broadcast
operand (AVX2's 16 registers), ``cost_model.register_tile``'s width.
    parallel for o_outer:  for b, ty, tx:  unrolled for yi, xi (2x2):  vectorized oci:
        out[...] = epilogue(A^T M A)

At batch > 1 (knob ``per_image``, on in the fallback) the batch is the outer loop of the last three:
``for b: V, M of image b (parallel loops as above); parallel for o_outer.ty: out[b, ...]``, so V and M
are one image's (as at batch 1) instead of 4x the whole batch's activations each.

On large images (knob ``row_tiles``, where one image's V and M exceed ``ROW_BLOCK_ABOVE``: VGG-19's
224/112/56-pixel layers, GoogLeNet's 56 x 56 x 192) the three stages run per block of tile rows of one
image: ``for b, row block: V, M of the block (parallel loops as above); parallel for o_outer.ty: out``,
so V and M stay in L2 instead of being written and read back through memory.
"""

from __future__ import annotations

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.cost_model import machine_of, oc_blocks_for, pixel_major, register_tile
from nnvm.cpu.schedule_helpers import divisors, extent, largest_divisor, reduction_flops
from nnvm.cpu.switches import switch
from nnvm.generic_schedule import schedule_loop_nest
from nnvm.passes.alter_op_layout import AlteredNode
from nnvm.te.tensor import ComputeOp


def use_winograd(out_shape: tuple) -> bool:
    """The default rule: outputs of at least 7x7. Measured against the direct NCHW[x]c schedule: 1.4x
    faster at 56x56x64 and 14x14x256 (single thread, Zen 4), and on ResNet-18's 7x7x512 layers (whose
    2x2 tiles cover 8x8, 30% wasted) 4.5% faster for the whole model at 2 threads on the Cascade Lake
    host, though it was a tie on Zen 4. Below 7x7 the transforms outweigh the saved products."""
    flag = switch("winograd")
    if flag is not None:
        return flag == "1"
    _, _, oh, ow = out_shape
    return min(oh, ow) >= 7


def winograd_tile() -> int:
    """m of F(m x m, 3x3): 2 unless ``cpu_switches={"winograd_tile": "4"}``. F(4x4) does 1.8x fewer products
    than F(2x2) but measured no faster on ResNet-18 here (its 6x6 transforms, computed per output
    point, eat the gain) and its unrolled transforms take minutes to lower, so it is opt-in."""
    return int(switch("winograd_tile"))


def alter_winograd(node, attrs: dict, data, weight, ic: int | None, oc: int) -> AlteredNode | None:
    """conv2d -> conv2d_winograd_nchwc for a 3x3 stride-1 undilated plain convolution, when chosen."""
    if (weight.shape[2:] != (3, 3) or tuple(attrs["strides"]) != (1, 1) or tuple(attrs["dilation"]) != (1, 1)
            or attrs["groups"] != 1 or ic is None):
        return None
    pt, pl, pb, pr = attrs["padding"]
    out_shape = (data.shape[0], weight.shape[0], data.shape[2] + pt + pb - 2, data.shape[3] + pl + pr - 2)
    if not use_winograd(out_shape):
        return None
    return AlteredNode("conv2d_winograd_nchwc", {"padding": tuple(attrs["padding"])},
                       inputs=(("NCHW", f"NCHW{ic}c"), ("OIHW", f"OIHW{ic}i{oc}o")),
                       outputs=(("NCHW", f"NCHW{oc}c"),),
                       prepare=(None, ("winograd_weight_transform", {"tile": winograd_tile()})))


def _stages(group):
    if group.anchor_op != "conv2d_winograd_nchwc" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32":
        return None
    sch = te.create_schedule([out.op])
    by_tag = {}
    for st in sch.stages:
        if isinstance(st.op, ComputeOp):
            by_tag.setdefault(st.op.tag, []).append(st)
    if any(len(by_tag.get(t, [])) != 1 for t in ("winograd_input", "winograd_gemm", "conv2d_winograd_nchwc")):
        return None
    return sch, by_tag


ROW_BLOCK_ABOVE = 8 << 20  # bytes of one image's V and M over which the stages run per block of tile rows
ROW_BLOCK_BYTES = 2 << 20  # V and M of one block of tile rows, at most


def row_tiles(v, gemm) -> int:
    """Tile rows per block for the ``row_tiles`` knob, or 0 for none: blocks when one image's V and M
    exceed ``ROW_BLOCK_ABOVE`` (VGG's 224 x 224 x 64: 103 MB, 4.7x faster per block of 2 tile rows;
    GoogLeNet's 56 x 56 x 64 -> 192: 13 MB), as many rows as keep a block's V and M within
    ``ROW_BLOCK_BYTES`` (L2-sized). Smaller layers keep their space, so the shipped logs still apply
    (ResNet-18's 56 x 56 x 64, 6.4 MB, measured 20% slower in blocks of 2, and each blocked kernel takes
    0.5-1 s longer to lower)."""
    sizes = [extent(ax) for ax in (*v.op.axis[:2], *v.op.axis[3:], *gemm.op.axis[3:5])]
    if None in sizes:
        return 0
    e, nu, ci_o, ty, tx, ci, co_o, _ = sizes
    co = co_o * extent(gemm.op.axis[6])
    per_row = e * nu * (ci_o * ci + co) * tx * 4
    if per_row * ty <= ROW_BLOCK_ABOVE:
        return 0
    return max([d for d in divisors(ty, ty) if d * per_row <= ROW_BLOCK_BYTES] or [1])


def winograd_template(target, group) -> ScheduleTemplate | None:
    """``cpu.conv2d_winograd_nchwc``: knobs ``tw_block`` (tile columns per register tile), at batch
    > 1 ``per_image``, and for large images ``row_tiles`` (``row_tiles``; the batch-1 space of other
    layers is unchanged, so tuned batch-1 configs still apply)."""
    found = _stages(group)
    if found is None:
        return None
    _, by_tag = found
    gemm = by_tag["winograd_gemm"][0]
    machine = machine_of(target)
    tw = extent(gemm.op.axis[5])
    if tw is None:
        return None
    fallback = largest_divisor(tw, 8)  # 7 tiles beat 14 by up to 1.6x when tuned on the Cascade Lake host
    if not machine.broadcast_operand:
        # AVX2: 7 tiles take one channel block (7 x 2 needs 17 of 16 registers), 7 accumulators, too
        # few to cover the multiply-add's latency; the cost model's tile (3 x 4, 4 x 3, 6 x 2: 12) instead
        fallback = register_tile(machine, tw, extent(gemm.op.axis[3]) or 1, max_ow=8,
                                 fewer_loads=False).ow_block
    space = {"tw_block": sorted(set(divisors(tw, 28)) | {fallback})}
    config = {"tw_block": fallback}
    if (extent(gemm.op.axis[2]) or 1) > 1:
        space["per_image"] = [True, False]
        config["per_image"] = True
    rows = row_tiles(by_tag["winograd_input"][0], gemm)
    if rows:
        space["row_tiles"] = sorted({0, rows} | set(divisors(extent(gemm.op.axis[4]), 2 * rows)))
        config["row_tiles"] = rows
    # Revision 2: the products' register tile spans output channel blocks (cost_model.oc_blocks_for).
    return ScheduleTemplate("cpu.conv2d_winograd_nchwc", space, config,
                            lambda config: build_winograd(group, config, machine),
                            flops=reduction_flops(gemm.op), revision=2)


def build_winograd(group, config: dict, machine=None):
    """The schedule for one config; ``machine`` (``cost_model.Machine``) sizes the products' register
    tile in channel blocks (None: one block)."""
    sch, by_tag = _stages(group)
    v, m = by_tag["winograd_input"][0], by_tag["winograd_gemm"][0]
    out = sch[group.outputs[0].op]
    per_image = config.get("per_image", False) or bool(config.get("row_tiles"))
    pads = []
    for st in sch.stages:
        if isinstance(st.op, ComputeOp) and st not in (v, m, out) and not st.is_output:
            if st.op.tag == "injective" and st.op.name == "pad":
                pads.append(st)  # padding at root (or per row block), read 16 times per tile
            else:
                st.compute_inline()
    if not config.get("row_tiles") or extent(out.op.axis[0]) == 1:
        for st in pads:
            schedule_loop_nest(st)
        pads = []
    # input transform
    e, nu, b, co, ty, tx, ci = v.op.axis
    v.reorder(b, co, ty, tx, e, nu, ci)
    v.parallel(v.fuse(co, ty) if per_image else v.fuse(b, co, ty))
    v.unroll(e)
    v.unroll(nu)
    v.vectorize(ci)
    # batched products
    e, nu, b, co, ty, tx, ci = m.op.axis
    rco, rci = m.op.reduce_axis
    txo, txi = m.split(tx, factor=config["tw_block"])
    # Register tile: tw_block tiles x oc_blocks output channel blocks, pixel-major (cost_model.py:
    # one block's tiles load a weight per multiply-add, the load ports' limit)
    oc_blocks = oc_blocks_for(machine, config["tw_block"], extent(co) or 1) if machine else 1
    tile = [txi]
    if oc_blocks > 1:
        co, cob = m.split(co, factor=oc_blocks)
        tile = [txi, cob] if pixel_major(config["tw_block"], oc_blocks) else [cob, txi]
        m.unroll(cob)
    if per_image:
        m.reorder(b, e, nu, co, ty, txo, rco, rci, *tile, ci)
        m.parallel(m.fuse(e, nu, co))
    else:
        m.reorder(e, nu, b, co, ty, txo, rco, rci, *tile, ci)
        m.parallel(m.fuse(e, nu, b, co))
    m.unroll(txi)
    m.vectorize(ci)
    # output transform and epilogue
    n, oco, oy, ox, oci = out.op.axis
    tile = extent(m.op.axis[0]) - 2  # the m of F(m x m, 3x3)
    yo, yi = out.split(oy, factor=tile)
    xo, xi = out.split(ox, factor=tile)
    out.unroll(yi)
    out.unroll(xi)
    out.vectorize(oci)
    if config.get("row_tiles"):
        _by_row_blocks(out, m, v, yo, config["row_tiles"], pads)
        return sch
    if not per_image:
        out.reorder(oco, n, yo, xo, yi, xi, oci)
        out.parallel(oco)
        return sch
    # One image at a time through all four stages: V and M of one image (4x its activations each)
    # instead of the whole batch's, which at batch 8 on ResNet-18's 64 x 56 x 56 are 26 MB each,
    # allocated, faulted in and streamed through memory on every call.
    out.reorder(n, oco, yo, xo, yi, xi, oci)
    out.parallel(out.fuse(oco, yo))
    m.compute_at(out, n)
    v.compute_at(m, m.op.axis[2])
    return sch


def _by_row_blocks(out, m, v, yo, rows: int, pads: list) -> None:
    """Knob ``row_tiles``: all four stages per block of ``rows`` tile rows of one image, so V and M are
    a block's (16 x channels x rows x tiles per row floats each) rather than a whole image's, which on
    VGG's 224 x 224 x 64 layers are 51 MB each: written and read back through memory (71 GFLOP/s),
    allocated and faulted in again on every call. A block's V and M stay in the core's L2."""
    n, oco = out.op.axis[:2]
    yb, yr = out.split(yo, factor=rows)
    out.reorder(n, yb, oco, yr)
    out.parallel(out.fuse(oco, yr))
    m.compute_at(out, yb)
    v.compute_at(m, m.op.axis[2])
    # At batch > 1 the padded copy at root is the whole batch's (105 MB on VGG-19's first 3x3 layer at
    # batch 8: mapped and faulted in on every call); read through the transform's guards instead
    # (17 -> 11 ms an image there at batch 4; lowering takes 1.5 s longer). At batch 1 the copy at root
    # is as fast and lowers faster. (Attached to a row block, bound inference gives it the whole batch.)
    for pad in pads:
        pad.compute_inline()

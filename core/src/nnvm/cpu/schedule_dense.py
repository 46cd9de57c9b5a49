"""CPU schedule for dense (``y[i, j] = sum_k x[i, k] * w[j, k]``, weight ``[out, in]``) and its epilogue.

The generic schedule vectorizes the output axis ``j``, which walks the weight across rows: every
vector lane is a load from another row (a gather), so it runs near scalar speed. Here the reduction
runs along ``k``, the contiguous axis of both operands: ``rfactor`` splits it into ``kb`` vector
lanes of partial sums (``kb`` a multiple of the vector width, so several independent accumulator
registers hide the FMA latency; when none divides ``k``, another divisor, so no lane ever reads past
a row; scalar sums for a prime ``k``), and the lanes are added up once per output::

    parallel for j.outer in N / jb:
      for i in M:
        for j.inner in jb:
          partial[kb] = 0                                 # vector registers
          for k.outer in K / kb:
            vectorized for k.inner in kb:
              partial[k.inner] += x[i, k.outer*kb + k.inner] * w[j, k.outer*kb + k.inner]
          y[i, j] = epilogue(sum(partial))

``jb`` (outputs per parallel chunk, so a chunk of weight rows stays in cache across the batch rows
``i``) and ``kb`` are the knobs. This serves a dense whose weight is not a constant (or whose outputs
no vector divides); a constant weight is packed instead (below).

``dense_packed`` (``cpu.dense.packed``): at small batch dense is bound by reading the weight once. The
layout pass (``layout_choice.py``) packs a constant weight ``[N, K]`` at compile time as ``NK{b}n``
(``[N/b, K, b]``, ``b`` the vector width), so the ``b`` outputs of one block and one ``k`` are one
contiguous vector: no horizontal sums, and each block is read front to back exactly once::

    parallel for tile in N / (b * jb):
      for i.outer in M / mb:
        acc[jb, mb, b] = 0                            # jb x mb vector registers
        for k in K:
          unrolled for jb, mb: vectorized for b:
            acc[..] += x[i, k] * w[tile * jb + .., k, :]   # broadcast x, stream the weight
        unrolled for jb, mb: vectorized for b: y[i, j] = epilogue(acc[..])

The batch rows ``mb`` of a tile share each weight vector loaded (batch > 1 is blocked over, not a loop
around the batch-1 kernel); ``jb`` blocks keep independent accumulators and streams in flight. The
untuned tile is sized by the backend's vector register file (``packed_tile``: 2 x 8 with AVX-512's 32
registers, 3 x 4 with AVX2's 16), not a fixed count; with AVX2 the unrolled step walks rows outside
blocks (``rows_first``: the 3 weight vectors held, one broadcast at a time). A weight and ``[B, S, K]``
data too big for the L3 run the tiles inside the batch axes (``batch_outer``): one batch's rows in L2.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from nnvm import te
from nnvm.autotune import ScheduleTemplate
from nnvm.cpu.cost_model import (
    POOL_CHUNKS_PER_THREAD,
    SPARE_REGISTERS,
    machine_of,
    pixel_major,
    register_budget,
    registers_needed,
    streams_from_memory,
)
from nnvm.cpu.schedule_helpers import (
    divisors,
    extent,
    inline_epilogue,
    largest_divisor,
    sole_anchor,
    vector_lanes,
)
from nnvm.cpu.switches import enabled
from nnvm.errors import Error
from nnvm.graph.dims import Dim
from nnvm.graph.ir import TensorType
from nnvm.ops.blocked_layout import to_primal
from nnvm.ops.common import checked_evaluate, require_inputs, same_dtypes, shape_of
from nnvm.ops.registry import Attr, OpDef, OpPattern
from nnvm.tir import expr as E
from nnvm.tir.simplify import simplify
from nnvm.tir.visit import free_vars, substitute

MAX_KB_VECTORS = 4  # vector registers of partial sums per output: enough to cover the FMA latency


def _dense_stages(group):
    """(schedule, dense stage) for a float32 dense group with one output and one reduction, else None."""
    if group.anchor_op != "dense" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) != 2:
        return None
    sch = te.create_schedule([out.op])
    dense = sole_anchor(sch, "dense")
    if dense is None or any(extent(iv) is None for iv in (*dense.op.axis, *dense.op.reduce_axis)):
        return None
    return sch, dense


def dense_template(target, group) -> ScheduleTemplate | None:
    """``cpu.dense.rfactor``: dense with vector partial sums along the contiguous ``k`` (scalar sums when
    no vector divides ``k``); None to decline (no dense, other dtypes, symbolic shapes)."""
    found = _dense_stages(group)
    if found is None:
        return None
    _, dense = found
    m, n = (extent(iv) for iv in dense.op.axis)
    (k,) = (extent(iv) for iv in dense.op.reduce_axis)
    lanes = vector_lanes(target)
    kb_space = [lanes * v for v in range(1, MAX_KB_VECTORS + 1) if k % (lanes * v) == 0]
    if not kb_space:  # no multiple of the vector width divides k: any width that does (a partial
        # vector still sums several lanes at once), else scalar sums along the contiguous k
        kb_space = divisors(k, MAX_KB_VECTORS * lanes, 2)[-4:] or [1]
    jb_space = divisors(n, 16)
    # one vector of partial sums and 2 outputs per chunk: 2.7x faster than (2 vectors, 8 outputs) on
    # ResNet-18's classifier on the Cascade Lake host (the tuner's best); the tuner may find better
    kb = lanes if lanes in kb_space else max(kb_space)
    fallback = {"kb": kb, "jb": largest_divisor(n, 2)}
    return ScheduleTemplate("cpu.dense.rfactor", {"kb": kb_space, "jb": jb_space}, fallback,
                            lambda config: build_dense(group, config), flops=2.0 * m * n * k)


def build_dense(group, config: dict):
    """The schedule of ``cpu.dense.rfactor`` for one config (see the module docstring)."""
    sch, dense = _dense_stages(group)
    inline_epilogue(sch, {dense.op})
    out_stage = sch[group.outputs[0].op]
    (k,) = dense.op.reduce_axis
    i, j = out_stage.op.axis
    jo, ji = out_stage.split(j, factor=config["jb"])
    out_stage.reorder(jo, i, ji)
    out_stage.parallel(jo)
    if config["kb"] == 1:  # no vector partial sums: one scalar reduction along k per output
        if out_stage is not dense:
            dense.compute_at(out_stage, ji)
        return sch
    _, k_inner = dense.split(k, factor=config["kb"])
    partial = sch.rfactor(dense.op.outputs[0], k_inner)
    if out_stage is not dense:
        dense.compute_at(out_stage, ji)
        sch[partial].compute_at(dense, dense.op.axis[1])
    else:
        sch[partial].compute_at(dense, ji)
    rf = sch[partial]
    lane_axis, *spatial = rf.op.axis
    rf.reorder(*spatial, *rf.op.reduce_axis, lane_axis)
    rf.vectorize(lane_axis)
    return sch


# -- dense_packed ------------------------------------------------------------------------------------

MAX_TILE_ACCUMULATORS = 16  # the space's largest block count; the fallback sizes tiles by the registers
MAX_TILE_ROWS = 8  # data rows of a tile (each one broadcast per k)
ROW_PAD = 4  # rows that no tile divides are padded to a multiple of this (``padded_rows``)
EVEN_CHUNKS = 4 * POOL_CHUNKS_PER_THREAD  # a count the pool's chunks at 2 and 4 threads share evenly (8, 16)
MIN_PADDED_BLOCKS = 20  # an odd block count from this up gets one more block (``padded_blocks``): <= 5% work
MAX_ROW_FUSED_TILES = 64  # from this many weight tiles a chunk holds several: rows stay inside
SYMBOLIC_ROW_PAD = MAX_TILE_ROWS  # symbolic rows are computed in multiples of this (``padded_rows``)
ROW_CHUNK_BYTES = 8 << 20  # data rows a chunk of symbolic rows holds (``build_dense_packed``): in the L3
MAX_ROW_CHUNK_TILES = 64
MIN_PADDED_ROWS = 5  # few rows padded (``computed_rows``) or given a block more (``padded_blocks``) from
# this up (and a GEMV's one): 3 rows padded to 4 would be a third more work, and AVX2's 4 x 1 over 6284
# blocks at 3 rows ran GPT-2's head slower than 1 x 3 (6.4 against 5.2 ms)
MIN_STEP_FLOATS = 32  # weight floats a step of a tile of few rows reads at least (two cache lines):
# fewer ran slower where the weight streams from memory (``packed_tile``, ``padded_blocks``)
KEY_TILE_BLOCKS = 2  # a symbolic count of weight blocks (attention's keys) is computed in multiples of this


def _dense_packed_infer(in_types, attrs):
    data, weight = require_inputs("dense_packed", in_types, ("data", "weight"))
    dtype = same_dtypes("dense_packed", [data, weight])
    batch = weight.shape[:-3]  # a batched weight (attention's K^T or V) pairs with the data's batch axes
    if len(data.shape) < 2 or len(weight.shape) < 3 or weight.shape[-2] != data.shape[-1] or (
            batch and tuple(batch) != tuple(data.shape[:-2])):
        raise Error(f"dense_packed: data must be [..., K] and the weight [N/b, K, b] (or [*batch, N/b, K, b] "
                    f"with the data's batch axes) with the same K, got {data.shape} and {weight.shape}")
    padded = weight.shape[-3] * weight.shape[-1]
    units = attrs.get("units") or padded
    if isinstance(units, int) and not padded - weight.shape[-1] < units <= padded:
        raise Error(f"dense_packed: {units} outputs do not end in the last block of a {weight.shape} weight")
    if 0 < attrs.get("blocks", 0) < weight.shape[-3]:
        raise Error(f"dense_packed: {attrs['blocks']} blocks computed, fewer than a {weight.shape} weight's")
    if 0 < attrs.get("padded_rows", 0) and not (isinstance(data.shape[-2], int)
                                                and attrs["padded_rows"] >= data.shape[-2]):
        raise Error(f"dense_packed: {attrs['padded_rows']} rows computed for {data.shape[-2]} data rows")
    return [TensorType((*data.shape[:-1], units), dtype)]


def padded_rows(rows):
    """The rows ``dense_packed`` computes for ``rows`` data rows: ``rows`` when a tile of 4 to 8 rows
    divides it (or it is at most 8), else the next multiple of ``ROW_PAD``. ViT's 197 tokens (a prime)
    left tiles of one row: 4 accumulator chains per tile, latency-bound at a third of the FMA rate.
    A symbolic row count (``graph.dims.Dim``, ``seq``) is padded to a multiple of ``SYMBOLIC_ROW_PAD``
    (every tile of ``packed_tile`` divides it), so the reduction never holds a guard; only the output
    stores of the last row tile are guarded."""
    if not isinstance(rows, int):
        return (rows + (SYMBOLIC_ROW_PAD - 1)) // SYMBOLIC_ROW_PAD * SYMBOLIC_ROW_PAD
    if rows <= 8 or divisors(rows, 8, 4):
        return rows
    return -(-rows // ROW_PAD) * ROW_PAD


def computed_rows(machine, blocks: int, rows: int) -> int:
    """The data rows ``dense_packed`` computes on ``machine`` (``cost_model.Machine``) for ``rows`` rows (an
    int) by a weight of ``blocks`` blocks: ``padded_rows``'s count, or one more where an odd count of few rows
    (5 or 7: ``MIN_PADDED_ROWS``) leaves ``packed_tile`` a tile one row tall and one more row makes it taller.
    That is AVX2 at 5 and 7 rows (8 accumulators: 7 rows by 2 blocks do not fit, 7 by 1 is one weight stream
    and one broadcast register per multiply-add), where 4 x 1 tiles re-read the weight panel for every row and
    ran 4 chains: padded to 6 and 8 rows in 4 x 2 tiles (``-mcpu=haswell`` on Zen 5, one thread, CPU time, 768
    x 3072): 391 -> 259 us at 5 rows, 521 -> 354 at 7; with AVX-512 a weight of 125 blocks (5 x 1 at 5 rows, 5
    x 3 at 6). The extra row re-reads the last one (a clamped index) and is cropped. Where two blocks fit
    beside every row (AVX-512 on BERT's and GPT-2's layers and head) or the weight takes one block at a time
    (13 blocks: 1 x 7) the rows stay as they are. The layout pass asks (``layout.alter_dense``) and gives the
    count to the op (its ``padded_rows``). ``cpu_switches={"dense_few_rows": "0"}``: neither this nor
    ``packed_tile``'s one tile of few rows nor ``padded_blocks``' block for them, for A/B benchmarks."""
    padded = padded_rows(rows)
    if (padded != rows or rows % 2 == 0 or rows < MIN_PADDED_ROWS or not enabled("dense_few_rows")
            or packed_tile(machine, blocks, rows)[1] > 1):
        return padded
    return rows + 1 if packed_tile(machine, blocks, rows + 1)[1] > 1 else rows


def padded_blocks(machine, blocks: int, rows: int) -> int:
    """The weight blocks ``dense_packed`` computes on ``machine`` (``cost_model.Machine``) for a weight of
    ``blocks`` blocks and ``rows`` data rows (``padded_rows``'s count): more when the rows are many
    (``packed_tile``'s tiles of 4 to 8 rows and two or more blocks) and an odd count of at least
    ``MIN_PADDED_BLOCKS`` would leave tiles of one block, else ``blocks``. The extra blocks read the
    last one again (a clamped block index, constant along the reduction) and are cropped: at most
    1/``MIN_PADDED_BLOCKS`` more work for tiles of two or more blocks. The count goes up to a multiple
    of twice the widest tile (``widest_tile_blocks``) where that is within the bound, so the widest
    tiles divide it too, else one block more. The layout pass asks (``layout.alter_dense``) and gives
    the count to the op (its ``blocks`` attribute), whose compute knows no target.

    With AVX2 (8 lanes, widest tile 3 x 4) GPT-2's 50257-token head was 6283 blocks (61 x 103) and
    ViT's ``Q @ K^T`` 25 (197 tokens) in tiles of 1 block x 8 rows: one weight load and 8 broadcasts
    per 8 multiply-adds, load-bound; one more block, one thread: the head 211 -> 175 ms, Q @ K^T 4.18
    -> 2.3 ms a run; a multiple of 6: the head 6288 blocks in 3 x 4 tiles of 12 accumulators (ViT's
    25 to 26: 30 is over the bound). ``cpu_switches={"dense_wide_tiles": "0"}`` (2 x 4): a multiple of 4, the
    head 6284 as before. With AVX-512 (16 lanes, widest 4 x 4: a multiple of 8) the head is 2 x 1571 blocks
    and ViT's keys 13 blocks: unchanged. ``cpu_switches={"dense_pad_blocks": "0"}``: never padded, for A/B
    benchmarks.

    Few rows (under 16) get one block more where ``packed_tile`` would give them tiles one block wide
    and one more block gives tiles of ``MIN_STEP_FLOATS`` or more (4 blocks of 8, 2 of 16): with AVX2
    GPT-2's head (1 x 7 at 7 rows, 1 x 1 at one: a single accumulator chain) in 6284 blocks, 4 x 1 at
    one row, 4 x 2 from 5 rows (padded to 6, ``computed_rows``). One thread, CPU time, ``-mcpu=haswell``
    on Zen 5: 4.81 -> 4.25 ms at one row, 10.7 -> 7.8 at 5, 16.4 -> 9.1 at 7, 20.7 -> 10.4 at 9. Two
    blocks of 8 (2 x 3 at 3 rows, 2 x 2) of that weight, which streams from memory, ran slower than one:
    7.3 and 6.5 ms against 5.2 and 5.4, so 3 rows keep 6283 blocks. With AVX-512 an odd count of
    16-wide blocks (23) takes 3 x 5 at 5 rows. Off with ``cpu_switches={"dense_few_rows": "0"}``."""
    if blocks % 2 == 0 or blocks < MIN_PADDED_BLOCKS or not enabled("dense_pad_blocks"):
        return blocks
    if rows < 2 * MAX_TILE_ROWS:
        wider = ((rows == 1 or rows >= MIN_PADDED_ROWS) and enabled("dense_few_rows")
                 and packed_tile(machine, blocks, rows)[0] == 1
                 and packed_tile(machine, blocks + 1, rows)[0] * machine.lanes >= MIN_STEP_FLOATS)
        return blocks + 1 if wider else blocks
    multiple = 2 * widest_tile_blocks(machine)
    rounded = -(-blocks // multiple) * multiple
    return rounded if (rounded - blocks) * MIN_PADDED_BLOCKS <= blocks else blocks + 1


def widest_tile_blocks(machine) -> int:
    """The most weight blocks a tile of ``packed_tile`` takes on ``machine`` with many rows, over every
    block count and every row count ``padded_rows`` leaves (840 rows cover each set of tile rows 4 to 8
    dividing them): 3 with AVX2 (3 x 4), 4 with AVX-512 (4 x 4 where 8 rows do not divide)."""
    return _widest_tile_blocks(machine, enabled("dense_wide_tiles"))


@functools.cache
def _widest_tile_blocks(machine, wide_tiles: bool) -> int:
    """``widest_tile_blocks``, searched once per machine and switch state (840 ``packed_tile`` calls,
    ~12 ms: a model's odd block counts would each search again)."""
    blocks = math.lcm(*range(1, machine.registers + 1))
    first = 2 * MAX_TILE_ROWS
    many = range(first, first + math.lcm(*range(4, MAX_TILE_ROWS + 1)))
    return max(packed_tile(machine, blocks, rows)[0] for rows in many if padded_rows(rows) == rows)


def _dense_packed_compute(inputs, attrs, out_types):
    """``[..., K] x [N/b, K, b] -> [..., N]``. With ``units`` under ``N`` the product is computed over
    every block (the padding columns are zeros in the packed weight) and cropped by an injective stage:
    the crop joins the epilogue, so only the output stores of the last block are guarded, never the
    reduction (a guard there made GPT-2's 50257-token head 3.5x slower than 50256). Rows that no tile
    divides are padded the same way (``padded_rows``): the extra rows read the last data row again
    (a clamped index, hoisted out of the reduction) and are cropped; so is an odd block count with many
    rows (``padded_blocks``, the ``blocks`` attribute: the extra blocks re-read the last one)."""
    data, weight = inputs
    *lead, k = shape_of(data)
    *batch, blocks, _, b = shape_of(weight)
    units = out_types[0].shape[-1]
    m = 1
    for d in lead:
        m *= d
    rows = lead[-1]
    padded = attrs.get("padded_rows") or padded_rows(rows)  # ``computed_rows``, asked by the layout pass
    padded_b = attrs.get("blocks") or blocks  # ``padded_blocks``, asked by the layout pass
    if isinstance(blocks, Dim):  # attention's keys: whole tiles of KEY_TILE_BLOCKS (the last one re-read)
        padded_b = (blocks + (KEY_TILE_BLOCKS - 1)) // KEY_TILE_BLOCKS * KEY_TILE_BLOCKS
    rk = te.reduce_axis((0, k), name="k")
    workload = {"data_shape": (m, k), "weight_shape": (units, k), "block": b, "dtype": data.dtype}
    if batch:
        workload["weight_batch"] = tuple(batch)

    def body(*i):
        row = i[-2] if padded == rows else te.minimum(i[-2], rows - 1)
        block = i[-1] // b if padded_b == blocks else te.minimum(i[-1] // b, blocks - 1)
        w = weight[(*i[:len(batch)], block, rk, i[-1] % b)]
        return te.sum(data[(*i[:-2], row, rk)] * w, axis=rk)

    # every leading axis one axis of rows: a symbolic batch, or an image's static rows ([1, 56, 56, C]:
    # ConvNeXt's MLP in 56-row panels read the weight once each, its bound compile 1.25x its unbound one at
    # batch 1). A static [batch, seq] keeps its batch loop (``batch_outer``)
    symbolic_lead = any(isinstance(d, Dim) for d in lead[:-1])
    image_rows = len(lead) >= 3 and math.prod(lead) != lead[-1]
    if not batch and len(lead) > 1 and (symbolic_lead or image_rows):
        return [_flat_rows(data, weight, lead, rk, units, padded_b, workload)]
    full = te.compute((*lead[:-1], padded, padded_b * b), body, name="dense_packed", tag="dense_packed",
                      attrs={"workload": workload, **workload, "rows": rows})
    if units == padded_b * b and padded == rows:
        return [full]
    return [te.compute((*lead, units), lambda *i: full[i], name="dense_packed_crop", tag="injective")]


def _flat_rows(data, weight, lead: list, rk, units, padded_b: int, workload: dict):
    """``dense_packed`` of ``[*lead, K]`` data with a symbolic batch axis by a shared weight: the rows of
    every batch are one axis of ``prod(lead)`` rows, padded to whole tiles (``padded_rows``), so the
    padding is one tile in all, not one a batch ((4, 33): 136 rows computed, not 160), and cropped to
    ``[*lead, units]``. The crop's row index ``b * S + s`` is the fused loop's, which bound inference
    sees through (``te.bound``: ``(f // S) * S + f % S`` is ``f``)."""
    blocks, _, b = shape_of(weight)
    flat = 1
    for d in lead:
        flat = d * flat
    padded = padded_rows(flat)

    def body(r, j):
        r = te.minimum(r, flat - 1)
        idx = []
        for d in reversed(lead[1:]):
            idx.append(r % d)
            r = r // d
        block = j // b if padded_b == blocks else te.minimum(j // b, blocks - 1)
        return te.sum(data[(r, *reversed(idx), rk)] * weight[block, rk, j % b], axis=rk)

    full = te.compute((padded, padded_b * b), body, name="dense_packed", tag="dense_packed",
                      attrs={"workload": workload, **workload, "flat_rows": True, "rows": flat})

    def crop(*i):
        r = i[0]
        for ax, d in zip(i[1:-1], lead[1:]):
            r = r * d + ax
        return full[r, i[-1]]

    return te.compute((*lead, units), crop, name="dense_packed_crop", tag="injective")


def packed_layout(batch_axes: int, block: int) -> str:
    """The layout of a packed weight with ``batch_axes`` leading batch axes: ``NK16n``, ``ABNK16n``."""
    return "ABCDEFGHIJ"[:batch_axes] + f"NK{block}n"


def _dense_packed_eval(xs, attrs):
    data, weight = xs
    units = attrs.get("units") or weight.shape[-3] * weight.shape[-1]
    primal = to_primal(weight, packed_layout(weight.ndim - 3, weight.shape[-1]))  # [*batch, N, K]
    return [np.matmul(data, np.swapaxes(primal[..., :units, :], -1, -2))]


DENSE_PACKED = OpDef("dense_packed", _dense_packed_infer, _dense_packed_compute,
                     OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=(2, 2),
                     attrs={"units": Attr((int, Dim), 0, "the outputs when the last weight block is "
                                                         "part padding (a symbolic dim: attention's keys); "
                                                         "0: every output of the blocks"),
                            "blocks": Attr(int, 0, "the weight blocks computed where more than the weight "
                                                   "has (padded_blocks: the last one re-read, cropped); "
                                                   "0: the weight's"),
                            "padded_rows": Attr(int, 0, "the data rows computed where more than "
                                                        "padded_rows's (computed_rows: the last one "
                                                        "re-read, cropped); 0: padded_rows's")},
                     evaluate=checked_evaluate(_dense_packed_infer, _dense_packed_eval),
                     doc="dense over a weight packed NK[b]n ([N/b, K, b]) for streaming, data [..., K]; or "
                         "a batched matmul, data [*batch, M, K] by a weight [*batch, N/b, K, b] (the x86 "
                         "layout pass makes it from dense or matmul)")


def _pack_infer(in_types, attrs):
    (x,) = require_inputs("batched_weight_pack", in_types, ("data",))
    if len(x.shape) < 3:
        raise Error(f"batched_weight_pack: the data must be [*batch, K, N], got shape {x.shape}")
    *batch, k, n = x.shape
    b = attrs["block"]
    return [TensorType((*batch, (n + (b - 1)) // b, k, b), x.dtype)]


def _pack_compute(inputs, attrs, out_types):
    """``[*batch, K, N] -> [*batch, N/b, K, b]``; a partial last block repeats the last column (those
    outputs are cropped): a clamped index, where a zero padding's guard kept the packing kernel from
    vectorizing (ViT's 197 tokens: 7x slower per element than BERT's 128)."""
    (x,) = inputs
    n = shape_of(x)[-1]
    b = attrs["block"]
    return [te.compute(out_types[0].shape,
                       lambda *i: x[(*i[:-3], i[-2], te.minimum(i[-3] * b + i[-1], n - 1))],
                       name="batched_weight_pack", tag="injective")]


def _pack_eval(xs, attrs):
    (x,) = xs
    b = attrs["block"]
    *batch, k, n = x.shape
    padded = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, -n % b)], mode="edge")
    return [np.ascontiguousarray(np.swapaxes(padded.reshape(*batch, k, -1, b), -3, -2))]


BATCHED_WEIGHT_PACK = OpDef("batched_weight_pack", _pack_infer, _pack_compute, OpPattern.INJECTIVE,
                            num_inputs=(1, 1), attrs={"block": Attr(int, doc="columns a block")},
                            evaluate=checked_evaluate(_pack_infer, _pack_eval),
                            doc="a batched matmul's right side [*batch, K, N] as dense_packed's weight "
                                "[*batch, N/b, K, b], a partial last block filled with the last column")


def _packed_stages(group):
    """(schedule, dense_packed stage) for a float32 dense_packed group with constant shapes, else None."""
    if group.anchor_op != "dense_packed" or len(group.outputs) != 1:
        return None
    out = group.outputs[0]
    if out.dtype != "float32" or len(out.shape) < 2:
        return None
    sch = te.create_schedule([out.op])
    dense = sole_anchor(sch, "dense_packed")
    if dense is None:
        return None
    if "weight_batch" not in dense.op.attrs and any(
            extent(iv) is None for iv in (dense.op.axis[-1], *dense.op.reduce_axis)):
        return None  # a shared weight is constant: only the data's rows may be symbolic
    return sch, dense


def dim_names(extent) -> list:
    """The names of the symbolic dims in an extent, sorted."""
    return sorted(v.name for v in free_vars(extent))


def _symbolic_rows(dense) -> bool:
    """Whether a ``dense_packed`` stage's rows (or the batch axes around them) are symbolic dims: its
    rows are then padded to a multiple of ``SYMBOLIC_ROW_PAD`` (``padded_rows``), which every tile
    height divides."""
    return any(extent(iv) is None for iv in (*dense.op.axis, *dense.op.reduce_axis))


def dense_packed_template(target, group) -> ScheduleTemplate | None:
    """``cpu.dense.packed``: a tile of ``jb`` weight blocks x ``mb`` batch rows in registers, streaming
    the packed weight along ``k``; None to decline."""
    found = _packed_stages(group)
    if found is None:
        return None
    _, dense = found
    *lead, n = (extent(iv) for iv in dense.op.axis)
    m, _ = dense.op.attrs["data_shape"]  # the rows before padding (``padded_rows``)
    (k,) = (extent(iv) for iv in dense.op.reduce_axis)
    b = dense.op.attrs["block"]
    symbolic = _symbolic_rows(dense)
    # attention over a symbolic sequence: a symbolic count of key blocks is padded to whole tiles of
    # KEY_TILE_BLOCKS (a tile overhanging the last block would put its guard in the reduction)
    blocks = KEY_TILE_BLOCKS if n is None else -(-n // b)
    if symbolic and k is None:
        k = 64  # the template's flops: a nominal depth
    # batch rows are blocked along the last leading axis; the others are loops around. Symbolic rows are
    # a multiple of SYMBOLIC_ROW_PAD: the tiles are those of many rows (16 offers the heights 4 and 8)
    rows = 2 * SYMBOLIC_ROW_PAD if symbolic else lead[-1]
    if symbolic:
        m = SYMBOLIC_ROW_PAD * MAX_TILE_ROWS  # the template's flops: a nominal row count, never a guess
    mb_space = divisors(SYMBOLIC_ROW_PAD if symbolic else rows, MAX_TILE_ROWS)
    jb_space = divisors(blocks, MAX_TILE_ACCUMULATORS)
    machine = machine_of(target)
    if enabled("dense_tiles"):
        jb, mb = packed_tile(machine, blocks, rows)
    else:  # the fixed tile of session 9, for A/B benchmarks
        jb = next((d for d in divisors(blocks, 8, 4)), largest_divisor(blocks, 4))
        mb = largest_divisor(rows, max(1, min(MAX_TILE_ROWS, MAX_TILE_ACCUMULATORS // jb)))
    units = dense.op.attrs["weight_shape"][0] if n is not None else b
    fallback = {"jb": jb, "mb": mb, "rows_first": int(rows_first(machine, jb, mb)),
                "batch_outer": int(not symbolic and batch_outer(target, dense, m, k))}
    space = {"jb": jb_space, "mb": mb_space, "rows_first": [0, 1], "batch_outer": [0, 1]}
    build = functools.partial(build_dense_packed, group)
    # one row (a decoding step, batch 1): the static kernel's GEMV tile, not a tile of 8 padded rows.
    # Attention's products (a batched weight) take it for one query row, whatever the keys: a decode
    # step computed 8 query rows of Q @ K^T and softmax @ V for its one
    row_axes = dense.op.axis[-2:-1] if "weight_batch" in dense.op.attrs else dense.op.axis[:-1]
    one_row = {d: 1 for iv in row_axes for d in dim_names(iv.dom.extent)}
    if symbolic and one_row and _rows_at(dense, one_row) == 1:
        gemv = {"jb": packed_tile(machine, blocks, 1)[0], "mb": 1, "rows_first": 0, "batch_outer": 0}
        build = functools.partial(_with_one_row_case, group, one_row, gemv)
    return ScheduleTemplate("cpu.dense.packed", space, fallback, build, flops=2.0 * m * units * k)


def _rows_at(dense, values: dict) -> int | None:
    """The rows a ``dense_packed`` stage tiles (before padding: its ``rows`` attribute) when its dims
    take ``values``, or None where other dims remain. ViT's rows are ``197 * batch``: at batch 1 they are
    197, not one row, and the one-row case's GEMV tile made its unbound module 2.3x its bound one."""
    rows = E.convert(dense.op.attrs["rows"])
    known = {v: E.const(values[v.name]) for v in free_vars(rows) if v.name in values}
    rows = simplify(substitute(rows, known))
    return int(rows.value) if isinstance(rows, E.Const) else None


def _with_one_row_case(group, one_row: dict, gemv: dict, config: dict):
    """``build_dense_packed`` for symbolic rows, with the one-row binding as a case of its own
    (``te.Specialised``): 8 padded rows made BERT-base at (batch, seq) = (1, 1) 1.5x the static kernel."""
    return te.Specialised(build_dense_packed(group, config), [(one_row, build_dense_packed(group, gemv))])


def batch_outer(target, dense, rows: int, depth: int) -> bool:
    """Whether a shared weight's tiles run inside the data's batch axes (``[B, S, K]`` data, ``rows``
    = B x S of them, ``depth`` K) rather than outside: where the weight and the data stream from memory
    (``cost_model.streams_from_memory``: over half the last-level cache), the weight passing through
    the L3 evicts the rows every weight tile reads again, so each tile would fetch all of them from
    memory; inside the batches, one batch's S rows stay in L2 while the tiles pass, and the weight is
    read once per batch in the stream it was packed in. Zen 4 (32 MiB L3), one thread, CPU time,
    [8, 128, 768] data: GPT-2's head (768 x 50257, 154 MB) 1350 -> 1133 ms (onnxruntime 1096);
    3072 -> 768 (21 MB) 61.0 -> 58.2 ms. Where both fit, the tiles stay outermost: BERT b8's 768 -> 3072
    and QKV (10-12 MB) ran 1-2% slower inside the batches."""
    batches = math.prod(extent(iv) for iv in dense.op.axis[:-2])
    weight_bytes = extent(dense.op.axis[-1]) * depth * 4
    return ("weight_batch" not in dense.op.attrs and batches > 1 and enabled("dense_batch_outer")
            and streams_from_memory(target, (rows * depth) * 4 + weight_bytes))


def rows_first(machine, jb: int, mb: int) -> bool:
    """Whether a tile's unrolled step walks its ``mb`` rows outside its ``jb`` weight blocks: then the
    ``jb`` weight vectors stay in registers and each row's broadcast is used at once, else the ``mb``
    broadcasts stay and each weight vector is used at once (``cost_model.pixel_major``: the smaller set
    is kept). Only where a broadcast takes a register of its own (AVX2): there 3 x 4 blocks first held
    12 accumulators, 4 broadcasts and a weight, one over the 16 registers, and LLVM spilled (68 against
    89 GFLOP/s rows first). With a broadcast operand (AVX-512's 32 registers) the step is as it was."""
    return (not machine.broadcast_operand and enabled("dense_wide_tiles")
            and pixel_major(mb, jb))


def packed_tile(machine, blocks: int, rows: int) -> tuple[int, int]:
    """The fallback tile ``(jb, mb)`` of ``cpu.dense.packed`` for ``blocks`` weight blocks and ``rows``
    data rows on ``machine`` (``cost_model.Machine``): accumulators up to half the vector registers, and
    with the operands held across a step (``cost_model.registers_needed``) within the register budget.

    - Many rows (a sequence or a batch, ``rows >= 2 * MAX_TILE_ROWS``): tiles of 4 to 8 rows, the most
      accumulators (independent chains), then two or more weight streams, then the most rows: each
      weight vector loaded serves ``mb`` rows, so the weight bytes a multiply-add reads from L2 fall
      with ``mb``. Zen 5, one thread, packed weights of 768-3072 x 768-3072 at 1024 rows:
      2 x 8 (16 zmm accumulators) 1-5% faster than 4 x 4, level at 128 rows; 24 accumulators
      (3 x 8) spilled (0.75x), 6 x 4 was 0.83x on 3072-deep panels (1.2 MiB, over L2); 1 x 8 (8 chains)
      was 0.85x.
    - Few rows (a GEMV at batch 1-8): bound by reading the weight once, so four to eight weight
      streams first (4 blocks were 1.2x faster than 1 or 2 at batch 1 on 4096 x 4096; 5 blocks of 8
      2.9x faster than 1 for 1280 -> 1000), then the rows dividing them that fit. Where that leaves a
      tile one row tall (a prime 5 or 7 rows beside 4 streams: 4 chains, the weight panel re-read for
      every row), every row goes in one tile of fewer streams, two or more whose step reads at least
      ``MIN_STEP_FLOATS`` of weight (3 x 5, 2 x 7 with AVX-512), so each weight vector loaded serves
      every row. Zen 5, one thread, CPU time, 768 x 3072 (K x N): 4 x 1 took 286 and 350 us at 5 and
      7 rows, 1.7-2.1x their 164 at 8 (4 x 4); 3 x 5 and 2 x 7 take 111 and 145 us (padded to 8 rows:
      172 and 170); BERT-base bound at (1, 7) 20.9 -> 14.6 ms, (1, 5) 16.4 -> 11.7. The rule is held to
      those cases: the products alone ran 2 x 6 and 2 x 8 7-25% faster than 4 x 3 and 4 x 4, and
      AVX2's 2 x 3 (16 floats a step) 1.4x faster than 4 x 1 (173 us against 240), but in whole
      models, the weights from memory, they were slower: BERT-base at (1, 8) 13.1 -> 14.2 ms
      ((1, 6) level), with AVX2 at (1, 3) 14.3 -> 16.0 (GPT-2 19.9 -> 22.1). Where no such tile fits
      beside the rows (AVX2 at 5 and 7 rows) the layout pass pads them by one (``computed_rows``).

    With AVX2's 16 registers (no broadcast operand: each broadcast is a register of its own, so the
    register count is exact, ``cost_model.register_budget``) many rows take 12 accumulators, the tile
    whose step loads the fewest operands (``jb + mb``): 3 x 4 (3 weights held, one broadcast at a time,
    16 registers; ``rows_first``), 7 loads per 12 multiply-adds against 2 x 4's 6 per 8. Zen 4, one
    thread, 132 x 768 x 768 and 132 x 768 x 3072: 89 and 84 GFLOP/s against 80 and 74 for 2 x 4
    (2 x 6, 8 loads, 88 and 81). ``cpu_switches={"dense_wide_tiles": "0"}``: 8 accumulators (2 x 4), the
    former AVX2 tile (the fixed 16 before it, 4 x 4 with 4 weights, spilled: 86 GFLOP/s on Zen 5 against
    122-124 for 2 x 4).
    """
    budget = machine.registers - SPARE_REGISTERS * machine.registers // 32
    cap = machine.registers // 2

    def fits(jb: int, mb: int) -> bool:
        return jb * mb <= cap and registers_needed(mb, jb) <= budget

    if rows >= 2 * MAX_TILE_ROWS:  # padded_rows leaves such rows a divisor of 4 to 8
        if not machine.broadcast_operand and enabled("dense_wide_tiles"):
            tiles = [(jb, mb) for jb in divisors(blocks, machine.registers)
                     for mb in divisors(rows, MAX_TILE_ROWS, 4)
                     if registers_needed(mb, jb, False) <= register_budget(machine)]
            if tiles:
                return max(tiles, key=lambda t: (t[0] * t[1], t[0] >= 2, -t[0] - t[1]))
        tiles = [(jb, mb) for jb in divisors(blocks, cap) for mb in divisors(rows, MAX_TILE_ROWS, 4)
                 if fits(jb, mb)]
        if tiles:
            return max(tiles, key=lambda t: (t[0] * t[1], t[0] >= 2, t[1]))
    jb = _weight_streams(blocks, lambda d: fits(d, 1))
    mb = max(d for d in divisors(rows, MAX_TILE_ROWS) if d == 1 or fits(jb, d))
    if mb == 1 and 1 < rows <= MAX_TILE_ROWS and enabled("dense_few_rows"):
        # a tile one row tall: every row in one tile of fewer streams, each weight vector serving all
        wide = _weight_streams(blocks, lambda d: fits(d, rows))
        if wide >= 2 and wide * machine.lanes >= MIN_STEP_FLOATS:
            return wide, rows
    return jb, mb


def _weight_streams(blocks: int, fits) -> int:
    """The weight blocks of a tile of few rows: the fewest of four to eight dividing ``blocks`` that
    ``fits``, else the most under four that does (1 if none)."""
    jb = next((d for d in divisors(blocks, 8, 4) if fits(d)), None)
    return jb or max(d for d in divisors(blocks, 4) if d == 1 or fits(d))


def build_dense_packed(group, config: dict):
    """The schedule of ``cpu.dense.packed`` for one config (see the module docstring)."""
    sch, dense = _packed_stages(group)
    inline_epilogue(sch, {dense.op})
    out_stage = sch[group.outputs[0].op]
    b = dense.op.attrs["block"]
    # [B, S, K] data: the rows of S are blocked, B is a loop around them (fusing B and S would leave
    # the bounds of a tile's rows to a div/mod, which bound inference widens to every row)
    *outer, i, j = out_stage.op.axis
    if dense.op.attrs.get("flat_rows") and outer:  # the rows of every batch, one axis (``_flat_rows``)
        i, outer = out_stage.fuse(*outer, i), []
    jo, ji = out_stage.split(j, factor=b)
    jt, jb = out_stage.split(jo, factor=config["jb"])
    it, ib = out_stage.split(i, factor=config["mb"])
    (k,) = dense.op.reduce_axis
    # A batched weight (attention: one per batch x head) is read only by its own batch, so the batch
    # axes go outside the tiles. Otherwise every batch reads the same weight: the tiles of it outermost,
    # so a thread's tiles of rows read one panel of the weight in turn.
    # A batched weight (attention: one per batch x head, a few dozen KiB) is read only by its own batch:
    # the batch axes and the tiles of rows are the parallel loop (fused: parallel over the heads alone
    # nested the other axes around it, a parallel region per head, and left ViT's 3 heads to 2 threads)
    # and each row tile runs every tile of its weight (a weight tile loop fused in instead made ViT's
    # Q @ K^T, 197 outputs in 13 blocks, 1.2x slower on one thread; rows first, 0.95x).
    # Otherwise every batch reads the same weight: its tiles are the parallel loop, outermost, so a
    # thread's row tiles read one panel in turn; or, where the weight and the data stream from memory
    # (``batch_outer``), inside the batch axes, so one batch's rows stay in L2 while the weight's tiles
    # pass. Unless the pool's chunks (EVEN_CHUNKS) cannot hold the same number of them: then the rows
    # join the parallel loop, so every chunk is the same work. ViT's
    # 192 outputs were 3 tiles for 2 threads (two thirds of the pair busy); BERT's and GPT-2's 768 outputs
    # are 12 tiles, 8 chunks of 1 and 2 tiles, and the thread left with a 2 waits for it. One thread:
    # 768-deep products level, ViT's 192-deep ones 1-2% slower (a tile's row index is a div/mod).
    # Each fused iteration is whole tiles, so its bounds stay exact.
    if "weight_batch" in dense.op.attrs and _symbolic_rows(dense):
        # symbolic batch, rows or keys: the batch axes are the parallel loop (a fused index divided by
        # the constant head count, so each tile's bounds stay exact), each row tile runs every tile of
        # its weight
        par, inner = list(outer), [it, jt]
    elif "weight_batch" in dense.op.attrs:
        par, inner = [*outer, it], [jt]
    elif _symbolic_rows(dense) and config["mb"] > 1:
        # symbolic rows (flattened, ``_flat_rows``): chunks of row tiles of about ROW_CHUNK_BYTES of
        # data (up to 512 rows: one batch of the bound compile's ``batch_outer`` at seq 512) outside the
        # weight's tiles, both in the parallel loop (a fused index divided by the constant tile count), the
        # row tiles of a chunk inside: each chunk stays in the L3 while the weight passes, where weight
        # tiles outermost streamed all of BERT's 4096 rows from memory once a tile (BERT-base at (8, 512)
        # 1.11x its bound compile -> 1.02x). Chunks of L2 size (512 KiB) made (4, 33) 1.29x (its 136 rows in
        # two chunks); from 8 MiB a short binding is one chunk. The last chunk's overhang is cut off by
        # the lowering (``partition_loops``)
        (k_extent,) = (extent(iv) for iv in dense.op.reduce_axis)
        chunk = ROW_CHUNK_BYTES // (4 * config["mb"] * (k_extent or 64))
        chunk = 1 << max(0, min(chunk, MAX_ROW_CHUNK_TILES).bit_length() - 1)
        ic, ii = out_stage.split(it, factor=chunk)
        par, inner = [*outer, ic, jt], [ii]
    elif _symbolic_rows(dense):  # one row at a time (the one-row case): the weight's tiles in parallel
        par, inner = [*outer, jt], [it]
    else:
        par, inner = ([*outer, jt] if config.get("batch_outer") else [jt, *outer]), [it]
        tiles = math.prod(extent(iv) for iv in outer) * -(-extent(j) // (b * config["jb"]))
        if tiles % EVEN_CHUNKS and tiles < MAX_ROW_FUSED_TILES:
            par, inner = [*par, it], []
    if out_stage is dense:
        dense.reorder(*par, *inner, k, *_step(jb, ib, config), ji)
        tiles = dense.fuse(*par) if len(par) > 1 else par[0]
    else:
        out_stage.reorder(*par, *inner, jb, ib, ji)
        tiles = out_stage.fuse(*par) if len(par) > 1 else par[0]
        out_stage.unroll(jb)
        out_stage.unroll(ib)
        out_stage.vectorize(ji)
        dense.compute_at(out_stage, inner[-1] if inner else tiles)
        *_, ib, dj = dense.op.axis
        jb, ji = dense.split(dj, factor=b)
        dense.reorder(k, *_step(jb, ib, config), ji)
    dense.unroll(jb)
    dense.unroll(ib)
    dense.vectorize(ji)
    out_stage.parallel(tiles)
    return sch


def _step(jb, ib, config):
    """The tile's two unrolled loops in a step, outer first (``rows_first``)."""
    return (ib, jb) if config.get("rows_first") else (jb, ib)

"""A small analytical cost model for the fallback configs of the CPU convolution templates.

Untuned, a template runs its fallback config; fixed numbers ("14 accumulators, two channel blocks on
short rows") fit the machine they were measured on and the shapes they were measured with. This model
picks the register tile of ``cpu.conv2d_nchwc.direct`` per workload from facts asked of the backend
(``Backend.vector_lanes``, ``vector_registers``, ``broadcast_operand``; its ``cpu_signature``: cache
sizes, team size), so a new CPU or a new shape gets a tile sized for it.

The tile is ``ow_block`` output pixels x ``oc_blocks`` channel blocks of accumulators (one vector each).
Each reduction step (one input channel at one kernel tap) loads ``oc_blocks`` weight vectors and
broadcasts ``ow_block`` input scalars into ``ow_block * oc_blocks`` fused multiply-adds, so:

- registers: accumulators + the operands held across the step <= the register file less
  ``SPARE_REGISTERS``. The schedule
  keeps the smaller of the two operand sets in registers (``pixel_major``): ``oc_blocks`` weights and
  one broadcast at a time, or ``ow_block`` broadcasts and one weight at a time (a lone block's
  broadcast is folded into the multiply-add as a memory operand);
- time per step: ``max(FMAs / FMA_PER_CYCLE, loads / LOADS_PER_CYCLE) + STEP_OVERHEAD`` cycles; per
  useful multiply-add that is the cost, times the padding of a partial last tile on the row and of a
  partial last group of channel blocks.

Without a broadcast operand (``Machine.broadcast_operand``: AVX2) every broadcast is a register, the
count is exact and takes the whole file (``register_budget``), and a step costs at least
``FMA_LATENCY`` cycles (``step_latency``): each accumulator's multiply-add waits for its previous one,
so a tile of 7-8 accumulators leaves the two pipes idle. Measured on the AVX2 Zen 4 host (1 thread,
ResNet-50/AlexNet/SqueezeNet layers): 12-accumulator tiles (3 x 4, 6 x 2; 5 x 2 with 10) ran 5-30%
faster than the 7-8 of the AVX-512 accounting (2 x 4, 4 x 2, 7 x 1), partial last tiles included.

Measured on a Zen 5 core (1 thread, ResNet-50's 1x1 and stride-2 3x3 layers): tiles of 2-4 blocks
(7 x 2, 4 x 4, 14 x 2: 9-16 loads per 14-28 FMAs) ran 1.1-1.3x faster than the former 14 x 1 (15 loads
per 14 FMAs: the load ports, not the FMA pipes, were the limit); 7 x 4 (33 registers) spilled and ran
1.2x slower, 14 x 2 (31) spilled on the 7x7 stem, and partial tiles (4 x 4 on 7-pixel rows) ran
1.4x slower, more than their wasted lanes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nnvm.cpu.schedule_helpers import vector_lanes
from nnvm.cpu.switches import enabled

FMA_PER_CYCLE = 2.0  # vector FMAs issued per cycle: two FMA pipes (Zen 4/5, Skylake-SP and later servers)
LOADS_PER_CYCLE = 2.0  # vector or broadcast loads per cycle
STEP_OVERHEAD = 1.0  # cycles of loop control and address arithmetic per reduction step
FMA_LATENCY = 5.0  # cycles a step takes at least: each accumulator's multiply-add waits for its last
SPARE_REGISTERS = 4  # of 32 (2 of 16) left to LLVM: at 31 of 32 it hoisted loads and spilled (7x7 stem)
PARTIAL_TILE = 1.1  # a row with a partial last tile runs guarded code besides the wasted lanes
MAX_OC_BLOCKS = 4  # channel blocks one tile may span
DEFAULT_L1D = 32 * 1024  # when the backend does not know the caches (another CPU than the host)
DEFAULT_L2 = 1024 * 1024
POOL_CHUNKS_PER_THREAD = 4  # a parallel loop's chunks per thread (the LLVM backends' CHUNKS_PER_THREAD;
# a short loop they would not divide evenly runs one iteration a chunk)


@dataclass(frozen=True)
class Machine:
    """What the model needs of a CPU: float32 ``lanes`` per vector, vector ``registers``, ``l1d`` and
    ``l2`` bytes per core, ``threads`` a parallel kernel runs on; ``broadcast_operand``: whether a
    multiply-add takes its broadcast input as a memory operand (AVX-512's embedded broadcast; AArch64's
    by-element form reads it from one register of four scalars). AVX2 has none: each broadcast is a
    ``vbroadcastss`` into a register of its own."""

    lanes: int
    registers: int
    l1d: int = DEFAULT_L1D
    l2: int = DEFAULT_L2
    threads: int = 1
    broadcast_operand: bool = True


def machine_of(target) -> Machine:
    """The ``Machine`` of ``target``, asked of its backend (vector width, registers and broadcast
    operand; cache sizes and team size from ``cpu_signature`` where the backend gives one; defaults
    where it does not know them)."""
    backend = target.backend
    lanes = vector_lanes(target)
    registers = backend.vector_registers(target)
    operand = backend.broadcast_operand(target)
    signature = getattr(backend, "cpu_signature", lambda _t: None)(target)
    if signature is None:
        return Machine(lanes, registers, broadcast_operand=operand)
    return Machine(lanes, registers, signature.l1d or DEFAULT_L1D, signature.l2 or DEFAULT_L2,
                   signature.cores or 1, operand)


STREAM_SHARE = 0.5  # of the last-level cache: a layer whose input + output exceed it streams from memory


def streams_from_memory(target, nbytes: int) -> bool:
    """Whether ``nbytes`` of a layer's operands exceed ``STREAM_SHARE`` of ``target``'s last-level cache
    (asked of the backend's ``cpu_signature``; unknown: no). Depthwise layers take one-row tiles there,
    packed products run their weight's tiles inside the batches."""
    signature = getattr(target.backend, "cpu_signature", lambda _t: None)(target)
    l3 = getattr(signature, "l3", None)
    return bool(l3) and nbytes > STREAM_SHARE * l3


@dataclass(frozen=True)
class Tile:
    """A register tile and its modelled cycles per useful multiply-add."""

    ow_block: int
    oc_blocks: int
    cost: float

    @property
    def pixel_major(self) -> bool:
        return pixel_major(self.ow_block, self.oc_blocks)


def pixel_major(ow_block: int, oc_blocks: int) -> bool:
    """Whether the tile's unrolled body walks pixels outside channel blocks: then the ``oc_blocks``
    weight vectors stay in registers and each broadcast is used at once; otherwise the ``ow_block``
    broadcasts stay and each weight is used at once. The smaller set is kept (LLVM keeps what the
    inner loop reuses live across it)."""
    return oc_blocks > 1 and ow_block >= oc_blocks


def registers_needed(ow_block: int, oc_blocks: int, broadcast_operand: bool = True) -> int:
    """Accumulators plus the operands held across one reduction step (``pixel_major``). Without a
    broadcast operand (``Machine.broadcast_operand``) a lone block's broadcast takes a register too."""
    if oc_blocks == 1:
        # one weight; the broadcast is a memory operand of the multiply-add, or a register of its own
        return ow_block + (1 if broadcast_operand else 2)
    held = oc_blocks + 1 if pixel_major(ow_block, oc_blocks) else ow_block + 1
    return ow_block * oc_blocks + held


def register_budget(machine: Machine) -> int:
    """Registers a tile may take (``registers_needed``): the register file less ``SPARE_REGISTERS``
    where a broadcast folds into the multiply-add. Without that (AVX2) the count is exact, every
    broadcast in a register: all 16 (on the AVX2 Zen 4 host 3 x 4 blocks, 16, ran without spills and
    fastest on ResNet-50's 1x1 and 3x3 layers; 7 x 2, 17, spilled and ran 1.7x slower; MLAS's AVX2
    SGEMM takes 15)."""
    if not machine.broadcast_operand:
        return machine.registers
    return machine.registers - SPARE_REGISTERS * machine.registers // 32


def tile_cost(ow_block: int, oc_blocks: int, width: int, oc_outer: int, latency: float = 0.0) -> float:
    """Modelled cycles per useful multiply-add of a tile on rows of ``width`` pixels and ``oc_outer``
    channel blocks (the module docstring's formula); a step takes at least ``latency`` cycles."""
    fmas = ow_block * oc_blocks
    cycles = max(fmas / FMA_PER_CYCLE, (ow_block + oc_blocks) / LOADS_PER_CYCLE, latency) + STEP_OVERHEAD
    row_waste = math.ceil(width / ow_block) * ow_block / width
    if width % ow_block:
        row_waste *= PARTIAL_TILE
    oc_waste = math.ceil(oc_outer / oc_blocks) * oc_blocks / oc_outer
    return cycles / fmas * row_waste * oc_waste


def step_latency(machine: Machine) -> float:
    """The shortest reduction step ``tile_cost`` models on ``machine``: ``FMA_LATENCY`` without a
    broadcast operand, else none (the AVX-512 tiles were chosen without it, and kept)."""
    return 0.0 if machine.broadcast_operand else FMA_LATENCY


def register_tile(machine: Machine, width: int, oc_outer: int, max_ow: int | None = None,
                  fewer_loads: bool = True) -> Tile:
    """The cheapest tile that fits the register file for rows of ``width`` output pixels and
    ``oc_outer`` channel blocks: channel blocks that divide ``oc_outer`` (no guarded partial group),
    pixels up to ``max_ow``. Near ties go to the wider row (each pass of a tile over the reduction
    streams its weights: 4 x 4 tiles ran 6% slower than 7 x 2 on 3x3 layers whose weights exceed L1),
    then to the larger tile; without a broadcast operand, to fewer loads first (``fewer_loads``:
    Winograd's products, whose 6 x 2 ran 3-7% faster than 3 x 4 on ResNet-18's 56 x 56 layers, say no)."""
    best = None
    limit = min(width, max_ow or width)
    budget, latency = register_budget(machine), step_latency(machine)
    for oc_blocks in range(1, min(MAX_OC_BLOCKS, oc_outer) + 1):
        if oc_outer % oc_blocks:
            continue
        for ow_block in range(1, limit + 1):
            if registers_needed(ow_block, oc_blocks, machine.broadcast_operand) > budget:
                break
            cost = tile_cost(ow_block, oc_blocks, width, oc_outer, latency)
            # AVX2: among equal costs, fewer loads (each broadcast its own instruction): 3 x 4 (7 loads)
            # ran 4-15% faster than 6 x 2 (8) on ResNet's stem and 28/56-pixel rows, AlexNet's 5x5
            loads = 0 if machine.broadcast_operand or not fewer_loads else ow_block + oc_blocks
            key = (round(cost, 2), loads, -ow_block, -ow_block * oc_blocks)
            if best is None or key < best[0]:
                best = (key, Tile(ow_block, oc_blocks, cost))
    return best[1] if best is not None else Tile(1, 1, tile_cost(1, 1, width, oc_outer, latency))


def widest_row(machine: Machine, cap: int) -> int:
    """The most pixels (up to ``cap``) a one-block tile may hold in ``machine``'s register budget:
    14 with AVX2 (14 accumulators, the weight, the broadcast)."""
    budget = register_budget(machine)
    fits = [w for w in range(1, cap + 1) if registers_needed(w, 1, machine.broadcast_operand) <= budget]
    return max(fits or [1])


def oc_blocks_for(machine: Machine, ow_block: int, oc_outer: int) -> int:
    """The channel blocks per tile of ``register_tile``'s model for a tile width fixed by a config
    (Winograd's products, whose ``tw_block`` knob a tuning log may set): the cheapest that fits."""
    budget, latency = register_budget(machine), step_latency(machine)
    fits = [b for b in range(1, min(MAX_OC_BLOCKS, oc_outer) + 1)
            if oc_outer % b == 0 and registers_needed(ow_block, b, machine.broadcast_operand) <= budget]
    return min(fits or [1],
               key=lambda b: (round(tile_cost(ow_block, b, ow_block, oc_outer, latency), 2), -b))


def parallel_loop(machine: Machine, batch: int, oc_chunks: int, rows: int | None = None) -> str:
    """The loop the pool splits: images x channel blocks at batch > 1 (``n_oc``), channel block groups
    when there are at least two per thread (``oc``; each thread then streams only its own weights),
    else output rows (``oh``). Given the ``rows`` of the output, a choice whose units do not split into
    the pool's chunks evenly becomes channel block groups x rows fused (``oc_oh``). Measured when the pool
    cut every loop into ``POOL_CHUNKS_PER_THREAD`` chunks a thread: MobileNetV2's 960 -> 160 on 7x7 (5
    groups of two blocks) ran 3 groups on one thread and 2 on the other, and its 7x7 and 14x14 layers ran
    1.4-1.6x faster on 2 threads than on one; fused, 1.1-1.2x faster than that. The pool now cuts such
    loops into chunks of one size (``even_chunks`` in the x86 plugin's ``nnvm_pool.c``), and the rule,
    still counting 4 a thread, measured level against ``cpu_switches={"fused_parallel": "0"}`` (never fused,
    for A/B benchmarks) on MobileNetV2 at batch 1: kept, not re-derived."""
    if batch > 1:
        return "n_oc"
    loop = "oc" if oc_chunks >= 2 * max(machine.threads, 2) else "oh"
    if rows is None or not enabled("fused_parallel"):
        return loop
    units = oc_chunks if loop == "oc" else rows
    return loop if units % (max(machine.threads, 1) * POOL_CHUNKS_PER_THREAD) == 0 else "oc_oh"


FLAT_PLANE_GAIN = 0.83  # flatten a plane only where the model says its tile is this much cheaper


def flat_plane_pays(machine: Machine, rows: Tile, flat: Tile, batch: int, oc_outer: int) -> bool:
    """Whether a 1x1 convolution should walk its plane as one row (``flat``, schedule_nchwc.py) instead
    of row by row (``rows``): where the model's tile over the flattened plane is cheaper by
    ``FLAT_PLANE_GAIN``, and, at batch 1, its channel-block groups alone feed the pool (a flat plane is
    one row: nothing to split by rows)."""
    if flat.cost > FLAT_PLANE_GAIN * rows.cost:
        return False
    return batch > 1 or oc_outer // flat.oc_blocks >= 2 * max(machine.threads, 2)

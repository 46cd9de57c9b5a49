"""nnvm.cpu.cost_model: the register tiles it picks for the NCHW[x]c convolution's fallback."""

from __future__ import annotations

import pytest

from nnvm.cpu.cost_model import (
    Machine,
    flat_plane_pays,
    oc_blocks_for,
    parallel_loop,
    pixel_major,
    register_budget,
    register_tile,
    registers_needed,
    step_latency,
    tile_cost,
)

AVX512 = Machine(lanes=16, registers=32, threads=2)
AVX2 = Machine(lanes=8, registers=16, threads=2, broadcast_operand=False)


@pytest.mark.parametrize("machine", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("width", [1, 2, 3, 7, 13, 14, 19, 28, 56, 109, 112])
@pytest.mark.parametrize("oc_outer", [1, 2, 3, 4, 6, 8, 32])
def test_tiles_fit_the_registers_and_divide_the_blocks(machine, width, oc_outer):
    tile = register_tile(machine, width, oc_outer, max_ow=14)
    assert 1 <= tile.ow_block <= min(width, 14)
    assert oc_outer % tile.oc_blocks == 0
    fold = machine.broadcast_operand
    assert registers_needed(tile.ow_block, tile.oc_blocks, fold) <= register_budget(machine)
    # no other fitting tile is cheaper by more than the tie margin (costs equal to 2 decimals)
    for ocb in range(1, min(4, oc_outer) + 1):
        for ow in range(1, min(width, 14) + 1):
            if oc_outer % ocb == 0 and registers_needed(ow, ocb, fold) <= register_budget(machine):
                assert tile.cost <= tile_cost(ow, ocb, width, oc_outer, step_latency(machine)) + 0.01


def test_avx512_spans_channel_blocks_on_resnet_rows():
    """One block's 14 pixels load 15 vectors per 14 multiply-adds; two or more blocks load fewer."""
    for width in (7, 14, 28, 56):
        tile = register_tile(AVX512, width, 8, max_ow=14)
        assert tile.oc_blocks >= 2 and width % tile.ow_block == 0, (width, tile)
        assert tile.cost < tile_cost(min(width, 14), 1, width, 8)


def test_a_prime_row_gets_a_partial_tile_not_single_pixels():
    assert register_tile(AVX512, 19, 2, max_ow=14).ow_block == 10


def test_registers_and_order():
    assert registers_needed(14, 1) == 15  # the broadcast folds into the multiply-add
    assert registers_needed(7, 2) == 14 + 3 and pixel_major(7, 2)  # 2 weights + 1 broadcast held
    assert registers_needed(1, 4) == 4 + 2 and not pixel_major(1, 4)  # 1 broadcast + 1 weight
    assert registers_needed(7, 4) > 32  # spills: never picked


def test_parallel_loop_has_chunks_for_every_thread():
    assert parallel_loop(AVX512, 8, 1) == "n_oc"
    assert parallel_loop(AVX512, 1, 16) == "oc"
    assert parallel_loop(AVX512, 1, 2) == "oh"
    assert parallel_loop(Machine(16, 32, threads=16), 1, 16) == "oh"


def test_parallel_loop_fuses_rows_where_the_pool_would_split_unevenly():
    """The pool cuts a loop into 4 chunks a thread: 5 groups of channel blocks (MobileNetV2's 160
    channels in pairs of blocks, 7x7) or 14 rows do not split evenly over 2 threads; 16 groups and 112
    rows do."""
    assert parallel_loop(AVX512, 1, 5, rows=7) == "oc_oh"
    assert parallel_loop(AVX512, 1, 12, rows=14) == "oc_oh"
    assert parallel_loop(AVX512, 1, 2, rows=14) == "oc_oh"
    assert parallel_loop(AVX512, 1, 16, rows=7) == "oc"
    assert parallel_loop(AVX512, 1, 2, rows=112) == "oh"
    assert parallel_loop(AVX512, 8, 5, rows=7) == "n_oc"


# What the model picked for a 16-lane, 32-register machine (AVX-512) before the AVX2 accounting
# (session 11): (width, output channel blocks) -> (ow_block, oc_blocks). AVX-512 keeps these.
AVX512_TILES = {
    (7, 4): (7, 2), (7, 8): (7, 2), (7, 32): (7, 2), (14, 4): (7, 2), (14, 8): (7, 2), (14, 16): (7, 2),
    (28, 2): (7, 2), (28, 4): (4, 4), (28, 8): (4, 4), (56, 4): (8, 2), (56, 2): (8, 2), (56, 8): (8, 2),
    (112, 2): (8, 2), (109, 4): (11, 2), (55, 6): (11, 2), (27, 12): (9, 2), (13, 8): (13, 1),
    (13, 3): (13, 1),
}
AVX512_WINOGRAD_BLOCKS = [4, 4, 4, 2, 2]  # oc_blocks_for tile widths 2, 3, 4, 7, 8 over 32 blocks


def test_avx512_tiles_are_unchanged_by_the_avx2_accounting():
    """Embedded broadcast (``broadcast_operand``): the budget keeps its spare registers and the step no
    latency floor, so every tile and Winograd block count is the one it was."""
    got = {key: (lambda t: (t.ow_block, t.oc_blocks))(register_tile(AVX512, *key, max_ow=14))
           for key in AVX512_TILES}
    assert got == AVX512_TILES
    assert register_budget(AVX512) == 28 and step_latency(AVX512) == 0
    assert [oc_blocks_for(AVX512, w, 32) for w in (2, 3, 4, 7, 8)] == AVX512_WINOGRAD_BLOCKS


def test_avx2_counts_every_broadcast_and_fills_the_file():
    """No embedded broadcast: a lone block's broadcast takes a register; all 16 may be used, and a step
    is no shorter than a multiply-add's latency, so ResNet rows get 10-12 accumulators, not 7-8."""
    assert registers_needed(14, 1, broadcast_operand=False) == 16
    assert registers_needed(3, 4, broadcast_operand=False) == 16 and registers_needed(7, 2, False) == 17
    assert register_budget(AVX2) == 16
    for width in (7, 14, 28, 56):
        tile = register_tile(AVX2, width, 8, max_ow=12)
        assert 10 <= tile.ow_block * tile.oc_blocks <= 12, (width, tile)
        assert registers_needed(tile.ow_block, tile.oc_blocks, False) <= 16
    assert oc_blocks_for(AVX2, 3, 32) == 4 and oc_blocks_for(AVX2, 7, 32) == 1


def _flattens(machine, width, oc_outer, batch=1):
    rows = register_tile(machine, width, oc_outer, max_ow=12 if machine.registers == 16 else 14)
    flat = register_tile(machine, width * width, oc_outer, max_ow=12 if machine.registers == 16 else 14)
    return flat_plane_pays(machine, rows, flat, batch, oc_outer)


def test_flat_plane_only_where_a_row_ends_in_a_poor_tile():
    """AVX2: 7-pixel rows in 3 x 4 tiles (3, 3 and a lone pixel) flatten (MobileNetV2's 960 -> 160 and
    320 -> 1280, ResNet-50's 7x7 1x1s: measured 1.10-1.13x faster); 4 x 3 on 7 pixels (measured level) and
    14-pixel rows (mixed) do not; batch 1 needs channel-block groups for both threads."""
    assert _flattens(AVX2, 7, 20) and _flattens(AVX2, 7, 160) and _flattens(AVX2, 7, 64)
    assert not _flattens(AVX2, 7, 120)  # 4 x 3 tiles
    assert not any(_flattens(AVX2, 14, blocks) for blocks in (8, 12, 16, 72))
    assert not any(_flattens(AVX2, w, 8) for w in (28, 56, 112))
    assert not _flattens(AVX2, 7, 4) and _flattens(AVX2, 7, 4, batch=8)  # 2 groups of 2 blocks at batch 1


def test_avx512_and_neon_never_flatten():
    """32 registers fill 7- and 14-pixel rows without a poor tile; nothing measured there: no change."""
    neon = Machine(lanes=4, registers=32, threads=2)
    for machine in (AVX512, neon):
        for width in (7, 13, 14, 27, 28, 55, 56, 112):
            assert not any(_flattens(machine, width, b, batch) for b in (2, 3, 4, 8, 10, 20, 64, 125, 160)
                           for batch in (1, 8)), (machine, width)


def test_a_backend_that_does_not_say_gets_the_avx2_accounting():
    """``Backend.vector_registers`` and ``broadcast_operand`` unanswered: 16 registers and every broadcast
    in a register of its own, the accounting that never overfills a register file."""
    from nnvm.backend import Backend

    assert Backend().vector_registers(None) == 16 and Backend().broadcast_operand(None) is False

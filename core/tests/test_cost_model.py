"""nnvm.cpu.cost_model: the register tiles it picks for the NCHW[x]c convolution's fallback."""

from __future__ import annotations

import pytest

from nnvm.cpu.cost_model import (
    Machine,
    parallel_loop,
    pixel_major,
    register_tile,
    registers_needed,
    tile_cost,
)

AVX512 = Machine(lanes=16, registers=32, threads=2)
AVX2 = Machine(lanes=8, registers=16, threads=2)


@pytest.mark.parametrize("machine", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("width", [1, 2, 3, 7, 13, 14, 19, 28, 56, 109, 112])
@pytest.mark.parametrize("oc_outer", [1, 2, 3, 4, 6, 8, 32])
def test_tiles_fit_the_registers_and_divide_the_blocks(machine, width, oc_outer):
    tile = register_tile(machine, width, oc_outer, max_ow=14)
    assert 1 <= tile.ow_block <= min(width, 14)
    assert oc_outer % tile.oc_blocks == 0
    spare = 4 * machine.registers // 32
    assert registers_needed(tile.ow_block, tile.oc_blocks) <= machine.registers - spare
    # no other fitting tile is cheaper by more than the tie margin (costs equal to 2 decimals)
    for ocb in range(1, min(4, oc_outer) + 1):
        for ow in range(1, min(width, 14) + 1):
            if oc_outer % ocb == 0 and registers_needed(ow, ocb) <= machine.registers - spare:
                assert tile.cost <= tile_cost(ow, ocb, width, oc_outer) + 0.01


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

"""``cpu.dense.packed``'s fallback tile sized by the vector register file (``packed_tile``): the tiles it
picks for AVX-512 (32 registers) and AVX2 (16), and transformer-shaped products compiled with them for
both, against onnxruntime: rows no tile divides (7, 197, 8 x 197), outputs in partial blocks (1000, a
50257-like 1571 * 16 + 1), a prime depth (13), bias, residual-add and GELU epilogues; few rows (3-8) in
one tile, or padded by one where AVX2's tile would be one row tall."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu.cost_model import Machine, register_budget, registers_needed
from nnvm.cpu.schedule_dense import (
    computed_rows,
    dense_packed_template,
    packed_tile,
    padded_blocks,
    rows_first,
    widest_tile_blocks,
)

AVX512, AVX2 = Machine(16, 32), Machine(8, 16, broadcast_operand=False)


@pytest.mark.parametrize("machine", [AVX512, AVX2], ids=["avx512", "avx2"])
@pytest.mark.parametrize("blocks, rows", [(48, 128), (144, 128), (3142, 128), (13, 200), (63, 128),
                                          (63, 8), (48, 1), (256, 1), (125, 2), (3, 4)])
def test_tile_fits_the_register_file(machine, blocks, rows):
    jb, mb = packed_tile(machine, blocks, rows)
    assert blocks % jb == 0 and rows % mb == 0, (jb, mb)
    assert jb * mb <= machine.registers * 3 // 4, (jb, mb)
    assert registers_needed(mb, jb, machine.broadcast_operand) <= register_budget(machine), (jb, mb)


def test_tiles_chosen_for_each_register_file(cpu_switch):
    """Many rows: two weight blocks by as many rows as fit with AVX-512 (2 x 8 zmm), with AVX2 the 12
    accumulators whose step loads the fewest operands (3 x 4 ymm, rows outside blocks; 2 x 4 where 3
    does not divide the blocks); a GEMV keeps four to eight weight streams; a prime block count keeps
    8 rows."""
    assert packed_tile(AVX512, 144, 128) == (2, 8) and not rows_first(AVX512, 2, 8)
    assert packed_tile(AVX2, 144, 128) == (3, 4) and rows_first(AVX2, 3, 4)
    assert packed_tile(AVX2, 96, 1024) == (3, 4)  # BERT / GPT-2 at batch 8
    assert packed_tile(AVX2, 6284, 1024) == (2, 4)  # 4 x 1571 blocks: no 3-block tile
    assert packed_tile(AVX512, 3142, 128) == (2, 8)  # GPT-2's head: 2 x 1571 blocks
    assert packed_tile(AVX512, 13, 200) == packed_tile(AVX2, 13, 200) == (1, 8)  # ViT's 197 keys
    assert packed_tile(AVX512, 48, 1) == packed_tile(AVX2, 48, 1) == (4, 1)
    assert packed_tile(AVX512, 63, 8) == (7, 2)
    assert packed_tile(AVX2, 63, 8) == (7, 1)
    cpu_switch("dense_wide_tiles", "0")
    assert packed_tile(AVX2, 144, 128) == (2, 4) and not rows_first(AVX2, 2, 4)


def _model(path, batch, rows, k, n, epilogue):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["g"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, rows, k])]
    if epilogue == "gelu":  # as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))
        inits += [numpy_helper.from_array(np.array(v, np.float32), name)
                  for name, v in (("s", 1 / np.sqrt(2)), ("h", 0.5), ("one", 1.0))]
        nodes += [helper.make_node("Mul", ["g", "s"], ["gs"]), helper.make_node("Erf", ["gs"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["g", "e1"], ["ge"]),
                  helper.make_node("Mul", ["ge", "h"], ["y"])]
    elif epilogue == "residual":
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, [batch, rows, n]))
        nodes.append(helper.make_node("Add", ["g", "r"], ["y"]))
    else:
        nodes.append(helper.make_node("Identity", ["g"], ["y"]))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph(nodes, "gemm", inputs, [out], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"], ids=["host", "avx2"])
@pytest.mark.parametrize("batch, rows, k, n, epilogue", [
    (1, 7, 768, 1000, "residual"),      # 7 rows (padded to 8), 1000 outputs: blocks of 8
    (1, 197, 13, 25137, "gelu"),        # ViT's 197 tokens, a prime depth, 1571 * 16 + 1 outputs
    (8, 197, 192, 768, "gelu"),         # ViT fc1 at batch 8: 1576 rows
    (8, 128, 768, 768, "residual"),     # BERT/GPT-2 attention output at batch 8
    (2, 128, 768, 2304, "bias"),        # QKV
    (1, 128, 64, 293, "gelu"),          # 37 blocks of 8 (AVX2): padded to 38, the last re-reads block 36
    (2, 16, 32, 296, "residual"),       # 37 whole blocks padded (a crop only for the padding)
    (1, 128, 64, 821, "residual"),      # 103 blocks of 8 (AVX2) padded to 108 for 3 x 4 tiles
    (1, 128, 64, 488, "bias"),          # 61 blocks of 8 (AVX2): 62 (66 is over the bound)
])
def test_products_match_onnxruntime(tmp_path, target, batch, rows, k, n, epilogue):
    path = str(tmp_path / "gemm.onnx")
    _model(path, batch, rows, k, n, epilogue)
    rng = np.random.default_rng(1)
    feeds = {"x": rng.standard_normal((batch, rows, k)).astype(np.float32)}
    if epilogue == "residual":
        feeds["r"] = rng.standard_normal((batch, rows, n)).astype(np.float32)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mod = nnvm.compile(path, target=target, tuning_log=False)
    assert "dense_packed" in {node.op for node in mod.graph.nodes}
    got = mod.run(*feeds.values())[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert got.shape == want.shape and err < 1e-5, f"max relative error {err:.2e} against onnxruntime"


@pytest.mark.parametrize("target, lanes, tile", [("llvm -mcpu=skylake-avx512", 16, (2, 8, 0)),
                                                 ("llvm -mcpu=haswell", 8, (3, 4, 1))])
def test_fallback_follows_the_backend(tmp_path, group_of, target, lanes, tile):
    """The tile is asked of the target's backend (vector width, register count), not fixed."""
    path = str(tmp_path / "gemm.onnx")
    _model(path, 1, 128, 64, 768, "bias")
    graph, tgt, *_ = optimized_graph(path, target)
    template = dense_packed_template(tgt, group_of(graph, "dense_packed"))
    want = {"jb": tile[0], "mb": tile[1], "rows_first": tile[2], "batch_outer": 0}
    assert template.fallback == want, template.fallback
    assert graph.types[[n for n in graph.nodes if n.op == "dense_packed"][0].inputs[1]].shape[-1] == lanes


@pytest.mark.parametrize("target, blocks", [("llvm -mcpu=haswell", 62), ("llvm -mcpu=skylake-avx512", 64)])
def test_the_layout_pass_pads_blocks_for_the_targets_tiles(tmp_path, target, blocks):
    """488 outputs are 61 blocks of 8 on either ISA (16 does not divide them); with 128 rows the layout
    pass gives ``dense_packed`` the count of ``padded_blocks`` for the target's machine: AVX2 one more
    (a multiple of 6 would be 5 more, over 1/20), AVX-512 a multiple of 8 (its 4 x 4 tiles, 3 more)."""
    path = str(tmp_path / "gemm.onnx")
    _model(path, 1, 128, 64, 488, "bias")
    graph, *_ = optimized_graph(path, target)
    (node,) = [n for n in graph.nodes if n.op == "dense_packed"]
    assert graph.types[node.inputs[1]].shape[-3:] == (61, 64, 8)
    assert node.attrs["blocks"] == blocks


@pytest.mark.parametrize("batch, batch_outer", [(1, 0), (8, 1)])
def test_batches_outside_weight_tiles_past_l3(tmp_path, group_of, monkeypatch, cpu_switch, batch,
                                              batch_outer):
    """Where the weight and the data stream from memory (``streams_from_memory``, here forced for anything
    over 4 MiB: GPT-2's 154 MB head on the 32 MiB L3 host), [8, 128, 768] data (3 MiB) and a 768 x 768
    weight run the weight's tiles inside the batch axes; a single batch keeps the tiles outermost, and so
    does the switch set to 0."""
    from nnvm.cpu import schedule_dense

    monkeypatch.setattr(schedule_dense, "streams_from_memory", lambda _target, nbytes: nbytes > 4 << 20)
    path = str(tmp_path / "gemm.onnx")
    _model(path, batch, 128, 768, 768, "bias")
    graph, tgt, *_ = optimized_graph(path, "llvm")
    assert dense_packed_template(tgt, group_of(graph, "dense_packed")).fallback["batch_outer"] == batch_outer
    cpu_switch("dense_batch_outer", "0")
    assert dense_packed_template(tgt, group_of(graph, "dense_packed")).fallback["batch_outer"] == 0


def test_switch_off_keeps_the_fixed_tile(tmp_path, group_of, cpu_switch):
    """``cpu_switches={"dense_tiles": "0"}``: the former 4 blocks x 4 rows, for A/B benchmarks."""
    path = str(tmp_path / "gemm.onnx")
    _model(path, 1, 128, 64, 768, "bias")
    cpu_switch("dense_tiles", "0")
    graph, tgt, *_ = optimized_graph(path, "llvm -mcpu=skylake-avx512")
    fallback = dense_packed_template(tgt, group_of(graph, "dense_packed")).fallback
    assert fallback == {"jb": 4, "mb": 4, "rows_first": 0, "batch_outer": 0}


def test_odd_blocks_are_padded_for_many_rows(cpu_switch):
    """GPT-2's head in blocks of 8 (AVX2) is 6283 = 61 x 103 blocks, ViT's keys 25: padded for tiles of
    two or more blocks, to a multiple of twice the widest tile (AVX2's 3 x 4: 6) within 1/20 more work,
    else one more block; in blocks of 16 (AVX-512) the head is 2 x 1571 and ViT's keys 13: unchanged, an
    odd 63 goes to a multiple of 8 (4 x 4); few rows (a GEMV's 125 blocks) and even counts never."""
    assert widest_tile_blocks(AVX2) == 3 and widest_tile_blocks(AVX512) == 4
    assert padded_blocks(AVX2, 6283, 128) == 6288 and padded_blocks(AVX2, 25, 200) == 26
    assert padded_blocks(AVX2, 37, 128) == 38
    assert padded_blocks(AVX512, 3142, 128) == 3142 and padded_blocks(AVX512, 13, 200) == 13
    assert padded_blocks(AVX512, 63, 128) == 64 and padded_blocks(AVX512, 25, 200) == 26
    for machine in (AVX2, AVX512):
        assert padded_blocks(machine, 125, 8) == 125 and padded_blocks(machine, 125, 1) == 125
        assert padded_blocks(machine, 96, 128) == 96
    assert packed_tile(AVX2, padded_blocks(AVX2, 6283, 128), 128) == (3, 4)  # a multiple of 6: 3-block tiles
    assert packed_tile(AVX2, 26, 200) == (2, 5)
    assert packed_tile(AVX512, padded_blocks(AVX512, 3142, 128), 128) == (2, 8)
    assert packed_tile(AVX512, padded_blocks(AVX512, 13, 200), 200) == (1, 8)
    cpu_switch("dense_wide_tiles", "0")  # AVX2's widest tile 2 x 4: a multiple of 4
    assert widest_tile_blocks(AVX2) == 2 and padded_blocks(AVX2, 6283, 128) == 6284
    cpu_switch("dense_pad_blocks", "0")
    assert padded_blocks(AVX2, 6283, 128) == 6283


def test_few_rows_take_one_tile(cpu_switch):
    """Where four weight streams would leave tiles one row tall, every row is in one tile of two or more
    whose step reads two cache lines of weight (BERT's 768 x 3072 at 5 and 7 rows: 3 x 5, 2 x 7 with
    AVX-512; AVX2's 3 rows keep 4 x 1); 6 and 8 rows keep 4 x 3 and 4 x 4. AVX2 at 5 and 7 rows (8
    accumulators) pads the rows by one for 4 x 2 tiles. GPT-2's head (2 x 1571 blocks of 16) keeps its
    7 rows with AVX-512; with AVX2 (61 x 103 blocks of 8) it gets one block more where that makes
    4-block tiles. A GEMV and 2-4 rows keep four weight streams. The switch ``dense_few_rows`` off: the
    former tiles, never padded."""
    expect = {1: (4, 1), 2: (4, 2), 3: (4, 3), 4: (4, 4), 5: (3, 5), 6: (4, 3), 7: (2, 7), 8: (4, 4)}
    for rows, tile in expect.items():
        assert computed_rows(AVX512, 192, rows) == rows and packed_tile(AVX512, 192, rows) == tile, rows
    # AVX2's 2 x 3 reads 16 floats a step, under MIN_STEP_FLOATS: 3 rows keep 4 x 1, unpadded
    assert packed_tile(AVX2, 384, 3) == (4, 1) and packed_tile(AVX2, 384, 4) == (4, 2)
    assert computed_rows(AVX2, 384, 5) == 6 and computed_rows(AVX2, 384, 7) == 8
    assert packed_tile(AVX2, 384, 6) == packed_tile(AVX2, 384, 8) == (4, 2)
    assert computed_rows(AVX2, 384, 3) == 3 and computed_rows(AVX2, 384, 9) == 12
    assert padded_blocks(AVX512, 3142, 7) == 3142 and computed_rows(AVX512, 3142, 7) == 7
    assert packed_tile(AVX512, 3142, 7) == (2, 7)
    # AVX2's head: one block more for 4-block tiles (1 row: 4 x 1; 5, 7: padded to 6, 8 in 4 x 2), not
    # at 2 or 3 rows (1 x 3 kept); with AVX-512 23 blocks of 16 go to 24 for 3 x 5 at 5 rows
    assert [padded_blocks(AVX2, 6283, r) for r in (1, 2, 3, 5, 7, 12)] == [6284, 6283, 6283, 6284, 6284, 6284]
    assert computed_rows(AVX2, 6284, 7) == 8 and packed_tile(AVX2, 6284, 8) == (4, 2)
    assert packed_tile(AVX2, 6284, 1) == (4, 1) and packed_tile(AVX2, 6283, 3) == (1, 3)
    assert padded_blocks(AVX512, 23, 5) == 24 and packed_tile(AVX512, 24, 5) == (3, 5)
    assert padded_blocks(AVX512, 23, 3) == 23
    assert padded_blocks(AVX2, 125, 7) == 125 and computed_rows(AVX2, 125, 7) == 7  # 5 x 1 either way
    assert computed_rows(AVX512, 125, 7) == 8 and packed_tile(AVX512, 125, 8) == (5, 2)
    cpu_switch("dense_few_rows", "0")  # the former tiles: the streams first, then the rows dividing them
    assert packed_tile(AVX512, 192, 7) == (4, 1) and packed_tile(AVX512, 192, 6) == (4, 3)
    assert computed_rows(AVX2, 384, 7) == 7 and packed_tile(AVX2, 384, 3) == (4, 1)
    assert padded_blocks(AVX2, 6283, 7) == 6283 and computed_rows(AVX512, 125, 7) == 7


@pytest.mark.parametrize("target, k, n, rows, computed, blocks, tile", [
    ("llvm -mcpu=znver5", 768, 3072, 7, 7, None, (2, 7)),
    ("llvm -mcpu=znver5", 768, 3072, 5, 5, None, (3, 5)),
    ("llvm -mcpu=haswell", 768, 3072, 7, 8, None, (4, 2)),
    ("llvm -mcpu=haswell", 768, 3072, 5, 6, None, (4, 2)),
    ("llvm -mcpu=haswell", 768, 3072, 3, 3, None, (4, 1)),
    ("llvm -mcpu=znver5", 64, 50257, 7, 7, None, (2, 7)),  # GPT-2's head, a shallow weight
    ("llvm -mcpu=haswell", 64, 50257, 7, 8, 6284, (4, 2)),
    ("llvm -mcpu=haswell", 64, 50257, 3, 3, None, (1, 3)),
])
def test_rows_computed_for_the_targets_tiles(tmp_path, group_of, target, k, n, rows, computed, blocks, tile):
    """The layout pass gives ``dense_packed`` the rows of ``computed_rows`` and the blocks of
    ``padded_blocks`` for the target (its ``padded_rows`` and ``blocks`` where more than the data's and
    the weight's), and the fallback tile holds them."""
    path = str(tmp_path / "gemm.onnx")
    _model(path, 1, rows, k, n, "bias")
    graph, tgt, *_ = optimized_graph(path, target)
    (node,) = [n for n in graph.nodes if n.op == "dense_packed"]
    assert node.attrs.get("padded_rows") == (computed if computed != rows else None), node.attrs
    assert node.attrs.get("blocks") == blocks, node.attrs
    fallback = dense_packed_template(tgt, group_of(graph, "dense_packed")).fallback
    assert (fallback["jb"], fallback["mb"]) == tile, fallback


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"], ids=["host", "avx2"])
@pytest.mark.parametrize("rows, k, n", [(3, 96, 768), (5, 96, 768), (6, 96, 768), (7, 96, 768),
                                        (7, 96, 400), (5, 64, 50257), (1, 64, 50257)])
def test_few_rows_match_numpy(tmp_path, target, rows, k, n):
    """Odd row counts in one tile, padded by one row (AVX2) or in tiles of one weight block (400
    outputs: 25 blocks of 16, 50 of 8); GPT-2's 50257 outputs (3142 blocks of 16; 6283 of 8, one more
    computed at 1 and 5 rows, those 5 rows padded to 6) against numpy."""
    path = str(tmp_path / "gemm.onnx")
    _model(path, 1, rows, k, n, "bias")
    model = onnx.load(path)
    w, b = (numpy_helper.to_array(t) for t in model.graph.initializer)
    x = np.random.default_rng(rows).standard_normal((1, rows, k)).astype(np.float32)
    want = x.astype(np.float64) @ w + b
    got = nnvm.compile(path, target=target, tuning_log=False).run(x)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert got.shape == want.shape and err < 1e-5, f"{rows} rows x {n}: max relative error {err:.2e}"

"""``dense_packed``'s one parallel loop (``build_dense_packed``): a shared weight whose tiles of outputs
the pool's chunks share evenly (a multiple of ``EVEN_CHUNKS``) is parallel over them alone (each
thread's row tiles read one panel in turn); otherwise its tiles of rows join the parallel loop (ViT's
192 outputs: 3 tiles; BERT's 768: 12). Attention's batched products are parallel over batch x heads x
row tiles, never one region per head. Every case against onnxruntime too: S=7 and 197 (padded rows),
D=13 and 64, ranks 3 and 4, fused epilogues."""

from __future__ import annotations

import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.cpu.schedule_dense import EVEN_CHUNKS


def _save(path, nodes, inits, shapes):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in shapes.items()]
    graph = helper.make_graph(nodes, "mm", ins, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(v, n) for n, v in inits.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _compile_and_check(tmp_path, path, shapes):
    """The dense_packed kernels' parallel loops as (loop name, extent, indent) and whether any of them
    sits inside a serial loop; the outputs checked against onnxruntime."""
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    dump = str(tmp_path / "ir")
    mod = nnvm.compile(path, target="llvm", tuning_log=False, dump_ir=dump)
    got = mod.run(*feeds.values())[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"max relative error {err:.2e} against onnxruntime"
    text = open(f"{dump}/kernels.tir.txt").read()
    kernels = [k for k in text.split("\n\n") if "dense_packed" in k.split("(")[0]]
    assert kernels, text[:500]
    loops = []
    for kernel in kernels:
        for line in kernel.splitlines():
            m = re.match(r"(\s*)for (\S+) in range\((\d+)\):\s*# parallel", line)
            if m:
                loops.append((m.group(2), int(m.group(3)), len(m.group(1))))
    return loops


@pytest.mark.parametrize("shape, blocks, fused_rows", [
    ((1, 197, 64), 3, True),       # 3 blocks: 1 tile of weight; rows 197 padded to 200 join in
    ((1, 7, 13), 12, True),        # S=7, K=13: 12 blocks in 3 tiles, its 7 rows (one tile) join in
    ((2, 5, 64), 4 * 12, True),    # 12 tiles of 4 blocks x 2 batches: 24, rows join in
    ((1, 9, 32), 4 * 16, False),   # 16 tiles of 4 blocks: parallel over them, rows inside
])
def test_shared_weight_parallel_loop(tmp_path, host, shape, blocks, fused_rows):
    """``blocks`` blocks of the host's vector width (16 lanes with AVX-512, 8 with AVX2)."""
    rng = np.random.default_rng(0)
    n = blocks * host.lanes
    k = shape[-1]
    path = str(tmp_path / "mm.onnx")
    inits = {"w": rng.standard_normal((k, n)).astype(np.float32),
             "b": rng.standard_normal(n).astype(np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    _save(path, nodes, inits, {"x": shape})
    loops = _compile_and_check(tmp_path, path, {"x": shape})
    assert len(loops) == 1 and loops[0][2] == 2, loops  # one parallel loop, outermost
    tiles = blocks // 4 if blocks % 4 == 0 else 1  # 4 blocks a tile where 4 divides them, else all 3
    if fused_rows:  # the row tiles multiply the weight tiles
        assert (tiles * shape[0]) % EVEN_CHUNKS and loops[0][1] > tiles * shape[0], loops
    else:
        assert loops[0][1] == tiles * shape[0], loops


@pytest.mark.parametrize("q, kv, scale", [
    ((1, 3, 197, 64), (1, 3, 197, 64), True),   # ViT: 3 heads, 197 tokens (13 blocks, the last partial)
    ((2, 4, 7, 13), (2, 4, 7, 13), False),      # S=7, D=13, batch 2
    ((5, 7, 64), (5, 7, 64), True),             # rank 3
])
def test_attention_parallel_over_heads_and_rows(tmp_path, q, kv, scale):
    """Q @ K^T (K transposed in the packing kernel), then scores @ V: both parallel over every batch axis
    and the row tiles in one loop."""
    path = str(tmp_path / "att.onnx")
    perm = list(range(len(kv) - 2)) + [len(kv) - 1, len(kv) - 2]
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=perm),
             helper.make_node("MatMul", ["q", "kt"], ["s"])]
    inits = {}
    if scale:
        inits["c"] = np.array(0.125, np.float32)
        nodes.append(helper.make_node("Mul", ["s", "c"], ["s2"]))
    nodes.append(helper.make_node("MatMul", ["s2" if scale else "s", "v"], ["y"]))
    shapes = {"q": q, "k": kv, "v": kv}
    _save(path, nodes, inits, shapes)
    loops = _compile_and_check(tmp_path, path, shapes)
    batch = int(np.prod(q[:-2]))
    assert len(loops) == 2 and all(indent == 2 for *_, indent in loops), loops
    assert all(extent >= batch * max(1, q[-2] // 8) for _, extent, _ in loops), loops

"""torch's ``nn.Linear`` on a [B, S, K] activation (``MatMul`` by a constant [K, N], then ``Add``) runs
as ``dense_packed`` over the [..., K] data as it is: ranks 3 and 4, batches above one, output counts no
block divides (a zero-padded last block, never read past), row counts no tile divides (padded rows
that read the last row again, cropped), a constant weight behind a ``Transpose``
(GPT-2's tied head) and a fused epilogue, against onnxruntime; attention's batched activation x activation
products run packed too, a broadcast right side stays a matmul."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm


def _model(path, in_shape, nodes, inits, inputs=("x",), shapes=None):
    shapes = shapes or {"x": in_shape}
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(shapes[n])) for n in inputs]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, n) for n, v in inits.items()]
    graph = helper.make_graph(nodes, "mm", ins, [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _run(path, shapes):
    rng = np.random.default_rng(1)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    got = mod.run(*feeds.values())[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{path}: max relative error {err:.2e} against onnxruntime"
    return [n.op for n in mod.graph.nodes]


@pytest.mark.parametrize("shape, n, epilogue, tied", [
    ((2, 5, 24), 48, "add", False),          # rank 3, blocks of 16, bias Add fused
    ((1, 7, 40), 37, "add_relu", False),     # 37 outputs: 3 blocks of 16, the last 11 real
    ((2, 3, 4, 16), 1000, "none", False),    # rank 4, 1000 outputs (blocks of 8)
    ((1, 9, 32), 1001, "none", True),        # x @ E^T, E [1001, 32] (a tied head): 63 blocks, 9 in the last
    ((3, 33, 20), 20, "gelu_like", False),   # 99 rows: no row block divides evenly into the accumulators
    ((1, 197, 24), 37, "gelu_like", False),  # ViT's 197 tokens (prime): rows padded to 200, a partial block
    ((2, 13, 16), 32, "add", False),         # 13 rows padded to 16 per batch, the pad rows cropped
])
def test_linear_on_nd_activation_matches_onnxruntime(tmp_path, shape, n, epilogue, tied):
    rng = np.random.default_rng(0)
    k = shape[-1]
    path = str(tmp_path / "mm.onnx")
    if tied:
        inits = {"e": rng.standard_normal((n, k)).astype(np.float32)}
        nodes = [helper.make_node("Transpose", ["e"], ["w"], perm=[1, 0])]
    else:
        inits = {"w": rng.standard_normal((k, n)).astype(np.float32)}
        nodes = []
    nodes.append(helper.make_node("MatMul", ["x", "w"], ["mm"]))
    last = "mm"
    if epilogue != "none":
        inits["b"] = rng.standard_normal(n).astype(np.float32)
        nodes.append(helper.make_node("Add", ["mm", "b"], ["g"]))
        last = "g"
    if epilogue == "add_relu":
        nodes.append(helper.make_node("Relu", [last], ["r"]))
        last = "r"
    if epilogue == "gelu_like":
        nodes += [helper.make_node("Tanh", [last], ["t"]), helper.make_node("Mul", [last, "t"], ["r"])]
        last = "r"
    nodes.append(helper.make_node("Identity", [last], ["y"]))
    _model(path, shape, nodes, inits)
    ops = _run(path, {"x": shape})
    assert "dense_packed" in ops and "matmul" not in ops, ops


@pytest.mark.parametrize("q, k, transposed, scale", [
    ((2, 3, 8, 16), (2, 3, 16, 8), False, False),    # rank 4, every size a whole block
    ((1, 3, 197, 64), (1, 3, 197, 64), True, True),  # ViT: Q @ K^T over 197 tokens (prime), scaled
    ((4, 7, 13), (4, 13, 7), False, True),           # rank 3, S=7 and D=13: one padded block, odd K
    ((2, 2, 7, 7), (2, 2, 7, 13), False, False),     # softmax @ V with D=13 (blocks of 4, last padded)
])
def test_attention_batched_matmul_matches_onnxruntime(tmp_path, q, k, transposed, scale):
    """Attention's activation x activation products run as dense_packed over the right side packed per
    batch and head (a Transpose in front of it read in the same packing kernel); a fused scale."""
    path = str(tmp_path / "qk.onnx")
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2])] if transposed else []
    nodes.append(helper.make_node("MatMul", ["q", "kt" if transposed else "k"], ["s"]))
    inits = {}
    if scale:
        inits["c"] = np.array(0.125, np.float32)
        nodes.append(helper.make_node("Mul", ["s", "c"], ["y"]))
    else:
        nodes[-1].output[0] = "y"
    shapes = {"q": q, "k": k}
    _model(path, None, nodes, inits, inputs=("q", "k"), shapes=shapes)
    ops = _run(path, shapes)
    assert "dense_packed" in ops and "matmul" not in ops, ops


def test_broadcast_batch_matmul_stays_a_matmul(tmp_path):
    """A right side broadcast over the batch (one [H, K, N] for every batch) is the generic matmul."""
    path = str(tmp_path / "bc.onnx")
    shapes = {"q": (2, 3, 8, 16), "k": (3, 16, 8)}
    _model(path, None, [helper.make_node("MatMul", ["q", "k"], ["y"])], {}, inputs=("q", "k"), shapes=shapes)
    ops = _run(path, shapes)
    assert "matmul" in ops and "dense_packed" not in ops, ops


def test_constant_batched_right_side_is_packed_at_compile_time(tmp_path):
    """A batched right side made of weights is packed once by ``batched_weight_pack``'s numpy evaluation (13
    columns: blocks of 4, the last one repeating column 12), and matches onnxruntime."""
    path = str(tmp_path / "cb.onnx")
    w = np.random.default_rng(3).standard_normal((2, 16, 13)).astype(np.float32)
    _model(path, (2, 5, 16), [helper.make_node("MatMul", ["x", "w"], ["y"])], {"w": w})
    ops = _run(path, {"x": (2, 5, 16)})
    assert "dense_packed" in ops and "matmul" not in ops and "batched_weight_pack" not in ops, ops

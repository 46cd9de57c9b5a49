"""A batch's first layers one image at a time (``slice_batch``, ``nnvm/cpu/batch_slices.py``).

A small CNN with a residual block, a depthwise layer, 20 output channels (a padded last block, its
transform back to NCHW cropping) and a classifier is compiled at batch 3 with the cut forced (every
activation "large") and compared with onnxruntime; then where the cut falls (one tensor crossing, never
inside the residual block, never past an operator that mixes images) and where nothing is sliced.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph
from nnvm.cpu import batch_slices


def _cnn(path, batch, hw=16, flatten_first=False):
    """conv 3 -> 16 (relu) -> [depthwise 3x3 -> relu -> conv 16 -> 16, + the block input] -> conv 16 -> 20
    -> global average pool -> flatten -> dense to 10; ``flatten_first``: a Reshape mixing the batch
    with the channels (to [1, batch * 3, hw, hw]) ahead of it all."""
    rng = np.random.default_rng(batch)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(np.prod(shape[1:]))).astype(
            np.float32), name)

    inits = [w("w0", 16, 3, 3, 3), w("b0", 16, 1), w("wd", 16, 1, 3, 3), w("w1", 16, 16, 1, 1),
             w("w2", 20, 16, 3, 3), w("wf", 20, 10)]
    inits[1] = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b0")
    nodes = []
    src = "x"
    if flatten_first:
        inits.append(numpy_helper.from_array(np.array([batch, 3, hw, hw], np.int64), "s0"))
        inits.append(numpy_helper.from_array(np.array([1, batch * 3, hw, hw], np.int64), "s1"))
        nodes += [helper.make_node("Reshape", ["x", "s1"], ["xm"]), helper.make_node("Relu", ["xm"], ["xr"]),
                  helper.make_node("Reshape", ["xr", "s0"], ["xb"])]
        src = "xb"
    nodes += [helper.make_node("Conv", [src, "w0", "b0"], ["c0"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c0"], ["r0"]),
              helper.make_node("Conv", ["r0", "wd"], ["cd"], pads=[1, 1, 1, 1], group=16),
              helper.make_node("Relu", ["cd"], ["rd"]),
              helper.make_node("Conv", ["rd", "w1"], ["c1"]),
              helper.make_node("Add", ["c1", "r0"], ["a"]),
              helper.make_node("Conv", ["a", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
              helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
              helper.make_node("Flatten", ["p"], ["f"]),
              helper.make_node("MatMul", ["f", "wf"], ["y"])]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                           [batch, 3, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path, {"x": rng.standard_normal((batch, 3, hw, hw)).astype(np.float32)}


def _sliced(graph):
    """(images the graph's first layers run for, the shape of the tensor at the cut) or None."""
    cat = [n for n in graph.nodes if n.op == "concatenate" and n.attrs.get("axis") == 0]
    if not cat:
        return None
    return len(cat[0].inputs), graph.types[cat[0].outputs[0]].shape


@pytest.fixture
def every_activation_large(monkeypatch):
    monkeypatch.setattr(batch_slices, "CACHE_MULTIPLE", 0)


@pytest.mark.parametrize("batch", [2, 3])
def test_sliced_batch_matches_onnxruntime(tmp_path, every_activation_large, batch):
    path, feeds = _cnn(str(tmp_path / "cnn.onnx"), batch)
    graph, *_ = optimized_graph(path, "llvm")
    images, cut = _sliced(graph)
    # every activation large: the cut is where the per-image operators end, after the average pool (the
    # flatten is a reshape, which may mix images in general, and the product's rows are the images)
    assert images == batch and tuple(cut) == (batch, 20, 1, 1)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(**feeds)[0]
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"batch {batch}: max relative error {err:.2e}"


def test_the_cut_crosses_one_tensor_past_the_large_activations(tmp_path):
    """With a limit between the sizes, the cut is the first one-tensor cut after the last large
    activation: inside the residual block two tensors cross (its input and its branch), so not there."""
    path, _ = _cnn(str(tmp_path / "cnn.onnx"), 4)
    graph, *_ = optimized_graph(path, "llvm", disabled_passes=("slice_batch", "fuse_ops"))
    names = [n.name for n in graph.nodes]
    big = 4 * 16 * 16 * 16 * 4  # the 16-channel activations at batch 4
    cut = batch_slices.batch_cut(graph, big - 1)
    assert cut is not None
    assert batch_slices.batch_cut(graph, 10 ** 9) is None  # nothing large: nothing sliced
    consumers = graph.consumers()
    crossing = {o for n in graph.nodes[:cut] for o in n.outputs
                if any(names.index(c.name) >= cut for c in consumers.get(o, ()))}
    assert len(crossing) == 1
    assert all(graph.types[o].shape[0] == 4 for o in crossing)


def test_nothing_sliced_at_batch_1_past_a_batch_mixing_reshape_or_when_switched_off(tmp_path, monkeypatch,
                                                                                    every_activation_large):
    path, _ = _cnn(str(tmp_path / "one.onnx"), 1)
    assert _sliced(optimized_graph(path, "llvm")[0]) is None
    path, _ = _cnn(str(tmp_path / "mixed.onnx"), 3, flatten_first=True)
    assert _sliced(optimized_graph(path, "llvm")[0]) is None
    path, _ = _cnn(str(tmp_path / "cnn.onnx"), 3)
    monkeypatch.setenv("NNVM_X86_BATCH_SLICES", "0")
    assert _sliced(optimized_graph(path, "llvm")[0]) is None

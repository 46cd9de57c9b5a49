"""Patch embeddings (convolutions whose stride is their kernel) as ``dense_packed`` over ``patches``.

ViT's 16x16/16 convolution over 3 channels runs as a product of its windows' rows by the packed weight
(``nnvm/cpu/patches.py``). These compare with onnxruntime over windows that do not divide the input
(the rest cropped), an output count no vector divides, no bias, non-square kernels, batches, the
output read as ViT reads it (flattened, transposed) and as a graph output; then check which
convolutions take the rewrite and that ``cpu_switches={"patch_dense": "0"}`` keeps them blocked.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.compiler import optimized_graph


def _model(path, batch, c, hw, oc, kernel, stride=None, bias=True, tokens=False, pads=(0, 0, 0, 0)):
    """A Conv of ``batch x c x hw`` to ``oc`` channels; with ``tokens`` its output flattened and
    transposed to ``[batch, pixels, oc]`` as ViT does, then ``+ 1`` so the graph's output is computed."""
    rng = np.random.default_rng(c * 31 + oc)
    weight = (rng.standard_normal((oc, c, *kernel)) / np.sqrt(c * kernel[0] * kernel[1])).astype(np.float32)
    inits = [numpy_helper.from_array(weight, "w")]
    conv_inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(oc).astype(np.float32), "b"))
        conv_inputs.append("b")
    nodes = [helper.make_node("Conv", conv_inputs, ["c" if tokens else "y"], kernel_shape=list(kernel),
                              strides=list(stride or kernel), pads=list(pads))]
    if tokens:
        inits.append(numpy_helper.from_array(np.array([batch, oc, -1], np.int64), "shape"))
        inits.append(numpy_helper.from_array(np.ones((), np.float32), "one"))
        nodes += [helper.make_node("Reshape", ["c", "shape"], ["f"]),
                  helper.make_node("Transpose", ["f"], ["t"], perm=[0, 2, 1]),
                  helper.make_node("Add", ["t", "one"], ["y"])]
    graph = helper.make_graph(nodes, "patch", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                             [batch, c, *hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    return path, {"x": rng.standard_normal((batch, c, *hw)).astype(np.float32)}


def _ops(path, target="llvm"):
    graph, *_ = optimized_graph(path, target)
    return {n.op for n in graph.nodes}


# (batch, channels, input h x w, output channels, kernel, bias, tokens): ViT-tiny's embedding at a
# quarter of its size; a remainder of rows and columns no window covers; 100 outputs (a partial last
# block); no bias; a 4 x 2 kernel; batch 3; the output a graph output
CASES = [(1, 3, (64, 64), 192, (16, 16), True, True), (1, 3, (30, 37), 48, (8, 8), True, True),
         (2, 3, (32, 32), 100, (4, 4), True, False), (1, 3, (32, 32), 64, (4, 4), False, True),
         (3, 1, (16, 12), 24, (4, 2), True, False), (1, 2, (28, 28), 96, (2, 2), True, False)]


IDS = [f"b{c[0]}c{c[1]}-{c[2][0]}x{c[2][1]}-o{c[3]}-k{c[4][0]}x{c[4][1]}" for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_patch_embedding_matches_onnxruntime(tmp_path, case):
    batch, c, hw, oc, kernel, bias, tokens = case
    path, feeds = _model(str(tmp_path / "p.onnx"), batch, c, hw, oc, kernel, bias=bias, tokens=tokens)
    assert {"patches", "dense_packed"} <= _ops(path) and "conv2d_nchwc" not in _ops(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(**feeds)[0]
    assert got.shape == want.shape
    err = float(np.abs(got - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{case}: max relative error {err:.2e}"


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"],
                         ids=["avx2", "avx512"])
def test_patch_embedding_at_either_vector_width(tmp_path, target):
    """ViT-tiny's embedding (3 -> 192, 16x16/16 on 224x224) is rewritten and compiles at 8 and 16 lanes."""
    path, _ = _model(str(tmp_path / "p.onnx"), 1, 3, (224, 224), 192, (16, 16), tokens=True)
    assert "patches" in _ops(path, target)
    assert nnvm.compile(path, target=target, tuning_log=False) is not None


def test_only_non_overlapping_windows_over_few_channels(tmp_path, cpu_switch):
    """Overlapping windows (stride under the kernel), padding, 1x1 kernels and inputs with a channel
    block (their blocked convolution already runs vectors of input channels) stay ``conv2d_nchwc``; so
    does a patch embedding with ``cpu_switches={"patch_dense": "0"}``."""
    kept = [dict(c=3, hw=(32, 32), oc=64, kernel=(4, 4), stride=(2, 2)),
            dict(c=3, hw=(32, 32), oc=64, kernel=(4, 4), pads=(1, 1, 1, 1)),
            dict(c=3, hw=(32, 32), oc=64, kernel=(1, 1)),
            dict(c=96, hw=(28, 28), oc=192, kernel=(2, 2))]
    for k, spec in enumerate(kept):
        path, _ = _model(str(tmp_path / f"k{k}.onnx"), 1, **spec)
        ops = _ops(path)
        assert "conv2d_nchwc" in ops and "patches" not in ops, spec
    path, _ = _model(str(tmp_path / "p.onnx"), 1, 3, (32, 32), 64, (4, 4))
    cpu_switch("patch_dense", "0")
    assert "patches" not in _ops(path) and "conv2d_nchwc" in _ops(path)

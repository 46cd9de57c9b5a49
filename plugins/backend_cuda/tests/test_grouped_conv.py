"""A grouped (not depthwise) convolution fits a block's 48 KiB of shared memory: found on the H200, where
ShuffleNet's 544-channel 1x1s with 4 groups asked ptxas for 104 KiB (an input tile spanning every
group's channels) and NVRTC refused the model. NVRTC reports it without a GPU, so this runs anywhere."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm_backend_cuda.compiler import MAX_STATIC_SHARED


def _grouped_conv(channels: int, groups: int, size: int, kernel: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, channels // groups, kernel, kernel)).astype("float32")
    node = helper.make_node("Conv", ["x", "w"], ["y"], group=groups, pads=[kernel // 2] * 4)
    graph = helper.make_graph([node], "grouped", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, channels, size, size])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, channels, size, size])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # readable by every onnxruntime from 1.12 on
    return model


@pytest.mark.parametrize(("channels", "groups", "size", "kernel"), [(544, 4, 7, 1), (272, 4, 14, 1),
                                                                   (96, 3, 8, 3)])
def test_grouped_conv_fits_shared_memory_and_matches_onnxruntime(tmp_path, channels, groups, size, kernel):
    path = str(tmp_path / "grouped.onnx")
    onnx.save(_grouped_conv(channels, groups, size, kernel), path)
    mod = nnvm.compile(path, target="cuda -arch=sm_90")
    shared = {k: u["shared_bytes"] for k, u in mod.stats()["cuda_kernels"].items()}
    assert shared and max(shared.values()) <= MAX_STATIC_SHARED, shared
    x = np.random.default_rng(1).standard_normal((1, channels, size, size)).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = mod.run(x)[0]
    assert np.max(np.abs(got - want)) <= 1e-4 * np.max(np.abs(want))

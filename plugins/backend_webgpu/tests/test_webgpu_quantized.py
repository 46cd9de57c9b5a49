"""QDQ int8 models on ``webgpu`` (lavapipe here) against onnxruntime's int8 execution of the same file:
within one output quantization step, the same top-1 (issue 40). WGSL has no 8-bit type: uint8 tensors
are packed four to a word, which is what these exercise (a max pool accumulating in its packed output
was wrong before)."""

from __future__ import annotations

import pytest

import nnvm
from nnvm_testing.frontend_onnx.quantized import check_within_one_step, quantized_model_path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_qdq_model_matches_onnxruntime_int8(name):
    path = quantized_model_path(name, "qdq")
    check_within_one_step(path, nnvm.compile(path, target="webgpu"), f"QDQ {name} on webgpu")

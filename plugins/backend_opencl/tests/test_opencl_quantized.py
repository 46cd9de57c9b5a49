"""QDQ int8 models on ``opencl`` (PoCL's CPU device here) against onnxruntime's int8 execution of the same
file: within one output quantization step, the same top-1 (issue 40). The 8-bit convolutions and dense
layers take the tiled GPU schedules (shared memory, like the float ones): checked in the source."""

from __future__ import annotations

import pytest

import nnvm
from nnvm_testing.frontend_onnx.quantized import check_within_one_step, quantized_model_path


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_qdq_model_matches_onnxruntime_int8(name):
    path = quantized_model_path(name, "qdq")
    mod = nnvm.compile(path, target="opencl -device=cpu")
    source = mod.library.source()
    assert "__local uchar " in source, "no 8-bit tile in local memory: qconv2d took the generic schedule"
    check_within_one_step(path, mod, f"QDQ {name} on opencl")

"""RoiAlign (``convert_roi``) with boxes partly outside the image, several images and channels, a spatial
scale and both coordinate modes, against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnvm

NNVM_PLUGINS = "onnx,llvm-x86"


def _model(**attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12, 9]),
              helper.make_tensor_value_info("rois", TensorProto.FLOAT, [5, 4]),
              helper.make_tensor_value_info("batch", TensorProto.INT64, [5])]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", inputs, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align_matches_onnxruntime(mode, transform):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 12, 9)).astype(np.float32)
    rois = np.array([[0, 0, 8, 11], [2.5, 1.2, 6.1, 7.7], [-3, -2, 4, 5], [10, 14, 30, 40], [5, 3, 5.2, 3.1]],
                    np.float32) * 2  # spatial_scale 0.5 maps them back; two reach outside the image
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    model = _model(mode=mode, coordinate_transformation_mode=transform, output_height=3, output_width=4,
                   sampling_ratio=3, spatial_scale=0.5)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x, "rois": rois, "batch": batch})
    (got,) = nnvm.compile(model, target="llvm").run(x, rois, batch)
    assert got.shape == want.shape == (5, 3, 3, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_adaptive_sampling_ratio_is_one_sentence():
    with pytest.raises(nnvm.Error, match=r"\(RoiAlign, opset 16\): sampling_ratio 0 \(a grid sized per box"):
        nnvm.compile(_model(output_height=2, output_width=2, sampling_ratio=0), target="llvm")

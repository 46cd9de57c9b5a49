"""RoiAlign, DeformConv (``convert_sampling``) and 3-D ConvTranspose in forms ONNX's node tests leave out,
against onnxruntime:
RoiAlign with boxes partly outside the image, several images and channels, a spatial scale and both
coordinate modes; DeformConv with groups, offset groups, strides, dilations, uneven pads, a mask and a
bias, and offsets that move taps outside the image."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnvm

NNVM_PLUGINS = "onnx,llvm-x86"


def _model(node, inputs: dict, opset: int):
    infos = [helper.make_tensor_value_info(name, dtype, shape) for name, (dtype, shape) in inputs.items()]
    output = helper.make_tensor_value_info(node.output[0], TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "g", infos, [output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _compare(model, feeds: dict, shape: tuple):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, feeds)
    (got,) = nnvm.compile(model, target="llvm").run(**feeds)
    assert got.shape == want.shape == shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _roi_model(**attrs):
    node = helper.make_node("RoiAlign", ["x", "rois", "batch"], ["y"], **attrs)
    return _model(node, {"x": (TensorProto.FLOAT, [2, 3, 12, 9]), "rois": (TensorProto.FLOAT, [5, 4]),
                         "batch": (TensorProto.INT64, [5])}, 16)


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
def test_roi_align_matches_onnxruntime(mode, transform):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 12, 9)).astype(np.float32)
    rois = np.array([[0, 0, 8, 11], [2.5, 1.2, 6.1, 7.7], [-3, -2, 4, 5], [10, 14, 30, 40], [5, 3, 5.2, 3.1]],
                    np.float32) * 2  # spatial_scale 0.5 maps them back; two reach outside the image
    batch = np.array([0, 1, 1, 0, 1], np.int64)
    model = _roi_model(mode=mode, coordinate_transformation_mode=transform, output_height=3, output_width=4,
                       sampling_ratio=3, spatial_scale=0.5)
    _compare(model, {"x": x, "rois": rois, "batch": batch}, (5, 3, 3, 4))


def test_roi_align_adaptive_sampling_ratio_is_one_sentence():
    with pytest.raises(nnvm.Error, match=r"\(RoiAlign, opset 16\): sampling_ratio 0 \(a grid sized per box"):
        nnvm.compile(_roi_model(output_height=2, output_width=2, sampling_ratio=0), target="llvm")


@pytest.mark.parametrize("with_mask", [True, False], ids=["mask-bias", "plain"])
def test_deform_conv_matches_onnxruntime(with_mask):
    h, w, oh, ow = 9, 8, 4, 7  # strides (2, 1), dilations (1, 2), pads (1, 2, 0, 1), 3x3 kernel
    names = ["x", "w", "off"] + (["b", "m"] if with_mask else [])
    node = helper.make_node("DeformConv", names, ["y"], kernel_shape=[3, 3], group=2, offset_group=2,
                            strides=[2, 1], dilations=[1, 2], pads=[1, 2, 0, 1])
    inputs = {"x": [2, 4, h, w], "w": [6, 2, 3, 3], "off": [2, 36, oh, ow], "b": [6], "m": [2, 18, oh, ow]}
    model = _model(node, {k: (TensorProto.FLOAT, inputs[k]) for k in names}, 19)
    rng = np.random.default_rng(5)
    feeds = {k: rng.standard_normal(inputs[k]).astype(np.float32) for k in names}
    feeds["off"] *= 2.5  # several taps land outside the image or between pixels
    _compare(model, feeds, (2, 6, oh, ow))


@pytest.mark.parametrize("attrs", [
    dict(strides=[2, 1, 2], dilations=[2, 1, 1], pads=[1, 0, 2, 0, 1, 1], output_padding=[1, 0, 1], group=2),
    dict(strides=[3, 2, 1], auto_pad="SAME_UPPER", group=1),
    dict(strides=[2, 2, 2], output_shape=[8, 9, 10], group=2),
    dict(pads=[3, 1, 1, 1, 1, 1], group=1),  # the depth padding crops a whole tap away
], ids=["strided-dilated-padded", "same-upper", "output-shape", "deep-crop"])
def test_conv_transpose_3d_matches_onnxruntime(attrs):
    """ConvTranspose 3-D (``convert_nn._conv_transpose_3d``, 2-D per depth tap), which ONNX's node tests
    cover with one unpadded case."""
    names = ["x", "w", "b"]
    node = helper.make_node("ConvTranspose", names, ["y"], kernel_shape=[3, 2, 3], **attrs)
    c, m = 4, 6 // attrs["group"]
    inputs = {"x": [2, c, 3, 4, 5], "w": [c, m, 3, 2, 3], "b": [m * attrs["group"]]}
    model = _model(node, {k: (TensorProto.FLOAT, inputs[k]) for k in names}, 17)
    rng = np.random.default_rng(11)
    feeds = {k: rng.standard_normal(inputs[k]).astype(np.float32) for k in names}
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    shape = sess.run(None, feeds)[0].shape
    _compare(model, feeds, shape)

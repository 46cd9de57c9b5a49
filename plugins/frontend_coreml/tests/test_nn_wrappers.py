"""NeuralNetwork wrappers and inputs, from hand-built specs: a classifier (its probabilities are the
output), an image input with its scale and channel biases (BGR order), and a legacy (C, H, W) input."""

from __future__ import annotations

import numpy as np

import nnvm
from nnvm_frontend_coreml.reader import proto


def _spec(kind: str, version: int = 4):
    spec = proto().Model(specificationVersion=version)
    return spec, getattr(spec, kind)


def test_classifier_outputs_probabilities():
    spec, nn = _spec("neuralNetworkClassifier")
    inp = spec.description.input.add(name="x")
    inp.type.multiArrayType.shape.extend([1, 4])
    spec.description.output.add(name="probs").type.dictionaryType.stringKeyType.SetInParent()
    spec.description.output.add(name="label").type.stringType.SetInParent()
    spec.description.predictedFeatureName = "label"
    spec.description.predictedProbabilitiesName = "probs"
    nn.arrayInputShapeMapping = 1
    nn.stringClassLabels.vector.extend(["a", "b", "c", "d"])
    nn.layers.add(name="sm", input=["x"], output=["probs"]).softmaxND.axis = -1
    nn.labelProbabilityLayerName = "probs"
    x = np.array([[0.5, -1.0, 2.0, 0.0]], np.float32)
    (y,) = nnvm.compile(spec, target="llvm").run(x)
    e = np.exp(x - x.max())
    np.testing.assert_allclose(y, e / e.sum(), rtol=1e-6)


def test_image_input_preprocessing_bgr():
    spec, nn = _spec("neuralNetwork")
    img = spec.description.input.add(name="image").type.imageType
    img.width, img.height, img.colorSpace = 5, 4, 30  # BGR
    spec.description.output.add(name="y")
    scaler = nn.preprocessing.add(featureName="image").scaler
    scaler.channelScale, scaler.blueBias, scaler.greenBias, scaler.redBias = 1 / 255, -0.1, -0.2, -0.3
    nn.layers.add(name="id", input=["image"], output=["y"]).activation.linear.alpha = 1.0
    x = np.random.default_rng(0).integers(0, 256, (1, 3, 4, 5)).astype(np.float32)  # B, G, R planes
    (y,) = nnvm.compile(spec, target="llvm").run(x)
    want = x / 255 + np.array([-0.1, -0.2, -0.3], np.float32).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


def test_legacy_rank5_input_mapping():
    """A (C, H, W) input of an old model is batch 1, NCHW; channel softmax runs over C."""
    spec, nn = _spec("neuralNetwork", version=1)
    spec.description.input.add(name="x").type.multiArrayType.shape.extend([3, 2, 2])
    spec.description.output.add(name="y")
    nn.layers.add(name="sm", input=["x"], output=["y"]).softmax.SetInParent()
    x = np.random.default_rng(1).standard_normal((1, 3, 2, 2)).astype(np.float32)
    (y,) = nnvm.compile(spec, target="llvm").run(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6)

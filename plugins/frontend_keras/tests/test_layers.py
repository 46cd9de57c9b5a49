"""Per-layer attribute variants against Keras 3 itself: each small model is built and run by Keras (JAX
backend, cached venv), saved as ``.keras`` and ``.h5``; both files must import to the same graph, which
must match Keras's prediction for the same NHWC input (max relative error 1e-4)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing import frontend_keras as testing
from nnvm_testing.venvs import pytest_venv

CASES = ["conv_same_even", "conv_same_odd_stride3", "conv_dilated_groups", "depthwise_mult", "separable",
         "pool_same_even", "avgpool_same", "pool_valid_global", "global_keepdims", "batchnorm_flags",
         "pad_crop", "hard_sigmoid", "activations", "dense_4d_reshape", "norms", "branches", "nested",
         "ops_nodes", *testing.EXTRA_CASES]


@pytest.fixture(scope="module")
def models():
    return pytest_venv(testing.keras_models, CASES)


@pytest.mark.parametrize("name", CASES)
def test_layer_case_matches_keras(models, name):
    m = models[name]
    graph, _ = nnvm.load_model(str(m.keras))
    graph_h5, _ = nnvm.load_model(str(m.h5))
    assert testing.graph_digest(graph) == testing.graph_digest(graph_h5), \
        f"{name}: the .keras and .h5 files import to different graphs"
    x, want = np.load(m.input), np.load(m.output)
    (got,) = nnvm.compile(graph, target="llvm").run(x)
    assert got.shape == want.shape
    err = testing.max_rel_err(got, want)
    assert err < 1e-4, f"{name}: max relative error {err:.2e} vs Keras"


def test_hard_sigmoid_follows_the_keras_version(models):
    """Keras 3's hard_sigmoid is relu6(x + 3) / 6, Keras 2's 0.2 x + 0.5: the file's keras_version picks."""
    from nnvm_frontend_keras.importer import load_keras
    from nnvm_frontend_keras.reader import read_model

    km = read_model(str(models["hard_sigmoid"].h5))
    assert km.major == 3
    attrs = [n.attrs for n in load_keras(str(models["hard_sigmoid"].h5)).nodes if n.op == "hard_sigmoid"]
    assert [a["alpha"] for a in attrs] == [pytest.approx(1 / 6)]

    import nnvm_frontend_keras.importer as importer

    km.keras_version = "2.15.0"
    orig = importer.read_model
    importer.read_model = lambda model: km
    try:
        graph = load_keras("unused")
    finally:
        importer.read_model = orig
    x = np.linspace(-4, 4, 9 * 9 * 4, dtype=np.float32).reshape(1, 9, 9, 4)
    (got,) = nnvm.compile(graph, target="llvm").run(x)
    # The model is Conv2D(1x1) then hard_sigmoid: recompute in numpy with Keras 2's formula.
    ((w, b),) = [v for v in km.weights.values() if len(v) == 2]
    want = np.clip(0.2 * (x @ w[0, 0] + b) + 0.5, 0, 1)
    assert np.abs(got - want).max() < 1e-5


def test_no_transposes_between_convolutions(models):
    """NHWC in, NCHW inside: a chain of convolutions, pooling and activations holds one transpose at each
    edge and none between the layers."""
    graph, _ = nnvm.load_model(str(models["activations"].keras))
    assert [n.op for n in graph.nodes].count("transpose") == 2
    graph, _ = nnvm.load_model(str(models["separable"].keras))
    assert [n.op for n in graph.nodes].count("transpose") == 2

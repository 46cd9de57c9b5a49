"""The nine keras.applications nets (``weights=None``, random weights and BatchNorm statistics, small
inputs), built and run by Keras 3 itself, saved as ``.keras`` and ``.h5``. Both files must import to the
same graph (so one compile covers both), which compiled for ``llvm`` and fed NHWC as Keras takes it must
match Keras's prediction (max relative error 1e-4). The layout stays channels-first from the input's
transpose to the classifier: no transposes inside the nets."""

from __future__ import annotations

import time

import numpy as np
import pytest

import nnvm
from nnvm_testing import frontend_keras as testing
from nnvm_testing.venvs import pytest_venv

NETS = ["MobileNetV2", "ResNet50", "DenseNet121", "EfficientNetB0", "InceptionV3", "Xception", "VGG16",
        "NASNetMobile", "ConvNeXtTiny"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NETS)
def test_application_matches_keras_from_keras_and_h5(name):
    m = pytest_venv(testing.keras_models, [name])[name]
    graph, _ = nnvm.load_model(str(m.keras))
    graph_h5, _ = nnvm.load_model(str(m.h5))
    assert testing.graph_digest(graph) == testing.graph_digest(graph_h5), \
        f"{name}: the .keras and .h5 files import to different graphs"
    # NHWC in, NCHW inside: one transpose at the input (VGG16's Flatten reads NHWC order: a second).
    transposes = [n.name for n in graph.nodes if n.op == "transpose"]
    assert len(transposes) <= (2 if name == "VGG16" else 1), f"{name}: transposes at {transposes}"
    x, want = np.load(m.input), np.load(m.output)
    started = time.perf_counter()
    mod = nnvm.compile(graph, target="llvm")
    print(f"{name}: compiled in {time.perf_counter() - started:.1f}s, {mod.stats()['kernels']} kernels")
    (got,) = mod.run(x)
    assert got.shape == want.shape
    err = testing.max_rel_err(got, want)
    assert err < 1e-4, f"{name}: max relative error {err:.2e} vs Keras"

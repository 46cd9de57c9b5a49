"""End to end on the host: real models compiled for ``llvm`` agree with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm_testing.frontend_onnx import models

LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]


def _reference(path: str, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _inputs(path: str, seed: int = 0) -> dict:
    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(path: str, opt_level: int = 3):
    feeds = _inputs(path)
    want = _reference(path, feeds)
    mod = nnvm.compile(path, target="llvm", opt_level=opt_level)
    got = mod.run(**feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{path} output {k}: shape {g.shape} != {w.shape}"
        scale = max(float(np.abs(w).max()), 1e-6)
        err = float(np.abs(g - w).max()) / scale
        assert err < 1e-4, f"{path} output {k}: max relative error {err:.2e} (opt level {opt_level})"
    return mod


@pytest.mark.parametrize("name", LIGHT)
def test_light_model_matches_onnxruntime(name, tmp_path):
    # The shipped light models fill every weight with 0.02, which makes outputs nearly constant;
    # the same architectures with seeded random weights make the comparison meaningful.
    path = tmp_path / f"{name}.onnx"
    onnx.save(models.light_model(name, seed=0), str(path))
    _check(str(path))


@pytest.mark.parametrize("build", ["resnet18", "mobilenet_v2"])
def test_generated_model_matches_onnxruntime(build):
    mod = _check(models.cached_model_path(build))
    stats = mod.stats()
    assert stats["kernels"] < stats["nodes_before"]
    assert stats["activation_bytes_planned"] <= stats["activation_bytes_naive"]


def test_resnet18_opt_level_0_matches_too():
    _check(models.cached_model_path("resnet18"), opt_level=0)

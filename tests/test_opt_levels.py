"""Opt levels end to end on the host: level 3 computes what level 0 does, in few kernels and little memory.

Level 0 runs one kernel per node with no graph rewriting, so it is the reference for what the graph
passes (inference simplification, scale folding, constant folding, CSE, DCE, fusion) may not change.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import nnvm
from nnvm_testing.frontend_onnx import models

# (kernels at most, at opt level 3) for the models built by ``models``; None: no bound checked.
BUILT = {"resnet18": 30, "mobilenet_v2": 70}
# All nine light models that ship with onnx, with seeded random weights.
LIGHT = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
         "squeezenet", "vgg19", "zfnet512"]


def _inputs(path: str, seed: int = 0) -> dict:
    model = onnx.load(path, load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    return {inp.name: rng.standard_normal([d.dim_value for d in inp.type.tensor_type.shape.dim])
            .astype(np.float32) for inp in model.graph.input if inp.name not in inits}


def _compare_levels(path: str):
    """Compile at opt levels 0 and 3, check the outputs agree; returns the level-3 module."""
    feeds = _inputs(path)
    want = nnvm.compile(path, target="llvm", opt_level=0).run(**feeds)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    got = mod.run(**feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"{path} output {k}: shape {g.shape} at opt level 3, {w.shape} at 0"
        err = float(np.abs(g.astype(np.float64) - w).max()) / max(float(np.abs(w).max()), 1e-6)
        assert err < 1e-4, f"{path} output {k}: max relative error {err:.2e} between opt levels 3 and 0"
    return mod


@pytest.mark.parametrize("name", sorted(BUILT))
def test_built_models_agree_across_opt_levels_in_few_kernels(name):
    mod = _compare_levels(models.cached_model_path(name))
    stats = mod.stats()
    assert stats["kernels"] <= BUILT[name], f"{name}: {stats['kernels']} kernels at opt level 3"
    planned = stats["activation_bytes_planned"]
    bound, naive = stats["activation_bytes_lower_bound"], stats["activation_bytes_naive"]
    assert planned <= 1.25 * bound, f"{name}: {planned} activation bytes planned, lower bound {bound}"
    assert planned <= 0.2 * naive, f"{name}: {planned} activation bytes planned, {naive} naive"


@pytest.mark.parametrize("name", LIGHT)
def test_light_models_agree_across_opt_levels(name, tmp_path):
    path = tmp_path / f"{name}.onnx"
    onnx.save(models.light_model(name, seed=0), str(path))
    _compare_levels(str(path))

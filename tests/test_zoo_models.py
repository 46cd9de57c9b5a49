"""The issue-19 benchmark zoo (``bench/zoo.py``): its PyTorch exports load in onnxruntime, and nnvm compiles
them and agrees with onnxruntime, for one small model of each family (ShuffleNet v1, whose grouped 1x1
convolutions are the point of having it, and ViT-tiny).

The exports run in the cached torch venv (``nnvm_testing.frontend_onnx.torch_models``; the first one
builds it, later runs reuse ``$NNVM_CACHE_DIR/models/torch_zoo_*``). A missing tool skips, except under
``CI=true`` where it fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.bench import profile, relative_error, seeded_inputs
from nnvm_testing.frontend_onnx import torch_models
from nnvm_testing.venvs import pytest_venv


def _script_models(var: str) -> list[str]:
    """The keys of dict ``var`` in scripts/torch_zoo.py, read without importing torch."""
    tree = ast.parse(Path(torch_models.ZOO_SCRIPT).read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == var for t in node.targets):
            return [k.value for k in node.value.keys]
    raise AssertionError(f"{var} not found in {torch_models.ZOO_SCRIPT}")


def test_zoo_lists_match_the_export_script():
    assert sorted(_script_models("CNNS")) == sorted(torch_models.ZOO_CNNS)
    assert sorted(_script_models("TRANSFORMERS")) == sorted(torch_models.ZOO_TRANSFORMERS)
    assert len(torch_models.ZOO_CNNS) == 11  # the eleven CNNs


def test_unknown_zoo_model_is_named():
    with pytest.raises(KeyError, match="unknown zoo model 'lenet'"):
        torch_models.zoo_model_path("lenet")


@pytest.mark.parametrize(("name", "ops"), [("shufflenet", {"Conv", "Transpose", "AveragePool"}),
                                           ("vit", {"MatMul", "Softmax", "LayerNormalization"})])
def test_zoo_export_runs_in_onnxruntime_and_nnvm_matches(name, ops):
    path = pytest_venv(torch_models.zoo_model_path, name, 1)
    model = onnx.load(path)
    present = {n.op_type for n in model.graph.node}
    assert ops <= present, f"{name}: ops {sorted(present)}"
    if name == "shufflenet":  # grouped (not depthwise) 1x1 convolutions: what the model is here for
        grouped = [n for n in model.graph.node if n.op_type == "Conv"
                   and any(a.name == "group" and 1 < a.i < 100 for a in n.attribute)]
        assert len(grouped) >= 30, f"{name}: only {len(grouped)} grouped 1x1 convolutions"

    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    feeds = seeded_inputs(mod)
    assert [v.shape for v in feeds.values()] == [(1, 3, 224, 224)]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    want = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert want[0].shape == (1, 1000) and np.isfinite(want[0]).all()
    err = relative_error(mod.run(**feeds), want)
    assert err < 1e-4, f"{name}: max relative error {err:.2e} against onnxruntime"
    # bench/zoo.py's kernel lists give every convolution and matmul (transformer layer) a GFLOP/s figure
    rows = profile(mod, feeds, 1)
    ops = {n.name: n.op for n in mod.graph.nodes}
    heavy = [r for r in rows
             if any(ops.get(g, "").startswith(("conv2d", "matmul", "dense")) for g in r["group"])]
    missing = [r["group"] for r in heavy if not r["gflops"]]
    assert heavy and not missing, f"{name}: kernels without GFLOP/s: {missing[:3]}"


def test_results_chart_draws_each_models_blocks_ratio():
    """``bench/zoo.py --markdown`` ends with a Mermaid bar chart per batch size (RESULTS.md's plot)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("zoo", Path(__file__).parents[1] / "bench" / "zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    rows = [{"model": "resnet18", "batch": 1, "ratios": {"blocks": 0.85}},
            {"model": "vit", "batch": 1, "ratios": {"blocks": 1.31}},
            {"model": "vit", "batch": 8, "ratios": {"blocks": 0.5}},
            {"model": "bert", "batch": 1, "error": "failed"}]
    chart = zoo.mermaid_chart(rows, 1)
    assert chart[0] == "```mermaid" and chart[-1] == "```"
    assert '    x-axis ["RN18", "ViT"]' in chart and "    bar [0.85, 1.31]" in chart
    assert "    line [0.9, 0.9]" in chart and any("1.4" in line for line in chart if "y-axis" in line)
    assert zoo.mermaid_chart(rows, 4) == []

"""Whole networks: the nine light model-zoo networks and our ResNet-18 and MobileNetV2.

Every network is imported and checked for its output shape. The smaller ones are also evaluated
(numpy evaluation of the graph, ``nnvm.graph.evaluate``) and compared with onnxruntime; the light
models get seeded random weights first, since their shipped weights are all 0.02.
"""

from __future__ import annotations

import numpy as np
import pytest

from nnvm_frontend_onnx import load_onnx
from nnvm_testing.frontend_onnx import models
from nnvm_testing.frontend_onnx.check import assert_matches_onnxruntime

LIGHT_OUTPUT_SHAPES = {
    "bvlc_alexnet": (1, 1000), "densenet121": (1, 1000, 1, 1), "inception_v1": (1, 1000),
    "inception_v2": (1, 1000), "resnet50": (1, 1000), "shufflenet": (1, 1000), "squeezenet": (1, 1000, 1, 1),
    "vgg19": (1, 1000), "zfnet512": (1, 1000),
}
# Light models small enough to evaluate in numpy within a few seconds.
LIGHT_EVALUATED = ["squeezenet", "shufflenet", "inception_v1", "inception_v2"]


def test_all_nine_light_models_ship_with_onnx():
    assert sorted(models.light_model_paths()) == sorted(LIGHT_OUTPUT_SHAPES)


@pytest.mark.parametrize("name", sorted(LIGHT_OUTPUT_SHAPES))
def test_light_model_imports(name):
    graph = load_onnx(models.light_model_paths()[name])
    graph.validate()
    assert len(graph.inputs) == 1 and graph.types[graph.inputs[0]].shape == (1, 3, 224, 224)
    assert [graph.types[o].shape for o in graph.outputs] == [LIGHT_OUTPUT_SHAPES[name]]
    assert graph.nodes and all(n.op != "batch_norm" or n.inputs[1] in graph.params for n in graph.nodes)


def _with_logits_output(model):
    """Also expose the final Softmax's input, so saturated probabilities cannot hide wrong logits."""
    from onnx import helper

    last = [n for n in model.graph.node if n.op_type == "Softmax"]
    if last:
        model.graph.output.append(helper.make_empty_tensor_value_info(last[-1].input[0]))
    return model


@pytest.mark.parametrize("name", LIGHT_EVALUATED)
def test_light_model_matches_onnxruntime(name):
    model = _with_logits_output(models.light_model(name, seed=0))
    init = {t.name for t in model.graph.initializer}
    (data,) = [i.name for i in model.graph.input if i.name not in init]
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    assert_matches_onnxruntime(model, {data: x})


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_reference_network_matches_onnxruntime(name):
    path = models.cached_model_path(name)
    graph = load_onnx(path)
    assert graph.inputs == ("data",) and graph.outputs == ("output",)
    assert graph.types["output"].shape == (1, 1000)
    ops = {n.op for n in graph.nodes}
    assert {"conv2d", "batch_norm", "dense", "global_avg_pool2d"} <= ops
    x = np.random.default_rng(2).standard_normal((1, 3, 224, 224)).astype(np.float32)
    assert_matches_onnxruntime(path, {"data": x})


def test_reference_networks_are_seeded_and_batched():
    a, b = models.resnet18(seed=3, batch=2), models.resnet18(seed=3, batch=2)
    assert a.SerializeToString() == b.SerializeToString()
    assert models.resnet18(seed=4).SerializeToString() != a.SerializeToString()
    graph = load_onnx(models.mobilenet_v2(batch=2))
    assert graph.types["data"].shape == (2, 3, 224, 224) and graph.types["output"].shape == (2, 1000)
    # batch-norm statistics are random, not the identity
    bn = [t for t in a.graph.initializer if t.name.endswith("running_var")]
    from onnx import numpy_helper

    assert bn and all(np.ptp(numpy_helper.to_array(t)) > 0.1 for t in bn)


def test_cached_model_path_writes_once(tmp_path, monkeypatch):
    monkeypatch.setenv("NNVM_CACHE_DIR", str(tmp_path))
    path = models.cached_model_path("mobilenet_v2", seed=1)
    assert path.startswith(str(tmp_path)) and "mobilenet_v2" in path
    stamp = (tmp_path / "models").stat().st_mtime_ns, len(list((tmp_path / "models").iterdir()))
    assert models.cached_model_path("mobilenet_v2", seed=1) == path
    assert len(list((tmp_path / "models").iterdir())) == stamp[1] == 1
    assert models.cached_model_path("squeezenet") == models.light_model_paths()["squeezenet"]
    with pytest.raises(KeyError):
        models.cached_model_path("no_such_net")

"""The frontend as the core finds it: through the ``nnvm`` entry point, by extension or by content."""

from __future__ import annotations

import shutil

import numpy as np

import nnvm
from nnvm.frontend import find_frontend
from nnvm_frontend_onnx.importer import looks_like_onnx
from nnvm_testing.frontend_onnx import models


def test_registered_as_onnx_frontend():
    rows = nnvm.plugins()["frontend"]
    (row,) = [r for r in rows if r["name"] == "onnx"]
    assert row["plugin"] == "onnx" and row["distribution"] == "nnvm-frontend-onnx"


def test_load_model_from_path_proto_and_bytes():
    path = models.cached_model_path("resnet18")
    proto = models.resnet18()
    for model in (path, proto, proto.SerializeToString()):
        graph, params = nnvm.load_model(model)
        assert graph.inputs == ("data",) and graph.types["output"].shape == (1, 1000)
        assert params and all(isinstance(v, np.ndarray) for v in params.values())


def test_file_without_onnx_extension_is_recognised_by_content(tmp_path):
    path = tmp_path / "weights.bin"
    shutil.copy(models.light_model_paths()["squeezenet"], path)
    assert find_frontend(str(path)).name == "onnx"
    graph, _ = nnvm.load_model(str(path))
    assert graph.types[graph.outputs[0]].shape == (1, 1000, 1, 1)


def test_accepts_is_strict(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    lookalike = tmp_path / "lookalike.bin"
    lookalike.write_bytes(b"\x08\x07garbage that is not protobuf")
    assert looks_like_onnx(models.mobilenet_v2())
    assert not looks_like_onnx(str(text)) and not looks_like_onnx(str(lookalike))
    assert not looks_like_onnx(str(tmp_path / "absent.bin"))
    assert not looks_like_onnx(np.zeros(3)) and not looks_like_onnx({"graph": 1})


def test_node_names_survive_and_outputs_keep_onnx_names():
    graph, _ = nnvm.load_model(models.resnet18())
    names = {n.name for n in graph.nodes}
    assert {"conv1", "layer1.0.add", "fc", "maxpool"} <= names
    assert graph.outputs == ("output",) and graph.types["output"].shape == (1, 1000)
    # batch norm, pooling and the classifier keep the name of the ONNX node they come from
    assert {n.name for n in graph.nodes if n.op == "batch_norm"} >= {"conv1.bn", "layer4.1.conv2.bn"}


def test_unnamed_nodes_get_op_type_and_index():
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Sigmoid", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    g, _ = nnvm.load_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    assert [n.name for n in g.nodes] == ["Relu_0", "Sigmoid_1"] and g.outputs == ("y",)

"""The Python API of API.md on small models: every way of passing a model and its inputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm


def _two_input_model() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("MatMul", ["a", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["s"], name="add"),
             helper.make_node("Sigmoid", ["s"], ["y"], name="sig")]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 4]),
                                             helper.make_tensor_value_info("b", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], [w])
    # IR version 9: what the onnxruntime of the dev environment accepts
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


def _feeds():
    rng = np.random.default_rng(4)
    return {"a": rng.standard_normal((2, 4)).astype(np.float32),
            "b": rng.standard_normal((2, 3)).astype(np.float32)}


def _reference(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, _feeds())[0]


def test_in_memory_model_positional_and_named_inputs():
    model = _two_input_model()
    mod = nnvm.compile(model, target="llvm")
    want = _reference(model)
    f = _feeds()
    for got in (mod.run(f["a"], f["b"])[0], mod.run(a=f["a"], b=f["b"])[0], mod.run(f["a"], b=f["b"])[0]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_load_model_then_compile_graph():
    graph, params = nnvm.load_model(_two_input_model())
    assert isinstance(graph, nnvm.Graph) and "w" in params
    assert graph.inputs == ("a", "b")
    mod = nnvm.compile(graph, target="llvm", opt_level=0)
    np.testing.assert_allclose(mod.run(**_feeds())[0], _reference(_two_input_model()), rtol=1e-5, atol=1e-6)


def test_stats_keys():
    stats = nnvm.compile(_two_input_model(), target="llvm").stats()
    for key in ("kernels", "fused_groups", "weight_bytes", "activation_bytes_planned",
                "activation_bytes_naive", "activation_bytes_lower_bound", "compile_seconds"):
        assert key in stats, key
    assert stats["kernels"] == 1 and stats["fused_groups"] == [["mm", "add", "sig"]]
    assert stats["weight_bytes"] == 4 * 3 * 4


def test_input_mistakes_are_clear():
    mod = nnvm.compile(_two_input_model(), target="llvm")
    f = _feeds()
    with pytest.raises(nnvm.InputError, match="missing input 'b'"):
        mod.run(f["a"])
    with pytest.raises(nnvm.InputError, match="no input named 'c'"):
        mod.run(a=f["a"], b=f["b"], c=f["b"])
    with pytest.raises(nnvm.InputError, match="input 'a' must have shape \\[2, 4\\], got \\[4, 2\\]"):
        mod.run(f["a"].T.copy(), f["b"])
    with pytest.raises(nnvm.InputError, match="input 'b' must be float32, got int64"):
        mod.run(f["a"], f["b"].astype(np.int64))


def test_bad_opt_level_and_target():
    with pytest.raises(nnvm.Error, match="opt_level"):
        nnvm.compile(_two_input_model(), target="llvm", opt_level=7)
    with pytest.raises(nnvm.TargetError, match="'nonesuch'"):
        nnvm.compile(_two_input_model(), target="nonesuch")
    with pytest.raises(nnvm.TargetError):
        nnvm.compile(_two_input_model(), target="llvm -frobnicate=3")

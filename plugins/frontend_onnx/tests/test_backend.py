"""``nnvm_frontend_onnx.backend`` (ONNX's backend interface) and model-level loading rules."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_frontend_onnx import backend

NNVM_PLUGINS = "onnx,llvm-x86"  # the backend compiles: the x86 code generator too (see conftest)


def _reshape_model():
    from onnx import TensorProto, helper

    node = helper.make_node("Reshape", ["x", "shape"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
                                            helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_shape_input_is_specialized_and_recompiled_when_it_changes():
    rep = backend.prepare(_reshape_model())
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4], [12, 1]):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert rep.specialized == {"shape"}
    assert len(rep._modules) == 3  # one compiled module per distinct shape value, reused


def test_run_model_run_node_and_devices():
    from onnx import helper

    a, b = np.float32([[1, 2], [3, 4]]), np.float32([[10, 20], [30, 40]])
    (got,) = backend.run_node(helper.make_node("Add", ["a", "b"], ["c"]), [a, b])
    np.testing.assert_array_equal(got, a + b)
    (got,) = backend.run_model(_reshape_model(), {"x": np.ones((2, 6), np.float32),
                                                  "shape": np.array([6, 2], np.int64)})
    assert got.shape == (6, 2)
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    with pytest.raises(nnvm.Error, match="device 'CUDA'"):
        backend.prepare(_reshape_model(), "CUDA")


def test_unsupported_operator_names_operator_and_opset():
    from onnx import TensorProto, helper

    node = helper.make_node("MaxRoiPool", ["x", "x"], ["y"], pooled_shape=[1, 1])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with pytest.raises(nnvm.Error, match=r"opset 21.*MaxRoiPool"):
        backend.prepare(model).run([np.ones(4, np.float32)])


def _external_model(tmp_path, location: str):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    w.data_location = TensorProto.EXTERNAL
    del w.external_data[:]
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    w.ClearField("raw_data")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])], [w])
    path = tmp_path / "model" / "m.onnx"
    path.parent.mkdir()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    path.write_bytes(model.SerializeToString())
    return path


def test_external_data_inside_the_model_folder_loads(tmp_path):
    from nnvm_frontend_onnx.importer import load_onnx

    path = _external_model(tmp_path, "w.bin")
    (path.parent / "w.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    graph = load_onnx(str(path))
    np.testing.assert_array_equal(graph.params["w"], np.arange(4, dtype=np.float32))


@pytest.mark.parametrize("location", ["../secret.bin", "/etc/passwd"])
def test_external_data_outside_the_model_folder_is_an_error(tmp_path, location):
    from nnvm_frontend_onnx.importer import load_onnx

    (tmp_path / "secret.bin").write_bytes(np.zeros(4, np.float32).tobytes())
    path = _external_model(tmp_path, location)
    with pytest.raises(nnvm.errors.ModelLoadError, match="outside the model's folder"):
        load_onnx(str(path))


def _nonzero_of_relu_model(shape):
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("NonZero", ["r"], ["y"], name="nz")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_value_decided_output_of_a_computed_value_recompiles_per_input_value():
    """NonZero's input is computed from a graph input: that input is specialized on, per value."""
    rep = backend.prepare(_nonzero_of_relu_model([2, 3]))
    values = [np.float32([[1, -1, 0], [2, 0, 3]]), np.float32([[0, 0, 1], [0, 0, 0]]),
              np.float32([[1, -1, 0], [2, 0, 3]])]
    for x in values:
        (y,) = rep.run([x])
        np.testing.assert_array_equal(y, np.array(np.nonzero(np.maximum(x, 0))), err_msg=f"NonZero of {x}")
    assert rep.specialized == {"x"}
    assert len(rep._modules) == 2


def test_value_decided_output_of_a_large_computed_value_is_an_error_naming_the_node():
    rep = backend.prepare(_nonzero_of_relu_model([100, 100]))
    with pytest.raises(nnvm.Error, match=r"node nz \(NonZero, opset 13\): .*computed at run time"):
        rep.run([np.ones((100, 100), np.float32)])


def test_unique_of_a_graph_input_is_specialized_on_its_value():
    from onnx import TensorProto, helper

    node = helper.make_node("Unique", ["x"], ["y", "first", "inverse", "counts"], sorted=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None)
                               for o in node.output])
    rep = backend.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    for x in (np.float32([3, 1, 3, 2, 1]), np.float32([5, 5, 5, 5, 4])):
        want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
        for got, w in zip(rep.run([x]), want, strict=True):
            np.testing.assert_array_equal(got, w, err_msg=f"Unique of {x}")
    assert rep.specialized == {"x"}


def test_cast_float64_to_float16_is_one_rounding_on_x86():
    """Cast goes float64 -> float16 directly (the x86 JIT once lacked double-to-half, and the frontend
    went through float32): one rounding, as numpy does, even where two roundings differ."""
    from nnvm_frontend_onnx import load_onnx
    from nnvm_testing.frontend_onnx.check import single_node_model

    x = np.array([1 + 2**-11 + 2**-40, -3.14159265358979, 65504.0, 1e-8, 70000.0, 0.0, -1e-30])
    graph = load_onnx(single_node_model("Cast", [("x", x)], {"to": 10}))
    assert [n.op for n in graph.nodes] == ["cast"]
    (y,) = nnvm.compile(graph, target="llvm").run(x)
    assert y.dtype == np.float16
    with np.errstate(over="ignore"):  # 70000 is inf in float16
        np.testing.assert_array_equal(y, x.astype(np.float16))

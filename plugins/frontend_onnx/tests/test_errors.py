"""What a user sees when a model cannot be imported: one ``nnvm.Error`` naming the file, node or input."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.errors import InputError, ModelLoadError, UnsupportedOperatorError
from nnvm_frontend_onnx import load_onnx
from nnvm_testing.frontend_onnx import models
from nnvm_testing.frontend_onnx.check import single_node_model


def _model(nodes, inputs, outputs, initializers=(), opset=13):
    from onnx import helper

    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _tensor(name, shape, elem=None):
    from onnx import TensorProto, helper

    return helper.make_tensor_value_info(name, elem or TensorProto.FLOAT, shape)


@pytest.mark.parametrize("fraction", [0.001, 0.3, 0.5, 0.999])
def test_truncated_file_names_the_file(tmp_path, fraction):
    data = open(models.cached_model_path("mobilenet_v2"), "rb").read()
    path = tmp_path / "model.onnx"
    path.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(ModelLoadError) as err:
        load_onnx(str(path))
    assert str(path) in str(err.value) and "not a valid ONNX model" in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_empty_and_garbage_files(tmp_path):
    with pytest.raises(ModelLoadError, match="no such file"):
        load_onnx(str(tmp_path / "absent.onnx"))
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="empty.onnx: not a valid ONNX model"):
        load_onnx(empty)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(0).bytes(1000))
    with pytest.raises(ModelLoadError, match="garbage.onnx: not a valid ONNX model"):
        load_onnx(garbage)


def test_all_unsupported_operators_reported_at_once():
    from onnx import helper

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("MaxRoiPool", ["r", "r"], ["up"], name="upsample_a", pooled_shape=[1, 1]),
        helper.make_node("Multinomial", ["up"], ["vals"], name="topk"),
        helper.make_node("MaxRoiPool", ["vals", "vals"], ["y"], name="upsample_b", pooled_shape=[1, 1]),
    ]
    from onnx import numpy_helper

    inits = [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([2], np.int64), "k")]
    model = _model(nodes, [_tensor("x", [1, 3, 4, 4])], [_tensor("y", None)], inits)
    with pytest.raises(UnsupportedOperatorError) as err:
        load_onnx(model)
    assert err.value.missing == {"MaxRoiPool": ["upsample_a", "upsample_b"], "Multinomial": ["topk"]}
    message = str(err.value)
    assert "2 unsupported operators" in message and "opset 13" in message
    assert "upsample_a" in message and "topk" in message and "Relu" not in message
    assert isinstance(err.value, nnvm.Error)


def test_custom_domain_operator_is_unsupported(tmp_path):
    from onnx import helper

    node = helper.make_node("FusedConv", ["x"], ["y"], name="fused", domain="com.microsoft")
    model = _model([node], [_tensor("x", [1, 2])], [_tensor("y", None)])
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    path = tmp_path / "custom.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(UnsupportedOperatorError) as err:
        load_onnx(str(path))
    assert err.value.missing == {"com.microsoft.FusedConv": ["fused"]}
    assert str(path) in str(err.value)


def test_symbolic_dimension_needs_shapes():
    from onnx import helper

    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model([node], [_tensor("x", ["batch", 3, "height", 8])], [_tensor("y", None)])
    with pytest.raises(InputError) as err:
        load_onnx(model)
    message = str(err.value)
    assert "'x'" in message and "dimension 2" in message and "'height'" in message and "shapes=" in message
    graph = load_onnx(model, shapes={"x": (4, 3, 5, 8)})
    assert graph.types["x"].shape == (4, 3, 5, 8)


def test_named_batch_dimension_defaults_to_one():
    from onnx import helper

    relu = [helper.make_node("Relu", ["x"], ["y"])]
    for batch in ("N", "batch_size", "batch"):
        model = _model(relu, [_tensor("x", [batch, 3])], [_tensor("y", None)])
        assert load_onnx(model).types["x"].shape == (1, 3)
    unnamed = _model(relu, [_tensor("x", [None, 3])], [_tensor("y", None)])
    with pytest.raises(InputError, match="dimension 0"):
        load_onnx(unnamed)


def test_shapes_argument_is_checked():
    model = models.resnet18()
    with pytest.raises(InputError, match="'image'.*not an input.*data"):
        load_onnx(model, shapes={"image": (1, 3, 224, 224)})
    with pytest.raises(InputError, match="rank 4"):
        load_onnx(model, shapes={"data": (1, 3, 224)})
    # shapes= may also replace static dimensions: here the batch
    graph = load_onnx(model, shapes={"data": (2, 3, 224, 224)})
    assert graph.types["output"].shape == (2, 1000)
    with pytest.raises(nnvm.Error, match=r"node conv1 \(Conv, opset \d+\)"):
        load_onnx(model, shapes={"data": (1, 4, 224, 224)})


def test_value_dependent_shape_names_the_node():
    from onnx import TensorProto, helper

    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="dynamic_reshape")
    model = _model([node], [_tensor("x", [2, 6]), _tensor("s", [2], TensorProto.INT64)], [_tensor("y", None)])
    with pytest.raises(nnvm.Error) as err:
        load_onnx(model)
    assert "dynamic_reshape" in str(err.value) and "value-dependent shape not supported" in str(err.value)


def test_unsupported_attribute_names_the_node():
    model = single_node_model("Pad", [("x", np.zeros((2, 3), np.float32)), ("p", np.array([1, 1, 1, 1]))],
                              {"mode": "mirror"}, constants={"p"}, opset=19)
    with pytest.raises(nnvm.Error, match=r"node pad_node \(Pad, opset \d+\): mode='mirror' is not supported"):
        load_onnx(model)


def test_training_outputs_of_batch_norm_are_rejected():
    from onnx import helper, numpy_helper

    stats = [numpy_helper.from_array(np.ones(3, np.float32), n) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "mean_out", "var_out"],
                            name="bn", training_mode=1)
    model = _model([node], [_tensor("x", [2, 3, 4, 4])], [_tensor("y", None), _tensor("mean_out", None)],
                   stats, opset=15)
    with pytest.raises(nnvm.Error, match=r"node bn \(BatchNormalization, opset \d+\): training-mode"):
        load_onnx(model)


def test_undefined_value_is_a_load_error():
    from onnx import helper

    nodes = [helper.make_node("Relu", ["missing"], ["y"], name="relu")]
    model = _model(nodes, [_tensor("x", [2])], [_tensor("y", None)])
    with pytest.raises(ModelLoadError, match=r"node relu \(Relu\) reads 'missing'"):
        load_onnx(model)


def test_image_decoder_without_pillow_names_the_node(monkeypatch):
    import sys

    encoded = np.frombuffer(b"\x89PNG\r\n\x1a\n", dtype=np.uint8)
    model = single_node_model("ImageDecoder", [("data", encoded)], constants={"data"}, opset=20)
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    with pytest.raises(nnvm.Error, match=r"node imagedecoder_node \(ImageDecoder, opset 20\): .*Pillow"):
        load_onnx(model)


def test_element_type_attribute_errors_name_the_node_once():
    from onnx import TensorProto

    x = [("x", np.zeros((2, 2), np.float32))]
    for op, attrs, opset, why in [("Cast", {"to": TensorProto.STRING}, 13, "element type STRING"),
                                  ("EyeLike", {"dtype": TensorProto.STRING}, 13, "element type STRING"),
                                  ("Cast", {"to": "BOGUS"}, 1, "unknown element type 'BOGUS'")]:
        with pytest.raises(nnvm.Error) as err:
            load_onnx(single_node_model(op, x, attrs, opset=opset))
        message = str(err.value)
        assert message.startswith(f"node {op.lower()}_node ({op}, opset {opset}): "), message
        assert message.count("opset") == 1 and why in message, message

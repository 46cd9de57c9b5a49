"""Large initializers read in place from the mapped file: the same weights as onnx's own reader, never
kept by a module, and any surprise in the bytes handled by the ordinary parse."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.errors import ModelLoadError
from nnvm_frontend_onnx import load_onnx, mapped
from nnvm_frontend_onnx.importer import read_model

NNVM_PLUGINS = "onnx,llvm-x86"  # one test compiles


def _dense_model(rows=64, cols=512, seed=0):
    """x[1, rows] @ w[rows, cols] + b: w large enough to be mapped (128 KiB), b small (stays in the
    message); the tensors' fields written in an unusual order (raw_data before name and type)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    weight = TensorProto()
    weight.raw_data = w.tobytes()
    weight.dims.extend(w.shape)
    weight.data_type = TensorProto.FLOAT
    weight.name = "w"
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, rows])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cols])],
        initializer=[weight, numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model, w, b


def test_large_weights_are_views_of_the_file_and_equal_onnx(tmp_path):
    from onnx import numpy_helper

    model, w, b = _dense_model()
    path = tmp_path / "dense.onnx"
    path.write_bytes(model.SerializeToString())
    proto, _, weights = read_model(str(path))
    assert set(weights) == {"w"}  # the 2 KiB bias stays in the message
    np.testing.assert_array_equal(weights["w"], w)
    assert not weights["w"].flags.writeable
    assert not proto.graph.initializer[0].raw_data  # left out of the parsed message
    np.testing.assert_array_equal(numpy_helper.to_array(proto.graph.initializer[1]), b)


def test_module_and_load_model_keep_no_view_of_the_file(tmp_path):
    model, w, b = _dense_model()
    path = tmp_path / "dense.onnx"
    path.write_bytes(model.SerializeToString())
    graph, params = nnvm.load_model(str(path))
    assert all(mapped_base(v) is None for v in list(params.values()) + list(graph.params.values()))
    mod = nnvm.compile(str(path), target="llvm", opt_level=0, tuning_log=False, kernel_cache=False)
    assert all(mapped_base(v) is None for v in mod.params.values())
    path.write_bytes(b"")  # the module does not depend on the file any more
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x)[0], x @ w + b, rtol=1e-4, atol=1e-4)


def mapped_base(array):
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    base = base.obj if isinstance(base, memoryview) else base
    return base if type(base).__name__ == "mmap" else None


def test_walk_declines_what_it_does_not_understand():
    model, _, _ = _dense_model()
    data = model.SerializeToString()
    skeleton, places = mapped.split(data)
    assert set(places) == {"w"} and len(skeleton) < len(data) - 64 * 512 * 4
    assert mapped.split(data[: len(data) // 2]) is None  # truncated: the ordinary parse reports it
    assert mapped.split(b"\x0b" + data) is None  # a group's wire type
    small, _, _ = _dense_model(rows=2, cols=8)
    assert mapped.split(small.SerializeToString()) is None  # nothing large: parsed as it is


def test_weight_whose_bytes_do_not_match_its_shape_names_it(tmp_path):
    model, _, _ = _dense_model()
    model.graph.initializer[0].dims[1] = 511
    path = tmp_path / "bad.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(ModelLoadError, match=r"bad.onnx: initializer 'w' cannot be read: its 131072 bytes"):
        load_onnx(str(path))


@pytest.mark.parametrize("seed", range(12))
def test_corrupted_bytes_are_errors_or_the_same_weights(tmp_path, seed):
    """A byte flipped anywhere: either one clear ModelLoadError or weights equal to onnx's own reading of
    the same bytes; never a crash or a silently different weight."""
    import onnx
    from onnx import numpy_helper

    model, _, _ = _dense_model()
    data = bytearray(model.SerializeToString())
    rng = np.random.default_rng(seed)
    for at in rng.integers(0, len(data), 3):
        data[at] ^= 1 << int(rng.integers(0, 8))
    path = tmp_path / "flipped.onnx"
    path.write_bytes(bytes(data))
    try:
        reference = onnx.ModelProto.FromString(bytes(data))
        expected = {t.name: numpy_helper.to_array(t) for t in reference.graph.initializer}
    except Exception:  # noqa: BLE001 - onnx cannot read it: ours must say so
        expected = None
    try:
        proto, _, weights = read_model(str(path))
    except ModelLoadError as err:
        assert "flipped.onnx" in str(err) and "\n" not in str(err)
        return
    assert expected is not None
    for t in proto.graph.initializer:
        array = weights[t.name] if t.name in weights else numpy_helper.to_array(t)
        np.testing.assert_array_equal(array, expected[t.name])


def test_model_with_local_functions_inlines_around_mapped_weights(tmp_path):
    """Inlining re-serializes the message: the weights it no longer holds still come from the file."""
    from onnx import helper

    model, w, b = _dense_model()
    body = [helper.make_node("MatMul", ["a", "m"], ["p"]), helper.make_node("Add", ["p", "c"], ["o"])]
    model.functions.append(helper.make_function("local", "Dense", ["a", "m", "c"], ["o"], body,
                                                [helper.make_opsetid("", 13)]))
    del model.graph.node[:]
    model.graph.node.append(helper.make_node("Dense", ["x", "w", "b"], ["y"], domain="local"))
    model.opset_import.append(helper.make_opsetid("local", 1))
    path = tmp_path / "functions.onnx"
    path.write_bytes(model.SerializeToString())
    graph = load_onnx(str(path))
    np.testing.assert_array_equal(graph.params["w"], w)
    np.testing.assert_array_equal(graph.params["b"], b)


def test_backend_prepared_from_a_path_holds_every_weight(tmp_path):
    """The ONNX backend API hands the message on: read from a path, it must carry the large weights."""
    from nnvm_frontend_onnx import backend

    model, w, b = _dense_model()
    path = tmp_path / "dense.onnx"
    path.write_bytes(model.SerializeToString())
    rep = backend.prepare(str(path))
    x = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(rep.run([x])[0], x @ w + b, rtol=1e-4, atol=1e-4)

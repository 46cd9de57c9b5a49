"""Models older than opset 7 convert through the converters' legacy forms (``broadcast``/``axis``,
``consumed_inputs``, ``is_test``, attributes that later became inputs), or fail naming node and opset.

onnxruntime runs no opset below 7, so the reference is onnxruntime on the same model taken to opset 7
by ``onnx.version_converter``; where that converter has no adapter (Pad-1, Tile-1, Cast-1, Split-1),
numpy is the reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm.graph.evaluate import evaluate_graph
from nnvm_frontend_onnx import load_onnx
from nnvm_testing.frontend_onnx.check import run_onnxruntime, single_node_model

X = np.random.default_rng(0).random((2, 3, 4, 4), dtype=np.float32)
STATS = [(n, np.full(3, v, np.float32)) for n, v in (("s", 1.5), ("b", 0.5), ("m", 0.25), ("v", 2.0))]

# (op, inputs, attributes, constant inputs, opset)
CONVERTIBLE = [
    ("BatchNormalization", [("x", X)] + STATS, {"is_test": 1, "spatial": 1}, {"s", "b", "m", "v"}, 6),
    ("BatchNormalization", [("x", X)] + STATS, {"is_test": 1, "consumed_inputs": [0, 0, 0, 1, 1]},
     {"s", "b", "m", "v"}, 1),
    ("Dropout", [("x", X)], {"is_test": 1}, set(), 6),
    ("Relu", [("x", X)], {"consumed_inputs": [0]}, set(), 1),
    ("Concat", [("x", X), ("z", X)], {}, set(), 1),
    ("Gemm", [("a", X[0, 0, :2, :3]), ("w", np.ones((3, 4), np.float32)),
              ("c", np.arange(4, dtype=np.float32))], {"broadcast": 1}, {"w", "c"}, 6),
    ("Upsample", [("x", X)], {"height_scale": 2.0, "width_scale": 3.0, "mode": "nearest"}, set(), 1),
    ("Reshape", [("x", X)], {"shape": [2, 48]}, set(), 1),
    ("Softmax", [("x", X)], {}, set(), 1),
    ("Slice", [("x", X)], {"starts": [1], "ends": [3], "axes": [2]}, set(), 1),
    ("Clip", [("x", X)], {"min": 0.1, "max": 0.5}, set(), 6),
    ("Sum", [("x", X), ("z", X)], {}, set(), 6),
]


@pytest.mark.parametrize("op, inputs, attrs, consts, opset", CONVERTIBLE,
                         ids=[f"{c[0]}-{c[4]}" for c in CONVERTIBLE])
def test_old_opset_matches_onnxruntime_on_the_model_converted_to_opset_7(op, inputs, attrs, consts, opset):
    from onnx import version_converter

    model = single_node_model(op, inputs, attrs, constants=consts, opset=opset)
    feeds = {n: v for n, v in inputs if n not in consts}
    want = run_onnxruntime(version_converter.convert_version(model, 7), feeds)
    got = evaluate_graph(load_onnx(model), feeds)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape, f"{op}-{opset}: shape {g.shape}, reference {w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=f"{op}-{opset}")


def _run(model, feeds):
    return evaluate_graph(load_onnx(model), feeds)


def test_old_opset_forms_without_a_version_adapter_match_numpy():
    """Pad-1 ``paddings``, Tile-1 ``(tiles, axis)``, Cast-1 ``to="INT32"``, Split-1 and Add-6 with
    ``broadcast``/``axis`` (onnx's converter mis-handles that one)."""
    (y,) = _run(single_node_model("Pad", [("x", X)], {"paddings": [0, 0, 1, 2, 0, 0, 2, 1]}, opset=1),
                {"x": X})
    np.testing.assert_array_equal(y, np.pad(X, [(0, 0), (0, 0), (1, 2), (2, 1)]))
    tile = single_node_model("Tile", [("x", X), ("t", np.array(3, np.int64)), ("a", np.array(2, np.int64))],
                             constants={"t", "a"}, opset=1)
    np.testing.assert_array_equal(_run(tile, {"x": X})[0], np.tile(X, (1, 1, 3, 1)))
    (y,) = _run(single_node_model("Cast", [("x", X * 10)], {"to": "INT32"}, opset=1), {"x": X * 10})
    np.testing.assert_array_equal(y, (X * 10).astype(np.int32))
    split = single_node_model("Split", [("x", X)], {"axis": 1, "split": [1, 2]}, opset=1, n_outputs=2)
    a, b = _run(split, {"x": X})
    np.testing.assert_array_equal(a, X[:, :1])
    np.testing.assert_array_equal(b, X[:, 1:])
    c = np.arange(3, dtype=np.float32)
    add = single_node_model("Add", [("x", X), ("c", c)], {"broadcast": 1, "axis": 1}, constants={"c"},
                            opset=6)
    np.testing.assert_array_equal(_run(add, {"x": X})[0], X + c.reshape(3, 1, 1))


def test_old_opset_form_that_cannot_convert_names_node_and_opset():
    per_element = [(n, np.ones((3, 4, 4), np.float32)) for n, _ in STATS]
    model = single_node_model("BatchNormalization", [("x", X)] + per_element, {"is_test": 1, "spatial": 0},
                              constants={"s", "b", "m", "v"}, opset=6)
    with pytest.raises(nnvm.Error, match=r"node batchnormalization_node \(BatchNormalization, opset 6\)"):
        load_onnx(model)
    tile = single_node_model("Tile", [("x", X), ("t", np.array(3, np.int64)), ("a", np.array(7, np.int64))],
                             constants={"t", "a"}, opset=1)
    with pytest.raises(nnvm.Error, match=r"node tile_node \(Tile, opset 1\): axis 7 is out of range"):
        load_onnx(tile)

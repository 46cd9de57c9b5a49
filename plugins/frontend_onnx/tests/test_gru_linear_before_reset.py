"""ONNX GRU with and without ``linear_before_reset``, with biases, against onnxruntime.

With ``linear_before_reset=1`` the recurrent biases of the update and reset gates (``Rbz``, ``Rbr``)
still add to those gates; only ``Rbh`` moves inside ``r * (Rh h + Rbh)``. A converter that dropped
them was off by a few percent, silently.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm

NNVM_PLUGINS = "onnx,llvm-x86"


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_matches_onnxruntime(linear_before_reset, tmp_path):
    rng = np.random.default_rng(0)
    seq, feat, hid = 5, 6, 8
    inits = {"W": rng.uniform(-0.5, 0.5, (1, 3 * hid, feat)), "R": rng.uniform(-0.5, 0.5, (1, 3 * hid, hid)),
             "B": rng.uniform(-0.5, 0.5, (1, 6 * hid))}
    node = helper.make_node("GRU", ["x", "W", "R", "B"], ["Y", "Yh"], hidden_size=hid,
                            linear_before_reset=linear_before_reset)
    graph = helper.make_graph(
        [node], "gru", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, 1, feat])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [seq, 1, 1, hid])],
        initializer=[numpy_helper.from_array(v.astype("float32"), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    path = str(tmp_path / "gru.onnx")
    onnx.save(model, path)
    x = rng.standard_normal((seq, 1, feat)).astype("float32")
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm").run(x)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

"""The MXNet model the byte-level fuzz suite corrupts (``nnvm_testing.frontend_onnx.byte_fuzz``).

MXNet itself only runs in its own venv (seconds to start, minutes to build), so the files are written
here as ``mx.nd.save`` and ``sym.tojson()`` write them: the symbol JSON MXNet 1.9 emits and the NDArray
list format (V2 dense arrays) that ``params.py`` documents and ``tests/test_params.py`` checks against
files MXNet wrote. ``tests/test_fuzz_bytes.py`` checks the model's output against numpy.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from nnvm_frontend_mxnet.params import LIST_MAGIC, V2_MAGIC
from nnvm_testing.frontend_mxnet import attr_string

SHAPE = (1, 2, 4, 4)


def _node(op: str, name: str, inputs=(), **attrs) -> dict:
    return {"op": op, "name": name, "attrs": {k: attr_string(v) for k, v in attrs.items()},
            "inputs": [[i, 0, 0] for i in inputs]}


def symbol_json() -> str:
    """data -> Convolution 3x3 pad 1 (3 filters) -> relu -> FullyConnected (4 units)."""
    nodes = [
        {"op": "null", "name": "data", "attrs": {"__shape__": attr_string(SHAPE)}, "inputs": []},
        _node("null", "conv_weight"), _node("null", "conv_bias"),
        _node("Convolution", "conv", (0, 1, 2), kernel=(3, 3), pad=(1, 1), num_filter=3),
        _node("Activation", "relu", (3,), act_type="relu"),
        _node("null", "fc_weight"), _node("null", "fc_bias"),
        _node("FullyConnected", "fc", (4, 5, 6), num_hidden=4),
    ]
    return json.dumps({"nodes": nodes, "arg_nodes": [0, 1, 2, 5, 6], "node_row_ptr": list(range(9)),
                       "heads": [[7, 0, 0]], "attrs": {"mxnet_version": ["int", 10901]}}, indent=2)


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(50)
    return {"conv_weight": rng.standard_normal((3, 2, 3, 3)), "conv_bias": rng.standard_normal(3),
            "fc_weight": rng.standard_normal((4, 48)), "fc_bias": rng.standard_normal(4)}


def params_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """``mx.nd.save`` of float32 ``arrays`` under ``arg:`` names (what ``save_checkpoint`` writes)."""
    out = [struct.pack("<QQQ", LIST_MAGIC, 0, len(arrays))]
    for a in arrays.values():
        a = np.ascontiguousarray(a, np.float32)
        out.append(struct.pack(f"<Iii{a.ndim}q", V2_MAGIC, 0, a.ndim, *a.shape))
        out.append(struct.pack("<iii", 1, 0, 0) + a.tobytes())  # cpu(0), float32
    out.append(struct.pack("<Q", len(arrays)))
    for name in arrays:
        key = f"arg:{name}".encode()
        out.append(struct.pack("<Q", len(key)) + key)
    return b"".join(out)


def base_model(folder: str) -> dict:
    """``net-symbol.json`` and ``net-0000.params`` in ``folder``, and an input ``x.npy``."""
    symbol = os.path.join(folder, "net-symbol.json")
    params = os.path.join(folder, "net-0000.params")
    with open(symbol, "w") as f:
        f.write(symbol_json())
    with open(params, "wb") as f:
        f.write(params_bytes(weights()))
    x_npy = os.path.join(folder, "x.npy")
    np.save(x_npy, np.random.default_rng(51).standard_normal(SHAPE).astype(np.float32))
    return {"symbol": symbol, "params": params, "x_npy": x_npy}


def reference(x: np.ndarray) -> np.ndarray:
    """The model's output by numpy, for the check that the files really are the model."""
    w = {k: v.astype(np.float32) for k, v in weights().items()}
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    conv = np.zeros((1, 3, 4, 4), np.float64)
    for i in range(3):
        for j in range(3):
            conv += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 4, j:j + 4], w["conv_weight"][:, :, i, j])
    act = np.maximum(conv + w["conv_bias"][None, :, None, None], 0)
    return act.reshape(1, -1) @ w["fc_weight"].T + w["fc_bias"]

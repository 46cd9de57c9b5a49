"""Hostile Keras files for ``tests/test_fuzz_keras.py`` and ``scripts/fuzz.py`` (issue 20).

The base model is written here with h5py and zipfile alone, in the layout Keras 3 itself writes
(``nnvm_frontend_keras.reader`` documents it), so the fuzz tests need no Keras venv: an input
(1, 4, 4, 2), Conv2D (relu) and Conv2D 1x1 joined by Add, Flatten, Dense. Generators take
Hypothesis's ``draw`` like those of ``nnvm_testing.frontend_onnx.fuzz``.
"""

from __future__ import annotations

import copy
import io
import json
import os
import zipfile

import numpy as np
from hypothesis import strategies as st


def _tensor(layer: str, shape: list) -> dict:
    return {"class_name": "__keras_tensor__",
            "config": {"shape": [None, *shape], "dtype": "float32", "keras_history": [layer, 0, 0]}}


def _layer(cls: str, name: str, config: dict, inbound: list | None) -> dict:
    nodes = [] if inbound is None else [{"args": inbound, "kwargs": {}}]
    return {"module": "keras.layers", "class_name": cls, "config": {"name": name, "trainable": True,
                                                                     "dtype": "float32", **config},
            "registered_name": None, "name": name, "inbound_nodes": nodes}


def base_config() -> dict:
    conv = {"kernel_size": [3, 3], "strides": [1, 1], "padding": "same", "data_format": "channels_last",
            "dilation_rate": [1, 1], "groups": 1, "use_bias": True}
    layers = [
        _layer("InputLayer", "x", {"batch_shape": [None, 4, 4, 2], "sparse": False}, None),
        _layer("Conv2D", "conv", dict(conv, filters=3, activation="relu"), [_tensor("x", [4, 4, 2])]),
        _layer("Conv2D", "conv1x1", dict(conv, filters=3, kernel_size=[1, 1], activation="linear"),
               [_tensor("x", [4, 4, 2])]),
        _layer("Add", "add", {}, [[_tensor("conv", [4, 4, 3]), _tensor("conv1x1", [4, 4, 3])]]),
        _layer("Flatten", "flat", {"data_format": "channels_last"}, [_tensor("add", [4, 4, 3])]),
        _layer("Dense", "dense", {"units": 2, "activation": "linear", "use_bias": True},
               [_tensor("flat", [48])]),
    ]
    return {"module": "keras.src.models.functional", "class_name": "Functional",
            "config": {"name": "fuzz", "trainable": True, "layers": layers,
                       "input_layers": [["x", 0, 0]], "output_layers": [["dense", 0, 0]]},
            "registered_name": "Functional"}


def base_weights() -> dict:
    rng = np.random.default_rng(20)
    shapes = {"conv": [(3, 3, 2, 3), (3,)], "conv1x1": [(1, 1, 2, 3), (3,)], "dense": [(48, 2), (2,)]}
    return {name: [rng.standard_normal(s).astype(np.float32) for s in ss] for name, ss in shapes.items()}


def weights_h5_bytes(config: dict, weights: dict) -> bytes:
    """``model.weights.h5`` of a ``.keras`` zip: ``layers/<snake class>[_N]/vars/<i>``, named."""
    import h5py

    from nnvm_frontend_keras.reader import layer_name, snake_case

    buf = io.BytesIO()
    counts: dict = {}
    with h5py.File(buf, "w") as f:
        for layer in config["config"]["layers"]:
            base = snake_case(str(layer.get("class_name", "")))
            n = counts.get(base, 0)
            counts[base] = n + 1
            vars_ = f.create_group(f"layers/{base if n == 0 else f'{base}_{n}'}/vars")
            vars_.attrs["name"] = layer_name(layer)
            for i, w in enumerate(weights.get(layer_name(layer), [])):
                vars_[str(i)] = w
        f.create_group("vars")
    return buf.getvalue()


def write_keras(path: str, config, weights: dict, members: dict | None = None, layout=None) -> str:
    """A ``.keras`` zip of ``config`` (a dict, or raw bytes) and ``weights``, laid out as the layers of
    ``layout`` (default: ``config``; a mutated config may have no layers to lay them out by);
    ``members`` replace or add zip members (``None`` drops one)."""
    files = {"metadata.json": json.dumps({"keras_version": "3.15.1"}).encode(),
             "config.json": config if isinstance(config, bytes) else json.dumps(config).encode()}
    if "model.weights.h5" not in (members or {}):
        files["model.weights.h5"] = weights_h5_bytes(layout or config, weights)
    files.update(members or {})
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            if data is not None:
                z.writestr(name, data)
    return path


def write_h5(path: str, config: dict, weights: dict, layout=None) -> str:
    """A legacy ``.h5``: ``model_config`` attribute and ``model_weights/<layer>/<layer>/<weight>``,
    laid out as the layers of ``layout`` (default: ``config``)."""
    import h5py

    from nnvm_frontend_keras.reader import layer_name

    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(config)
        f.attrs["keras_version"] = "3.15.1"
        f.attrs["backend"] = "jax"
        g = f.create_group("model_weights")
        for layer in (layout or config)["config"]["layers"]:
            name = layer_name(layer)
            lg = g.create_group(name)
            names = [f"{name}/w{i}" for i in range(len(weights.get(name, [])))]
            lg.attrs["weight_names"] = names
            for wname, w in zip(names, weights.get(name, []), strict=True):
                lg[wname] = w
    return path


class _Models(dict):
    """The base models; a short repr, so that a failing Hypothesis case does not print their bytes."""

    def __repr__(self) -> str:
        return f"<fuzz models: {', '.join(self)}>"


def base_models(folder: str) -> dict:
    """The base model as ``.keras`` and ``.h5`` in ``folder``, a second one (4 filters) to splice with,
    and an NHWC input."""
    config, weights = base_config(), base_weights()
    keras_path = write_keras(os.path.join(folder, "base.keras"), config, weights)
    h5_path = write_h5(os.path.join(folder, "base.h5"), config, weights)
    other = copy.deepcopy(config)
    other["config"]["layers"][1]["config"]["filters"] = 4
    write_keras(os.path.join(folder, "other.keras"), other, weights)
    write_h5(os.path.join(folder, "other.h5"), other, weights)
    x_npy = os.path.join(folder, "x.npy")
    np.save(x_npy, np.random.default_rng(21).standard_normal((1, 4, 4, 2)).astype(np.float32))

    def read(name):
        with open(os.path.join(folder, name), "rb") as f:
            return f.read()

    return _Models(config=config, weights=weights, keras=keras_path, h5=h5_path, x_npy=x_npy,
                   keras_bytes=read("base.keras"), h5_bytes=read("base.h5"),
                   other_keras_bytes=read("other.keras"), other_h5_bytes=read("other.h5"))


_ODD = st.sampled_from([None, 0, -1, 2**40, "", "nowhere", [], {}, [[]], 1.5, True, [None, -3]])


def mutate_config(draw, config: dict, weights: dict) -> tuple:
    """``(config, weights, members)`` with one structural change: a field of a wrong type, a missing
    key, an unknown layer class, an inbound node pointing nowhere, a cycle, weights of a wrong shape
    or missing, a zip member that is not HDF5 or JSON."""
    cfg = copy.deepcopy(config)
    w = {k: list(v) for k, v in weights.items()}
    members: dict = {}
    layers = cfg["config"]["layers"]
    kind = draw(st.sampled_from(["field", "drop_key", "class", "inbound", "cycle", "weight_shape",
                                 "weight_missing", "weight_extra", "member", "io_layers", "top",
                                 "duplicate_name", "dtype"]))
    i = draw(st.integers(0, len(layers) - 1))
    layer = layers[i]
    if kind == "field":
        key = draw(st.sampled_from(sorted(layer["config"])))
        layer["config"][key] = draw(_ODD)
    elif kind == "drop_key":
        where = draw(st.sampled_from(["layer", "config"]))
        target = layer if where == "layer" else layer["config"]
        target.pop(draw(st.sampled_from(sorted(target))), None)
    elif kind == "class":
        layer["class_name"] = draw(st.sampled_from(["NoSuchLayer", "", "Functional", "Lambda", "Conv3D",
                                                    "LSTM", "TFOpLambda", "Dense"]))
    elif kind == "inbound":
        nodes = layer["inbound_nodes"]
        if nodes:
            args = nodes[0]["args"]
            t = args[0][0] if isinstance(args[0], list) else args[0]
            t["config"]["keras_history"] = draw(st.sampled_from(
                [["nowhere", 0, 0], ["conv", 5, 0], ["conv", 0, 9], [], None, "conv", ["dense", 0, 0]]))
        else:
            layer["inbound_nodes"] = [{"args": [_tensor("dense", [2])], "kwargs": {}}]
    elif kind == "cycle":
        layers[1]["inbound_nodes"] = [{"args": [_tensor("add", [4, 4, 3])], "kwargs": {}}]
    elif kind == "weight_shape":
        name = draw(st.sampled_from(sorted(w)))
        j = draw(st.integers(0, len(w[name]) - 1))
        w[name][j] = np.zeros(draw(st.sampled_from([(), (0,), (7,), (2, 2), (3, 3, 3, 3), (48, 3)])),
                              draw(st.sampled_from([np.float32, np.float64, np.int8, np.float16])))
    elif kind == "weight_missing":
        name = draw(st.sampled_from(sorted(w)))
        w[name] = w[name][:draw(st.integers(0, len(w[name]) - 1))]
    elif kind == "weight_extra":
        w[draw(st.sampled_from(["flat", "add", "x", "conv"]))] = [np.ones(3, np.float32)] * 3
    elif kind == "member":
        name = draw(st.sampled_from(["model.weights.h5", "config.json", "metadata.json"]))
        members[name] = draw(st.sampled_from([None, b"", b"not hdf5", b"\x89HDF\r\n\x1a\n" + b"\0" * 40,
                                              b"[1, 2]", b"\xff\xfe", b"{\"keras_version\": 3}"]))
    elif kind == "io_layers":
        key = draw(st.sampled_from(["input_layers", "output_layers"]))
        cfg["config"][key] = draw(st.sampled_from([[["nowhere", 0, 0]], [], None, ["dense", 0, 0],
                                                   [["dense", 3, 0]], [["x", 0, 0], ["x", 0, 0]], "dense"]))
    elif kind == "top":
        cfg["config"]["layers"] = draw(st.sampled_from([[], None, {}, [layers[0]], [None], ["dense"]]))
    elif kind == "duplicate_name":
        layer["name"] = layer["config"]["name"] = layers[(i + 1) % len(layers)]["name"]
    else:
        layer["config"]["dtype"] = draw(st.sampled_from(["float16", "int8", "string", "bfloat16", "mixed"]))
    return cfg, w, members

"""What users see: the plugin as the core finds it, one sentence for a bad file (exit 1 from the CLI),
every unsupported layer listed at once by name and class, and live keras.Model objects by duck typing.
The files here are written with json and h5py in the layouts Keras uses (see ``reader``); the tests
against Keras itself are in ``test_layers.py``."""

from __future__ import annotations

import io
import json
import zipfile

import h5py
import numpy as np
import pytest

import nnvm
from nnvm.cli import main
from nnvm.errors import ModelLoadError, UnsupportedOperatorError
from nnvm.frontend import find_frontend


def _tensor(layer, node=0, index=0):
    return {"class_name": "__keras_tensor__", "config": {"keras_history": [layer, node, index]}}


def _layer(cls, name, inputs, **config):
    arg = inputs if isinstance(inputs, list) else _tensor(inputs)
    nodes = [{"args": [arg], "kwargs": {}}] if inputs else []
    config = {"name": name, "trainable": True, "dtype": "float32", **config}
    return {"module": "keras.layers", "class_name": cls, "name": name, "config": config,
            "inbound_nodes": nodes}


def _functional(layers, out):
    inp = {"class_name": "InputLayer", "name": "x", "inbound_nodes": [],
           "config": {"name": "x", "batch_shape": [None, 4, 4, 2], "dtype": "float32"}}
    return {"class_name": "Functional", "config": {"name": "m", "layers": [inp, *layers],
                                                   "input_layers": [["x", 0, 0]],
                                                   "output_layers": [[out, 0, 0]]}}


def _write_keras(path, config, weights: dict, named: bool = True, version="3.15.1"):
    """A .keras zip; ``weights`` maps the vars group path (``conv2d``) to (layer name, arrays)."""
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        for key, (name, arrays) in weights.items():
            g = f.create_group(f"layers/{key}/vars")
            if named:
                g.attrs["name"] = name
            for i, a in enumerate(arrays):
                g[str(i)] = a
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
        z.writestr("metadata.json", json.dumps({"keras_version": version}))
        z.writestr("model.weights.h5", buf.getvalue())
    return str(path)


def _conv_model():
    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(3, 3, 2, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    config = _functional([_layer("Conv2D", "c", "x", filters=3, kernel_size=[3, 3], strides=[1, 1],
                                 padding="same", dilation_rate=[1, 1], groups=1, activation="relu",
                                 use_bias=True, data_format="channels_last"),
                          _layer("Flatten", "f", "c")], "f")
    return config, w, b


def _numpy_conv_relu_flat(x, w, b):
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    out = np.zeros((1, 4, 4, 3), np.float32)
    for i in range(4):
        for j in range(4):
            out[0, i, j] = np.tensordot(xp[0, i:i + 3, j:j + 3], w, axes=3) + b
    return np.maximum(out, 0).reshape(1, -1)


def test_registered_as_keras_frontend():
    (row,) = [r for r in nnvm.plugins()["frontend"] if r["name"] == "keras"]
    assert row["distribution"] == "nnvm-frontend-keras"


@pytest.mark.parametrize("named", [True, False])
def test_keras_zip_with_and_without_vars_names(tmp_path, named):
    """Files before Keras 3.8 do not name the layer in each vars group: the path then says which."""
    config, w, b = _conv_model()
    path = _write_keras(tmp_path / "m.keras", config, {"conv2d": ("c", [w, b])}, named=named)
    assert find_frontend(path).name == "keras"
    x = np.random.default_rng(1).normal(size=(1, 4, 4, 2)).astype(np.float32)
    (got,) = nnvm.compile(path, target="llvm").run(x)
    np.testing.assert_allclose(got, _numpy_conv_relu_flat(x, w, b), rtol=1e-5, atol=1e-5)


def test_legacy_h5_keras2_names_and_inbound_nodes(tmp_path):
    """Keras 2: ``[[name, node, index, kwargs]]`` inbound nodes and ``:0`` weight names."""
    config, w, b = _conv_model()
    for lay in config["config"]["layers"][1:]:
        src = lay["inbound_nodes"][0]["args"][0]["config"]["keras_history"]
        lay["inbound_nodes"] = [[[src[0], 0, 0, {}]]]
        del lay["module"]
    path = tmp_path / "m.h5"
    with h5py.File(path, "w") as f:
        f.attrs["keras_version"] = "2.15.0"
        f.attrs["model_config"] = json.dumps(config).encode()
        g = f.create_group("model_weights/c")
        g.attrs["weight_names"] = [b"c/kernel:0", b"c/bias:0"]
        g["c/kernel:0"], g["c/bias:0"] = w, b
    x = np.random.default_rng(2).normal(size=(1, 4, 4, 2)).astype(np.float32)
    (got,) = nnvm.compile(str(path), target="llvm").run(x)
    np.testing.assert_allclose(got, _numpy_conv_relu_flat(x, w, b), rtol=1e-5, atol=1e-5)


def test_unsupported_layers_are_listed_at_once_by_name_and_class(tmp_path):
    config = _functional([_layer("ConvLSTM2D", "rnn", "x"), _layer("MyLayer", "mine", "rnn"),
                          _layer("MyLayer", "mine2", "mine"), _layer("Flatten", "f", "mine2")], "f")
    path = _write_keras(tmp_path / "m.keras", config, {})
    with pytest.raises(UnsupportedOperatorError) as exc:
        nnvm.load_model(path)
    msg = str(exc.value)
    assert "2 unsupported operators" in msg
    assert "ConvLSTM2D (nodes: rnn)" in msg and "MyLayer (nodes: mine, mine2)" in msg


def test_missing_weights_name_the_layer(tmp_path):
    config, _, _ = _conv_model()
    path = _write_keras(tmp_path / "m.keras", config, {})
    with pytest.raises(nnvm.errors.Error, match=r"layer c \(Conv2D\): has 0 weights"):
        nnvm.load_model(path)


@pytest.mark.parametrize("cls,config,words", [
    ("Embedding", {"input_dim": 5, "output_dim": 2, "mask_zero": True}, "mask_zero=True is not supported"),
    ("Conv3D", {"filters": 2, "kernel_size": [1, 1, 1], "groups": 2}, "groups=2 is not supported"),
    ("MultiHeadAttention", {"num_heads": 1, "use_gate": True}, "use_gate=True is not supported"),
    ("Bidirectional", {"layer": {"class_name": "Dense", "config": {"units": 2}}}, "wraps a 'Dense' layer"),
])
def test_unsupported_variants_of_supported_layers_name_the_layer(tmp_path, cls, config, words):
    """Embedding, Conv3D, MultiHeadAttention and Bidirectional refuse what they cannot do in one sentence
    naming the layer, instead of a wrong answer."""
    path = _write_keras(tmp_path / "m.keras", _functional([_layer(cls, "l", "x", **config)], "l"), {})
    with pytest.raises(nnvm.errors.Error, match=rf"layer l \({cls}\): {words}"):
        nnvm.load_model(path)


@pytest.mark.parametrize("kind", ["garbage.keras", "truncated.keras", "nozip.h5", "noconfig.h5",
                                  "empty.keras"])
def test_corrupt_file_is_one_sentence_and_exit_1(tmp_path, capsys, kind):
    config, w, b = _conv_model()
    good = _write_keras(tmp_path / "good.keras", config, {"conv2d": ("c", [w, b])})
    path = tmp_path / kind
    if kind == "garbage.keras":
        path.write_bytes(b"this is not a model")
    elif kind == "truncated.keras":
        data = open(good, "rb").read()
        path.write_bytes(data[: len(data) // 2])
    elif kind == "nozip.h5":
        path.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 100)
    elif kind == "noconfig.h5":
        with h5py.File(path, "w") as f:
            f["w"] = np.zeros(3)
    else:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("config.json", "{}")
    with pytest.raises(ModelLoadError) as exc:
        nnvm.load_model(str(path))
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)
    assert main(["compile", str(path), "--target", "llvm", "-o", str(tmp_path / "out.so")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path) in err


class _Var:
    def __init__(self, value):
        self.value = value

    def numpy(self):
        return self.value


class _Layer:
    def __init__(self, name, weights):
        self.name, self.weights = name, [_Var(w) for w in weights]


def test_live_keras_model_by_duck_typing():
    """A keras.Model is recognised without importing keras: its config and weights are read from it."""
    config, w, b = _conv_model()
    cls = type("Functional", (), {"__module__": "keras.src.models.functional"})
    model = cls()
    model.layers = [_Layer("x", []), _Layer("c", [w, b]), _Layer("f", [])]
    model.weights = [v for layer in model.layers for v in layer.weights]
    model.get_config = lambda: config["config"]
    assert find_frontend(model).name == "keras"
    x = np.random.default_rng(3).normal(size=(1, 4, 4, 2)).astype(np.float32)
    (got,) = nnvm.compile(model, target="llvm").run(x)
    np.testing.assert_allclose(got, _numpy_conv_relu_flat(x, w, b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("damage, words", [
    ("no_layers", "has no list of layers"),
    ("input_missing", "do not name its layers"),
    ("history_nowhere", "which is not a layer of it"),
    ("history_malformed", "malformed inbound_nodes"),
    ("duplicate", "two layers named"),
    ("shape", "not a list of sizes"),
    ("dtype", "dtype 'string'"),
])
def test_malformed_config_is_one_sentence(tmp_path, damage, words):
    """Damaged configs found by ``tests/test_fuzz_keras.py``: each was an internal error (a KeyError or
    TypeError in the importer's walk) before the reader checked the config's structure."""
    from nnvm_testing.frontend_keras.fuzz import base_config, base_weights, write_keras

    cfg = base_config()
    layers = cfg["config"]["layers"]
    if damage == "no_layers":
        cfg["config"]["layers"] = []
    elif damage == "input_missing":
        cfg["config"]["input_layers"] = [["nowhere", 0, 0]]
    elif damage == "history_nowhere":
        layers[1]["inbound_nodes"][0]["args"][0]["config"]["keras_history"] = ["nowhere", 0, 0]
    elif damage == "history_malformed":
        layers[1]["inbound_nodes"][0]["args"][0]["config"]["keras_history"] = None
    elif damage == "duplicate":
        layers[2]["name"] = layers[2]["config"]["name"] = "conv"
    elif damage == "shape":
        layers[0]["config"]["batch_shape"] = [None, "four", 4, 2]
    else:
        layers[0]["config"]["dtype"] = "string"
    path = write_keras(str(tmp_path / "m.keras"), cfg, base_weights(), layout=base_config())
    with pytest.raises(ModelLoadError) as info:
        nnvm.load_model(path)
    assert words in str(info.value) and path in str(info.value) and "\n" not in str(info.value)
    assert main(["compile", path, "--target", "llvm", "-o", str(tmp_path / "m.so")]) == 1

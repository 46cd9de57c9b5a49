"""Reading Keras models without keras: ``.keras`` zips, legacy ``.h5`` files and live ``keras.Model``s.

Every source becomes one ``KerasModel``: the model config (the JSON Keras writes, a Functional or
Sequential model whose layers may be models themselves), the Keras version that wrote it (hard_sigmoid
changed its formula between Keras 2 and 3) and the weights of every layer, keyed by the layer's path
(the names of the models it is nested in, then its own name), as a list in Keras's creation order
(for BatchNormalization: [gamma] [beta] moving_mean moving_variance).

Where the weights are:
- ``.keras``: ``model.weights.h5`` inside the zip holds ``layers/<snake_case class>[_N]/vars/<i>``,
  ``N`` counting the layers of one class in order within each container (InputLayers counted in
  Functional models; a Sequential's input is not a layer); nested models keep their layers under their
  own ``layers/``. Files from Keras 3.8 on also name the layer in the ``vars`` group's ``name``
  attribute, which is used when present.
- ``.h5``: ``model_weights/<layer>`` lists its ``weight_names`` (``<layer>/<weight>``, nested models
  ``<model>/<layer>/<weight>``; Keras 2 appends ``:0``); the datasets lie at those paths in the group.
"""

from __future__ import annotations

import io
import json
import os
import re
import zipfile
from dataclasses import dataclass, field

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import read_isolated, reading

MODEL_CLASSES = ("Functional", "Sequential", "Model")


@dataclass
class KerasModel:
    config: dict  # {"class_name": "Functional" | "Sequential", "config": {...}}
    keras_version: str
    weights: dict = field(default_factory=dict)  # (model path..., layer name) -> [np.ndarray]
    where: str = "the Keras model"

    @property
    def major(self) -> int:
        m = re.match(r"\d+", self.keras_version or "")
        return int(m.group()) if m else 3


def is_model_config(cfg) -> bool:
    return (isinstance(cfg, dict) and cfg.get("class_name") in MODEL_CLASSES
            and "layers" in cfg.get("config", {}))


def snake_case(name: str) -> str:
    """Keras's ``to_snake_case``: ``BatchNormalization`` -> ``batch_normalization``, ``Conv2D`` ->
    ``conv2d``."""
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    s = re.sub(r"([a-z])([A-Z])", r"\1_\2", s).lower()
    return s if s[:1] != "_" else "private" + s


def layer_name(layer: dict) -> str:
    return layer.get("name") or layer.get("config", {}).get("name", "")


def is_ops_node(layer: dict) -> bool:
    """A ``keras.ops`` call inside a functional graph: ``.keras`` files give its module
    (``keras.src.ops.numpy``). Legacy ``.h5`` configs drop modules; there an operation's config holds
    its name alone (every layer's also has ``trainable`` and ``dtype``) and its call passes its operands
    as separate arguments (a merge layer takes one list). It has no weights."""
    module = layer.get("module")
    if module is not None:
        return str(module).startswith("keras.src.ops")
    if layer.get("class_name") == "InputLayer" or not set(layer.get("config", {})) <= {"name"}:
        return False
    nodes = layer.get("inbound_nodes") or []
    args = nodes[0].get("args", []) if nodes and isinstance(nodes[0], dict) else []
    return len(args) != 1 or not isinstance(args[0], dict | list)


# -- sources ----------------------------------------------------------------------------------------
def read_model(model) -> KerasModel:
    if is_keras_model(model):
        return _from_live(model)
    if not isinstance(model, str | os.PathLike):
        raise ModelLoadError(f"cannot read a Keras model from a {type(model).__name__} object")
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ModelLoadError(f"{path}: no such file")
    return _read_keras_zip(path) if zipfile.is_zipfile(path) else _read_h5(path)


# -- the shape of a config ----------------------------------------------------------------------------
def check_structure(config: dict, where: str, path: tuple = ()) -> None:
    """Refuse, in one sentence, a model config whose structure the importer cannot walk: layers that
    are not objects with a string class name and name, inbound nodes that are not lists of tensor
    references ``[layer, node, index]`` naming layers of the model, inputs and outputs that name no
    layer, repeated layer names, input shapes that are not lists of sizes. A file Keras wrote always
    passes; this catches damaged or hand-edited files before the walk trips over them."""
    model = "/".join(path) or "the model"
    cfg = config["config"]
    layers = cfg.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ModelLoadError(f"{where}: {model} has no list of layers in its config")
    names = set()
    for k, lay in enumerate(layers):
        if not isinstance(lay, dict) or not isinstance(lay.get("class_name"), str) \
                or not isinstance(lay.get("config", {}), dict) or not isinstance(layer_name(lay), str) \
                or not layer_name(lay):
            raise ModelLoadError(f"{where}: layer {k} of {model} is not a layer "
                                 "(no class_name, name or config)")
        name = layer_name(lay)
        if name in names:
            raise ModelLoadError(f"{where}: {model} has two layers named {name!r}")
        names.add(name)
        if is_model_config(lay):
            check_structure(lay, where, (*path, name))
        if lay["class_name"] == "InputLayer" or not path and k == 0:
            c = lay.get("config", {})
            shape = c.get("batch_shape") or c.get("batch_input_shape")
            if shape is not None and (not isinstance(shape, list) or not all(
                    d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in shape)):
                raise ModelLoadError(f"{where}: input layer {name!r} has the shape {shape!r}, "
                                     "not a list of sizes")
    for lay in layers:
        for ref in _node_refs(lay, where):
            if ref[0] not in names and config["class_name"] != "Sequential":
                raise ModelLoadError(f"{where}: layer {layer_name(lay)!r} of {model} reads a tensor of "
                                     f"{ref[0]!r}, which is not a layer of it")
    if config["class_name"] == "Sequential":
        return
    for key in ("input_layers", "output_layers"):
        refs = _io_refs(cfg.get(key))
        if refs is None or not refs or any(r[0] not in names for r in refs):
            raise ModelLoadError(f"{where}: the {key} of {model} ({cfg.get(key)!r}) do not name its layers")


def _is_triple(r) -> bool:
    return (isinstance(r, list | tuple) and len(r) >= 3 and isinstance(r[0], str)
            and all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in r[1:3]))


def _io_refs(spec) -> list | None:
    """``input_layers``/``output_layers`` as triples (a bare triple, a list or a dict of them), or None."""
    if isinstance(spec, dict):
        spec = list(spec.values())
    if _is_triple(spec):
        spec = [spec]
    if not isinstance(spec, list) or not all(_is_triple(r) for r in spec):
        return None
    return spec


def _node_refs(lay: dict, where: str) -> list:
    """The ``[layer, node, index]`` references of every inbound node of ``lay`` (Keras 3's
    ``{"args", "kwargs"}`` form, with ``__keras_tensor__`` objects anywhere in its args, or Keras 2's
    lists of ``[name, node, index, kwargs]``); refuses a node of any other shape."""
    nodes = lay.get("inbound_nodes", [])
    bad = ModelLoadError(f"{where}: layer {layer_name(lay)!r} has malformed inbound_nodes")
    if not isinstance(nodes, list):
        raise bad
    refs = []

    def walk(a):
        if isinstance(a, dict) and a.get("class_name") == "__keras_tensor__":
            h = a.get("config", {}).get("keras_history") if isinstance(a.get("config"), dict) else None
            if not _is_triple(h):
                raise bad
            refs.append(h)
        elif isinstance(a, list | tuple):
            for x in a:
                walk(x)

    for node in nodes:
        if isinstance(node, dict):
            if not isinstance(node.get("args", []), list) or not isinstance(node.get("kwargs") or {}, dict):
                raise bad
            walk(node.get("args", []))
        elif isinstance(node, list) and all(_is_triple(e) for e in node):
            refs.extend(node)
        else:
            raise bad
    return refs


def is_keras_model(obj) -> bool:
    """True for a live ``keras.Model`` (by duck typing: keras is not imported here)."""
    return (type(obj).__module__.split(".")[0] in ("keras", "tf_keras")
            and callable(getattr(obj, "get_config", None)) and hasattr(obj, "layers")
            and hasattr(obj, "weights"))


def looks_like_keras(model) -> bool:
    """``Frontend.accepts``: a live keras.Model, a zip with ``config.json``, or an HDF5 file with a
    ``model_config`` attribute; cheap, and never raises."""
    if is_keras_model(model):
        return True
    if not isinstance(model, str | os.PathLike):
        return False
    path = os.fspath(model)
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                return "config.json" in z.namelist()
        with open(path, "rb") as f:
            if f.read(8) != b"\x89HDF\r\n\x1a\n":
                return False
        import h5py

        with h5py.File(path, "r") as f:
            return "model_config" in f.attrs
    except Exception:  # anything unreadable is simply not ours
        return False


def _from_live(model) -> KerasModel:
    import sys

    cls = type(model).__name__
    cfg = {"class_name": "Sequential" if cls == "Sequential" else "Functional", "config": _safe_config(model)}
    if not is_model_config(cfg):
        raise ModelLoadError(f"the {cls} object is not a Functional or Sequential model "
                             f"(subclassed models have no config to read)")
    weights: dict = {}

    def walk(container, path):
        for layer in container.layers:
            key = (*path, layer.name)
            if hasattr(layer, "layers") and is_model_config({"class_name": "Functional",
                                                             "config": _safe_config(layer)}):
                walk(layer, key)
            else:
                weights[key] = [_numpy(w) for w in layer.weights]

    walk(model, ())
    keras = sys.modules.get(type(model).__module__.split(".")[0])
    return KerasModel(cfg, str(getattr(keras, "__version__", "3")), weights, f"the {cls} model")


def _numpy(w) -> np.ndarray:
    """A Keras variable's value (``Variable.numpy()``, or anything numpy converts)."""
    return np.asarray(w.numpy() if hasattr(w, "numpy") else w)


def _safe_config(layer) -> dict:
    try:
        return layer.get_config()
    except Exception:
        return {}


def _read_keras_zip(path: str) -> KerasModel:
    with reading(path, "not a readable .keras file"):
        with zipfile.ZipFile(path) as z:
            names = set(z.namelist())
            for need in ("config.json", "model.weights.h5"):
                if need not in names:
                    raise ModelLoadError(f"{path}: not a Keras model file (the zip has no {need})")
            config = json.loads(z.read("config.json"))
            meta = json.loads(z.read("metadata.json")) if "metadata.json" in names else {}
            data = z.read("model.weights.h5")
    if not is_model_config(config):
        raise ModelLoadError(f"{path}: config.json holds no Functional or Sequential model")
    check_structure(config, path)
    import h5py

    model = KerasModel(config, str(meta.get("keras_version", "3") if isinstance(meta, dict) else "3"), {},
                       path)
    with reading(path, "model.weights.h5 cannot be read"):  # a corrupt HDF5 image inside the zip
        with h5py.File(io.BytesIO(data), "r") as f:
            _zip_weights(f, config, (), model, path)
    return model


def _zip_weights(group, config: dict, path: tuple, model: KerasModel, where: str) -> None:
    """Fill ``model.weights`` from the container ``group`` (holding ``layers/``) of ``config``."""
    layers = config["config"]["layers"]
    holder = group.get("layers")
    by_name = {}
    if holder is not None:
        for key in holder:
            vars_ = holder[key].get("vars")
            if vars_ is not None and "name" in vars_.attrs:
                name = vars_.attrs["name"]
                by_name[name.decode() if isinstance(name, bytes) else str(name)] = holder[key]
    counts: dict = {}
    sequential = config["class_name"] == "Sequential"
    for layer in layers:
        cls = layer.get("class_name", "")
        if is_ops_node(layer) or (sequential and cls == "InputLayer"):
            continue
        base = snake_case(cls)
        n = counts.get(base, 0)
        counts[base] = n + 1
        name = layer_name(layer)
        sub = by_name.get(name)
        if sub is None and holder is not None:
            sub = holder.get(base if n == 0 else f"{base}_{n}")
        if is_model_config(layer):
            if sub is not None:
                _zip_weights(sub, layer, (*path, name), model, where)
            continue
        model.weights[(*path, name)] = _group_vars(sub) if sub is not None else []


# HDF5 lists a layer's held objects alphabetically; MultiHeadAttention's and Bidirectional's are put
# back in the order of their ``weights`` (and of the legacy .h5 file): query, key, value, output; forward,
# backward.
_HELD_ORDER = {"query_dense": 1, "key_dense": 2, "value_dense": 3, "output_dense": 4, "forward_layer": 5,
               "backward_layer": 6}


def _group_vars(group) -> list:
    """A layer's variables: its own ``vars/<i>``, then those of the objects it holds (an RNN's ``cell``)."""
    arrays = []
    if "vars" in group:
        vars_ = group["vars"]
        arrays = [np.asarray(vars_[str(i)]) for i in range(len(vars_))]
    for key in sorted(group, key=lambda k: _HELD_ORDER.get(k, 0)):
        if key != "vars" and hasattr(group[key], "keys"):
            arrays.extend(_group_vars(group[key]))
    return arrays


def _read_h5(path: str) -> KerasModel:
    """A legacy ``.h5``, read first in a child process: HDF5 loops forever on some damaged files."""
    read_isolated(path, _read_h5_here, "not a readable Keras .h5 file")
    return _read_h5_here(path)


def _read_h5_here(path: str) -> KerasModel:
    import h5py

    try:
        f = h5py.File(path, "r")
    except OSError:
        raise ModelLoadError(f"{path}: not a Keras model file (neither a .keras zip nor HDF5)") from None
    # Every weight is read (``np.asarray``) inside the block: h5py reads datasets lazily, and a damaged
    # heap or B-tree shows only then, as a RuntimeError or OSError of h5py's.
    with reading(path, "not a readable Keras .h5 file"), f:
        raw = f.attrs.get("model_config")
        if raw is None:
            raise ModelLoadError(f"{path}: the HDF5 file has no model_config (a weights-only file?)")
        config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        if not is_model_config(config):
            raise ModelLoadError(f"{path}: model_config holds no Functional or Sequential model")
        check_structure(config, path)
        version = f.attrs.get("keras_version", "2")
        version = version.decode() if isinstance(version, bytes) else str(version)
        model = KerasModel(config, version, {}, path)
        group = f["model_weights"] if "model_weights" in f else f
        _h5_weights(group, config, model)
    return model


def _h5_weights(group, config: dict, model: KerasModel) -> None:
    """Weights of every layer of ``config`` (nested models included) from a legacy ``model_weights``."""
    nested = _nested_paths(config, ())
    for layer in config["config"]["layers"]:
        name = layer_name(layer)
        if name not in group:
            continue
        g = group[name]
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in g.attrs.get("weight_names", [])]
        if is_model_config(layer):
            # "<model>/<layer>/<weight>": regroup by the inner layer, keeping the listed order.
            for wname in names:
                parts = wname.split("/")
                owner = nested.get((name, *parts[1:-1])) or nested.get((name, parts[-2]))
                if owner is None:
                    raise ModelLoadError(f"{model.where}: weight {wname!r} of nested model {name!r} "
                                         f"belongs to no layer of it")
                model.weights.setdefault(owner, []).append(np.asarray(g[wname]))
        else:
            model.weights[(name,)] = [np.asarray(g[w]) for w in names]


def _nested_paths(config: dict, path: tuple) -> dict:
    """``{(outer model, ..., layer name): its weights key}`` for the layers inside nested models,
    also under ``(outer model, layer name)`` (Keras writes only the first and last names)."""
    out = {}
    for layer in config["config"]["layers"]:
        name = layer_name(layer)
        if is_model_config(layer):
            inner = _nested_paths(layer, (*path, name))
            out.update(inner)
        elif path:
            out[(*path, name)] = (*path, name)
            out[(path[0], name)] = (*path, name)
    return out

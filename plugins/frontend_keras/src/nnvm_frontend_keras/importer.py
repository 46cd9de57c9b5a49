"""Keras model config + weights -> nnvm ``Graph``.

The steps: read the model (``reader``); walk its config (nested models included) and report every
layer class we do not convert at once; then convert the layers in graph order through the converter
table (``context.CONVERTERS``). A nested model is inlined where it is called: its input layers take the
caller's tensors, and its layers' weights are found under its own name.

Layout: the user feeds NHWC, as Keras takes it. Converters that compute on channels (convolution,
pooling, BatchNormalization) take their input channels-first through ``Context.first`` and leave their
output channels-first; elementwise layers keep whatever layout their inputs share; only layers whose
meaning depends on the axis order (Flatten, Reshape, Dense on 4-D, graph outputs) take the tensor
back channels-last through ``Context.last``. So transposes appear at the edges only, not between two
convolutions.
"""

from __future__ import annotations

from nnvm.errors import ModelLoadError
from nnvm.frontend import bind_input, call_converter, check_shape_keys, check_supported
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.ir import Graph
from nnvm.tir.expr import ALL_DTYPES
from nnvm_frontend_keras import (  # noqa: F401  (fill CONVERTERS)
    convert_attention,
    convert_layers,
    convert_ops,
    convert_rnn,
)
from nnvm_frontend_keras.context import CONVERTERS, Context, op_key
from nnvm_frontend_keras.reader import KerasModel, is_model_config, is_ops_node, layer_name, read_model


def load_keras(model, shapes: dict | None = None) -> Graph:
    """The nnvm graph of a Keras model: a ``.keras`` or ``.h5`` path, or a live ``keras.Model``.

    ``shapes`` maps input layer names to shapes (NHWC, batch included) and binds unknown dimensions;
    an unknown batch dimension is 1.
    """
    km = read_model(model)
    where = km.where
    _check_supported(km)
    b = GraphBuilder(name=km.config["config"].get("name") or "keras_model")
    ctx = Context(b, km)
    inputs = _input_layers(km.config)
    shapes = check_shape_keys(shapes, [layer_name(lay) for lay in inputs], where)
    args = []
    for lay in inputs:
        name = layer_name(lay)
        declared = _declared_shape(lay, where)
        dtype = lay["config"].get("dtype", "float32")
        dtype = dtype if isinstance(dtype, str) else "float32"
        if dtype not in ALL_DTYPES:
            raise ModelLoadError(f"{where}: input layer {name!r} has dtype {dtype!r}, which nnvm does not "
                                 f"support ({', '.join(ALL_DTYPES)})")
        args.append(b.input(name, bind_input(name, declared, shapes, where), dtype))
    outs = _run_model(ctx, km.config, (), args)
    for v in outs:
        b.output(ctx.last(v) if v in ctx.cf else v)
    return b.build()


# -- the walk -----------------------------------------------------------------------------------------
def _run_model(ctx: Context, config: dict, path: tuple, args: list) -> list:
    """Convert the layers of the model ``config`` (at ``path`` of nested names) applied to ``args``;
    returns its output values."""
    if config["class_name"] == "Sequential":
        return _run_sequential(ctx, config, path, args)
    cfg = config["config"]
    layers = cfg["layers"]
    env: dict = {}  # (layer, node index, tensor index) -> value
    input_refs = _refs(cfg.get("input_layers"))
    if len(input_refs) != len(args):
        raise ModelLoadError(f"{ctx.km.where}: model {cfg.get('name')!r} takes {len(input_refs)} inputs, "
                             f"called with {len(args)}")
    for ref, v in zip(input_refs, args):
        env[ref] = v
    # Layers may be called several times (shared layers); convert node by node once inputs exist.
    pending = []
    for lay in layers:
        if lay.get("class_name") == "InputLayer":
            continue
        for k, node in enumerate(_inbound(lay)):
            pending.append((lay, k, node))
    while pending:
        waiting = []
        for lay, k, node in pending:
            refs = [a for a in _flat(node[0]) if isinstance(a, tuple)]
            if all(r in env for r in refs):
                outs = _call_layer(ctx, lay, path, node, env)
                for i, v in enumerate(outs):
                    env[(layer_name(lay), k, i)] = v
            else:
                waiting.append((lay, k, node))
        if len(waiting) == len(pending):
            missing = sorted({r[0] for _, _, n in waiting for r in _flat(n[0])
                              if isinstance(r, tuple) and r not in env})
            raise ModelLoadError(f"{ctx.km.where}: layers read tensors of {', '.join(missing)}, which no "
                                 f"layer of model {cfg.get('name')!r} produces")
        pending = waiting
    outs = []
    for ref in _refs(cfg.get("output_layers")):
        if ref not in env:
            raise ModelLoadError(f"{ctx.km.where}: model output {ref[0]!r} is not produced by any layer")
        outs.append(env[ref])
    return outs


def _run_sequential(ctx: Context, config: dict, path: tuple, args: list) -> list:
    if len(args) != 1:
        raise ModelLoadError(f"{ctx.km.where}: Sequential model {config['config'].get('name')!r} takes one "
                             f"input, called with {len(args)}")
    x = args[0]
    for lay in config["config"]["layers"]:
        if lay.get("class_name") == "InputLayer":
            continue
        (x,) = _call_layer(ctx, lay, path, ([("<seq>", 0, 0)], {}), {("<seq>", 0, 0): x})[:1]
    return [x]


def _call_layer(ctx: Context, lay: dict, path: tuple, node, env: dict) -> list:
    args, kwargs = node
    values = [env[a] if isinstance(a, tuple) else a for a in _flat(args)]
    name = layer_name(lay)
    if is_model_config(lay):
        return _run_model(ctx, lay, (*path, name), values)
    cls = lay.get("class_name", "")
    label = "/".join((*path, name))
    ctx.begin_layer(label, op_key(lay), lay.get("config", {}), ctx.km.weights.get((*path, name), []), kwargs)
    if not is_ops_node(lay) and not all(isinstance(v, str) for v in values):
        shown = ", ".join(repr(v) for v in values if not isinstance(v, str))
        raise ModelLoadError(f"{ctx.km.where}: {ctx.label} is called with constant arguments ({shown}); "
                             f"a {cls} layer takes tensors only")
    fn = CONVERTERS.lookup(op_key(lay))
    return call_converter(ctx, fn, values)


def _flat(args) -> list:
    """Call arguments with tensor references as ``(layer, node, index)`` tuples, lists flattened (merge
    layers take a list of tensors)."""
    out = []
    for a in args:
        if isinstance(a, list | tuple) and not _is_ref(a):
            out.extend(_flat(a))
        else:
            out.append(_ref(a) if _is_ref(a) else a)
    return out


def _is_ref(a) -> bool:
    return (isinstance(a, dict) and a.get("class_name") == "__keras_tensor__") or isinstance(a, tuple)


def _ref(a):
    if isinstance(a, tuple):
        return a
    h = a["config"]["keras_history"]
    return (h[0], int(h[1]), int(h[2]))


def _inbound(lay: dict) -> list:
    """``[(args, kwargs)]`` per call of the layer, from Keras 3's ``{"args", "kwargs"}`` form or Keras 2's
    ``[[name, node, index, kwargs], ...]``."""
    out = []
    for node in lay.get("inbound_nodes") or []:
        if isinstance(node, dict):
            out.append((list(node.get("args", [])), dict(node.get("kwargs") or {})))
        else:
            refs = [(e[0], int(e[1]), int(e[2])) for e in node]
            kwargs = node[0][3] if node and len(node[0]) > 3 and isinstance(node[0][3], dict) else {}
            out.append((refs, kwargs))
    return out


def _refs(spec) -> list:
    """``input_layers``/``output_layers``: a bare triple, a list of triples, or a dict of them."""
    if spec is None:
        return []
    if isinstance(spec, dict):
        spec = list(spec.values())
    if len(spec) == 3 and isinstance(spec[0], str):
        spec = [spec]
    return [(s[0], int(s[1]), int(s[2])) for s in spec]


def _input_layers(config: dict) -> list:
    """The InputLayer configs of the outer model (a Sequential without one: its first layer's
    ``batch_input_shape``/``batch_shape``)."""
    layers = config["config"]["layers"]
    if config["class_name"] == "Sequential":
        if layers and layers[0].get("class_name") == "InputLayer":
            return [layers[0]]
        first = layers[0] if layers else {"config": {}}
        c = first.get("config", {})
        shape = c.get("batch_shape") or c.get("batch_input_shape")
        return [{"class_name": "InputLayer", "name": "input",
                 "config": {"name": "input", "batch_shape": shape, "dtype": c.get("dtype", "float32")}}]
    by_name = {layer_name(lay): lay for lay in layers}
    return [by_name[r[0]] for r in _refs(config["config"].get("input_layers"))]


def _declared_shape(lay: dict, where: str):
    c = lay.get("config", {})
    shape = c.get("batch_shape") or c.get("batch_input_shape")
    if shape is None:
        return None
    return [("batch" if i == 0 else None) if d is None else int(d) for i, d in enumerate(shape)]


def _check_supported(km: KerasModel) -> None:
    found = []

    def walk(config, path):
        for lay in config["config"]["layers"]:
            name = "/".join((*path, layer_name(lay)))
            if is_model_config(lay):
                walk(lay, (*path, layer_name(lay)))
            elif lay.get("class_name") != "InputLayer":
                found.append((op_key(lay), name))

    walk(km.config, ())
    path = None if km.where.startswith("the ") else km.where  # a live model has no path
    check_supported(found, CONVERTERS.supports, f"Keras {km.keras_version}", path)

"""MXNet model -> nnvm ``Graph``, without importing mxnet.

The model is a ``-symbol.json`` path (its ``.params`` found beside it, the latest epoch, unless
``params=`` names one), or an in-memory ``(symbol, arg_params, aux_params)`` from a user's mxnet, read
by duck typing (``symbol.tojson()``, ``array.asnumpy()``). The steps: parse the symbol
(``symbol.py``) and the parameters (``params.py``); keep the nodes the outputs depend on; check every
operator has a converter and list all that do not at once; turn parameters into weights and the other
variables into inputs (``shapes=`` binds them; a variable's ``__shape__`` is its declared shape); then
convert node by node through ``convert.CONVERTERS`` with the shared frontend layer.
"""

from __future__ import annotations

import os

import numpy as np

from nnvm.errors import ModelLoadError
from nnvm.frontend import bind_input, call_converter, check_shape_keys, check_supported, unique_names
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.ir import Graph
from nnvm_frontend_mxnet import convert_nn, convert_tensor  # noqa: F401  (fill CONVERTERS)
from nnvm_frontend_mxnet.context import CONVERTERS, IGNORED_INPUTS, Context
from nnvm_frontend_mxnet.params import DTYPE_NAMES, find_params, load_params, split_params
from nnvm_frontend_mxnet.symbol import Symbol, load_symbol, loads_symbol


# -- reading ----------------------------------------------------------------------------------------
def _is_mx_symbol(obj) -> bool:
    return callable(getattr(obj, "tojson", None))


def looks_like_mxnet(model) -> bool:
    """``Frontend.accepts``: a ``*-symbol.json``/``*.json`` holding MXNet nodes, a symbol object, or a
    ``(symbol, arg_params[, aux_params])`` tuple."""
    if isinstance(model, tuple | list) and 2 <= len(model) <= 3:
        return _is_mx_symbol(model[0])
    if _is_mx_symbol(model):
        return True
    if isinstance(model, str | os.PathLike) and os.fspath(model).endswith(".json"):
        try:
            with open(model, "rb") as f:
                head = f.read(4096)
        except OSError:
            return False
        return b'"nodes"' in head and b'"null"' in head  # MXNet's variables are "op": "null" nodes
    return False


def _numpy(value, where: str):
    if value is None:
        return None
    if hasattr(value, "asnumpy"):
        value = value.asnumpy()
    try:
        return np.asarray(value)
    except Exception as exc:  # a user's object that is not an array
        raise ModelLoadError(f"{where} is not an array ({type(value).__name__}: {exc})") from None


def read_model(model, params=None) -> tuple[Symbol, dict, dict, str]:
    """``(symbol, arg_params, aux_params, where)`` with plain numpy arrays and unprefixed names."""
    if isinstance(model, tuple | list):
        if not 2 <= len(model) <= 3 or not _is_mx_symbol(model[0]):
            raise ModelLoadError("an in-memory MXNet model is (symbol, arg_params, aux_params)")
        sym, arg, aux = (*model, {})[:3]
        symbol = loads_symbol(sym.tojson(), "the MXNet symbol")
        arg = {k: _numpy(v, f"arg_params[{k!r}]") for k, v in dict(arg or {}).items()}
        aux = {k: _numpy(v, f"aux_params[{k!r}]") for k, v in dict(aux or {}).items()}
        if params is not None:
            arg2, aux2 = split_params(load_params(params))
            arg, aux = {**arg2, **arg}, {**aux2, **aux}
        return symbol, arg, aux, "the MXNet model"
    if _is_mx_symbol(model):
        symbol = loads_symbol(model.tojson(), "the MXNet symbol")
        arg, aux = split_params(load_params(params)) if params is not None else ({}, {})
        return symbol, arg, aux, "the MXNet symbol"
    if not isinstance(model, str | os.PathLike):
        raise ModelLoadError(f"cannot read an MXNet model from a {type(model).__name__} object")
    path = os.fspath(model)
    if not os.path.exists(path):
        raise ModelLoadError(f"{path}: no such file")
    symbol = load_symbol(path)
    arg, aux = split_params(load_params(params if params is not None else find_params(path)))
    return symbol, arg, aux, path


# -- importing --------------------------------------------------------------------------------------
def load_mxnet(model, shapes: dict | None = None, params=None) -> Graph:
    """The nnvm graph of an MXNet model (see the module docstring); ``shapes`` binds input shapes."""
    symbol, arg, aux, where = read_model(model, params)
    path = where if isinstance(model, str | os.PathLike) else None
    nodes = symbol.nodes
    live = _live(symbol)
    names = unique_names((node.name, node.op) for node in symbol.nodes)
    check_supported(((nodes[i].op, names[i]) for i in live if nodes[i].op != "null"),
                    CONVERTERS.supports, "MXNet", path)

    values = {**arg, **aux}
    kinds = symbol.classify(set(values))
    read = _read_variables(symbol, live)
    data = [i for i in symbol.variables if kinds[nodes[i].name] == "data" and i in read]
    stem = os.path.basename(where)
    for suffix in ("-symbol.json", ".json"):
        stem = stem[: -len(suffix)] if stem.endswith(suffix) else stem
    b = GraphBuilder(name=stem if path else "mxnet")
    # A shape for a variable nothing reads at inference (SoftmaxOutput's label) is allowed and unused.
    known = [nodes[i].name for i in symbol.variables if kinds[nodes[i].name] == "data"]
    shapes = check_shape_keys(shapes, known, where)
    named_like = symbol.classify()
    for i in data:  # a weight the parameters lack is a broken checkpoint, not an input (unless shaped)
        name = nodes[i].name
        if named_like[name] != "data" and name not in shapes:
            raise ModelLoadError(f"{where}: the parameters hold no {name!r}, which node "
                                 f"{_reader(symbol, i, names)} reads (pass shapes= to feed it as an input)")
    env: dict[tuple[int, int], str] = {}
    for i in data:
        node = nodes[i]
        declared = node.hidden.get("__shape__")
        declared = tuple(d if d > 0 else "?" for d in declared) if declared else None
        dtype = DTYPE_NAMES.get(node.hidden.get("__dtype__", 0), "float32")
        env[(i, 0)] = b.input(node.name, bind_input(node.name, declared, shapes, where), dtype)
    for i in symbol.variables:
        name = nodes[i].name
        if i in read and kinds[name] != "data":
            if values.get(name) is None:
                raise ModelLoadError(f"{where}: the parameter {name!r} has no value (uninitialized)")
            env[(i, 0)] = b.param(name, values[name])

    ctx = Context(b, symbol)
    for i in live:
        node = nodes[i]
        if node.op == "null":
            continue
        ctx.begin_node(node, names[i])
        ignored = IGNORED_INPUTS.get(node.op, ())
        inputs = ["" if k in ignored else env[e] for k, e in enumerate(node.inputs)]
        results = call_converter(ctx, CONVERTERS.lookup(node.op), inputs)
        for k, value in enumerate(results):
            if value is not None:
                env[(i, k)] = value

    produced = {v for n in b.nodes for v in n.outputs}
    for a, k in symbol.heads:
        if (a, k) not in env:
            raise ctx.error(f"output {k} of node {names[a]} ({nodes[a].op}) is not supported")
        value = env[(a, k)]
        if value not in produced:
            value = _computed_copy(b, value, f"{names[a]}_output")
        b.output(value)
    return b.build()


def _live(symbol: Symbol) -> list[int]:
    """Indices of the nodes the heads depend on, in order."""
    needed = {a for a, _ in symbol.heads}
    for i in range(len(symbol.nodes) - 1, -1, -1):
        if i in needed:
            ignored = IGNORED_INPUTS.get(symbol.nodes[i].op, ())
            needed.update(a for k, (a, _) in enumerate(symbol.nodes[i].inputs) if k not in ignored)
    return sorted(needed)


def _reader(symbol: Symbol, var: int, names: list[str]) -> str:
    """The first node reading variable ``var``, as ``name (Op)``."""
    for i, node in enumerate(symbol.nodes):
        if any(a == var for a, _ in node.inputs):
            return f"{names[i]} ({node.op})"
    return "?"


def _read_variables(symbol: Symbol, live: list[int]) -> set[int]:
    live_set = set(live)
    return {i for i in symbol.variables if i in live_set}



def _computed_copy(b: GraphBuilder, value: str, name: str) -> str:
    """A graph output that is an input or a constant becomes a ``copy`` of it, computed at run time."""
    fold, b.fold_constants = b.fold_constants, False
    try:
        return b.node("copy", [value], {}, name=name)[0]
    finally:
        b.fold_constants = fold

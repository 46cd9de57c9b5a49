"""MXNet symbol JSON (``net-symbol.json``) parsed into a small neutral structure, without mxnet.

The file holds ``nodes`` (each with ``op``, ``name``, string ``attrs`` and ``inputs`` as
``[node, output, version]``), ``arg_nodes`` (every variable), ``node_row_ptr`` (prefix sums of each node's
output count: BatchNorm and max Pooling have hidden outputs), ``heads`` and ``attrs.mxnet_version``.
Converters want Python values, so every attribute string is parsed once here (``"(3, 3)"`` -> ``(3, 3)``,
``"True"`` -> True, ``"None"`` -> None, numbers), and the upgrades MXNet applies to old files when it
loads them (``legacy_json_util.cc``) are applied here too, so converters see only the current form:

* ``attr``/``param`` keys (before 0.9 and 1.0) merged with ``attrs``; two-element inputs; no version
  means 0.8.0;
* before 0.9.0 auxiliary states were not stored: BatchNorm got ``{name}_moving_mean`` and
  ``{name}_moving_var`` variables appended, as MXNet does;
* before 0.9.5 ``argmax``/``argmin`` with ``axis=-1`` meant no axis (reduce over everything).

Attributes whose keys look like ``__lr_mult__`` (or the bare legacy ``lr_mult``, ``wd_mult``,
``ctx_group``, ...) are training or placement hints, kept apart in ``Node.hidden``.
"""

from __future__ import annotations

import ast
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nnvm.errors import ModelLoadError
from nnvm.frontend import reading

# Operators whose inputs at these positions are auxiliary states (mutated in training, saved as aux:).
AUX_INPUTS: dict[str, tuple[int, ...]] = {
    "BatchNorm": (3, 4), "BatchNorm_v1": (3, 4), "SyncBatchNorm": (3, 4), "_contrib_SyncBatchNorm": (3, 4),
    "CuDNNBatchNorm": (3, 4), "_contrib_BatchNormWithReLU": (3, 4),
}
# Input names of the ops whose pre-0.9 files lack aux variables (MXNet's FListInputNames).
_AUX_NAMES = {op: ("moving_mean", "moving_var") for op in AUX_INPUTS}
_HIDDEN_KEYS = ("ctx_group", "lr_mult", "wd_mult", "force_mirroring", "mirror_stage", "profiler_scope")

# Output counts (visible and hidden) of the operators that have hidden outputs, as MXNet 1.9.1 counts them
# in node_row_ptr: needed for files written before node_row_ptr existed.
_FIXED_OUTPUTS = {"BatchNorm": 3, "BatchNorm_v1": 3, "SyncBatchNorm": 3, "_contrib_SyncBatchNorm": 3,
                  "CuDNNBatchNorm": 3, "LayerNorm": 3, "InstanceNorm": 3, "GroupNorm": 3, "Dropout": 2,
                  "LRN": 2, "L2Normalization": 2}


def _legacy_outputs(op: str, attrs: dict) -> int:
    if op in _FIXED_OUTPUTS:
        return _FIXED_OUTPUTS[op]
    if op == "Pooling":
        return 2 if attrs.get("pool_type", "max") == "max" else 1
    if op == "LeakyReLU":
        return 2 if attrs.get("act_type") == "rrelu" else 1
    if op in ("SliceChannel", "split") and isinstance(attrs.get("num_outputs"), int):
        return attrs["num_outputs"]
    return 1


VERSION_0_9_0 = 900
VERSION_0_9_5 = 905
LEGACY_VERSION = 800  # files without mxnet_version are 0.8.0


@dataclass(frozen=True)
class Node:
    """One node: ``op`` is ``"null"`` for variables (weights, aux states, data)."""

    op: str
    name: str
    attrs: dict[str, Any]
    inputs: tuple[tuple[int, int], ...]  # (node index, output index)
    num_outputs: int  # visible and hidden outputs (node_row_ptr), at least 1
    hidden: dict[str, Any] = field(default_factory=dict)  # __shape__, __lr_mult__, ...
    raw_attrs: dict[str, str] = field(default_factory=dict)  # the strings as stored


@dataclass(frozen=True)
class Symbol:
    """A whole symbol file: nodes in topological order (inputs always refer to earlier nodes), the heads
    (the graph's outputs) as (node, output) pairs, and the file's MXNet version."""

    nodes: list[Node]
    heads: list[tuple[int, int]]
    arg_nodes: list[int]  # every variable node, as stored (aux states included)
    version: int  # MXNET_MAKE_VERSION: 10901 is 1.9.1
    source: str = "<symbol>"

    @property
    def variables(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op == "null"]

    @property
    def aux_names(self) -> list[str]:
        """Variables fed into an auxiliary-state slot (BatchNorm's moving mean and variance)."""
        return [self.nodes[i].name for i in sorted(self._aux_nodes())]

    def _aux_nodes(self) -> set[int]:
        aux = set()
        for node in self.nodes:
            for pos in AUX_INPUTS.get(node.op, ()):
                if pos < len(node.inputs) and self.nodes[node.inputs[pos][0]].op == "null":
                    aux.add(node.inputs[pos][0])
        return aux

    def classify(self, param_names=None) -> dict[str, str]:
        """``{variable name: "data" | "weight" | "aux"}``.

        Aux states are the variables in an auxiliary-state slot (``AUX_INPUTS``). With ``param_names``
        (the parameters' keys, prefixes stripped) any other variable is a weight when the parameters hold
        it, else data; without them MXNet's naming decides (``_weight``, ``_bias``, ``_gamma``... are
        weights), which is what a symbol alone can tell.
        """
        aux = {self.nodes[i].name for i in self._aux_nodes()}
        names = set(param_names) if param_names is not None else None
        kinds = {}
        for i in self.variables:
            name = self.nodes[i].name
            if name in aux:
                kinds[name] = "aux"
            elif names is not None:
                kinds[name] = "weight" if name in names else "data"
            else:
                kinds[name] = "weight" if _looks_like_weight(name) else "data"
        return kinds


_WEIGHT_SUFFIXES = ("_weight", "_bias", "_gamma", "_beta", "_alpha", "_moving_mean", "_moving_var",
                    "_running_mean", "_running_var", "_parameters", "_state", "_state_cell")


def _looks_like_weight(name: str) -> bool:
    return name.endswith(_WEIGHT_SUFFIXES)


_LONG = re.compile(r"(?<=\d)[lL]\b")  # Python 2 longs: "(3L, 3L)"


def parse_attr(text: str) -> Any:
    """One attribute string as a Python value: tuples, bools, None, ints, floats; otherwise the string."""
    s = text.strip()
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "none":
        return None
    if low in ("inf", "+inf", "-inf", "nan", "infinity", "-infinity"):
        return float(low.replace("infinity", "inf"))
    if not s or s[0] not in "([-+.0123456789":
        return text
    try:
        value = ast.literal_eval(_LONG.sub("", s))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return _parse_sequence(s, text)
    return _to_tuples(value, text)


def _parse_sequence(s: str, text: str) -> Any:
    """Tuples literal_eval refuses, e.g. ``(None, 2)`` written as ``(none, 2)`` or with ``inf``."""
    if len(s) >= 2 and s[0] in "([" and s[-1] in ")]":
        inner = s[1:-1].strip().rstrip(",")
        if not inner:
            return ()
        if "(" in inner or "[" in inner:
            return text
        parts = [parse_attr(p) for p in inner.split(",")]
        if all(p is None or isinstance(p, int | float | bool) for p in parts):
            return tuple(parts)
    return text


def _to_tuples(value: Any, text: str) -> Any:
    if isinstance(value, list | tuple):
        return tuple(_to_tuples(v, text) for v in value)
    if isinstance(value, int | float | bool | str) or value is None:
        return value
    return text  # a dict, set or complex number is no MXNet attribute: keep the string


def _is_hidden(key: str) -> bool:
    if key.startswith("__") and key.endswith("__"):
        return True
    return any(key == k or key.endswith("_" + k) for k in _HIDDEN_KEYS)


def _fail(source: str, what: str) -> ModelLoadError:
    return ModelLoadError(f"{source} is not a valid MXNet symbol file: {what}")


def _entry(raw, source: str, where: str, num_nodes: int) -> tuple[int, int, int]:
    if not isinstance(raw, list) or len(raw) not in (2, 3) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in raw):
        raise _fail(source, f"{where} is {json.dumps(raw)[:60]}, not [node, output] or "
                            "[node, output, version]")
    node, out = raw[0], raw[1]
    if not 0 <= node < num_nodes or out < 0:
        raise _fail(source, f"{where} refers to node {node} output {out}, but there are {num_nodes} nodes")
    return node, out, raw[2] if len(raw) == 3 else 0


def _version(graph_attrs, source: str) -> int:
    if not isinstance(graph_attrs, dict) or "mxnet_version" not in graph_attrs:
        return LEGACY_VERSION
    v = graph_attrs["mxnet_version"]
    if isinstance(v, list) and len(v) == 2:  # ["int", 10901]
        v = v[1]
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise _fail(source, f"its mxnet_version is {json.dumps(graph_attrs['mxnet_version'])[:40]}")
    return v


def parse_symbol(obj: dict, source: str = "<symbol>") -> Symbol:
    """A decoded symbol JSON object as a ``Symbol`` (legacy forms upgraded)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("nodes"), list) or "heads" not in obj:
        raise _fail(source, "it has no 'nodes' list and 'heads'")
    raw_nodes = obj["nodes"]
    n = len(raw_nodes)
    version = _version(obj.get("attrs"), source)
    parsed = []  # (op, name, raw attrs, [(node, out, version)])
    for i, raw in enumerate(raw_nodes):
        if not isinstance(raw, dict) or not isinstance(raw.get("op"), str) \
                or not isinstance(raw.get("name"), str):
            raise _fail(source, f"node {i} has no string 'op' and 'name'")
        strings: dict[str, str] = {}
        for key in ("param", "attr", "attrs"):  # legacy keys first: the newest wins
            d = raw.get(key, {})
            if not isinstance(d, dict) or not all(isinstance(v, str) for v in d.values()):
                raise _fail(source, f"node {i} ({raw['name']}) has '{key}' that is not a map of strings")
            strings.update(d)
        inputs = raw.get("inputs", [])
        if not isinstance(inputs, list):
            raise _fail(source, f"node {i} ({raw['name']}) has 'inputs' that is not a list")
        entries = [_entry(e, source, f"input {k} of node {i} ({raw['name']})", n)
                   for k, e in enumerate(inputs)]
        for node, _out, _v in entries:
            if node >= i:
                raise _fail(source, f"node {i} ({raw['name']}) takes node {node} as input, which does not "
                                    "come before it")
        if raw["op"] == "null" and entries:
            raise _fail(source, f"the variable node {i} ({raw['name']}) has inputs")
        parsed.append((raw["op"], raw["name"], strings, entries))

    heads_raw = obj["heads"]
    if not isinstance(heads_raw, list) or not heads_raw:
        raise _fail(source, "'heads' is not a non-empty list")
    heads = [_entry(h, source, f"head {k}", n) for k, h in enumerate(heads_raw)]

    row_ptr = obj.get("node_row_ptr")
    counts = None
    if row_ptr is not None:
        if (not isinstance(row_ptr, list) or len(row_ptr) != n + 1 or not all(
                isinstance(v, int) for v in row_ptr) or row_ptr[0] != 0
                or any(b <= a for a, b in zip(row_ptr, row_ptr[1:]))):
            raise _fail(source, f"'node_row_ptr' is not {n + 1} ascending counts from 0")
        counts = [b - a for a, b in zip(row_ptr, row_ptr[1:])]

    # Pre-0.9 files: BatchNorm's moving mean and variance are missing; MXNet appends variables. They go
    # just before their consumer so that the nodes stay in topological order.
    if version < VERSION_0_9_0 and any(len(e) == 3 and op in _AUX_NAMES for op, _, _, e in parsed):
        old_to_new, upgraded, new_counts = {}, [], []
        for i, (op, name, strings, entries) in enumerate(parsed):
            entries = [(old_to_new[a], b, v) for a, b, v in entries]
            if op in _AUX_NAMES and len(entries) == 3:
                for aux_name in _AUX_NAMES[op]:
                    upgraded.append(("null", f"{name}_{aux_name}" if name else aux_name, dict(strings), []))
                    new_counts.append(1)
                    entries.append((len(upgraded) - 1, 0, 1))
            old_to_new[i] = len(upgraded)
            upgraded.append((op, name, strings, entries))
            new_counts.append(counts[i] if counts is not None else None)
        parsed = upgraded
        heads = [(old_to_new[a], b, v) for a, b, v in heads]
        counts = new_counts if counts is not None else None
        if obj.get("arg_nodes") is not None:
            obj = {**obj, "arg_nodes": [i for i, p in enumerate(parsed) if p[0] == "null"]}

    used: dict[int, int] = {}
    for _, _, _, entries in parsed:
        for node, out, _v in entries:
            used[node] = max(used.get(node, 0), out + 1)
    for node, out, _v in heads:
        used[node] = max(used.get(node, 0), out + 1)

    nodes = []
    for i, (op, name, strings, entries) in enumerate(parsed):
        attrs, hidden = {}, {}
        for key, text in strings.items():
            value = parse_attr(text)
            if _is_hidden(key):
                hidden[key if key.startswith("__") else f"__{key}__"] = value
            else:
                attrs[key] = value
        if version < VERSION_0_9_5 and op in ("argmax", "argmin") and attrs.get("axis") == -1:
            attrs.pop("axis")
        outputs = counts[i] if counts is not None else max(used.get(i, 1), _legacy_outputs(op, attrs))
        if used.get(i, 0) > outputs:
            raise _fail(source, f"node {i} ({name}) is used at output {used[i] - 1} but has {outputs} "
                                "outputs")
        nodes.append(Node(op=op, name=name, attrs=attrs, inputs=tuple((a, b) for a, b, _ in entries),
                          num_outputs=outputs, hidden=hidden, raw_attrs=dict(strings)))

    arg_nodes = obj.get("arg_nodes")
    if arg_nodes is None:
        arg_nodes = [i for i, node in enumerate(nodes) if node.op == "null"]
    elif not isinstance(arg_nodes, list) or not all(
            isinstance(a, int) and 0 <= a < len(nodes) and nodes[a].op == "null" for a in arg_nodes):
        raise _fail(source, "'arg_nodes' names nodes that are not variables")
    else:
        arg_nodes = list(arg_nodes)
    return Symbol(nodes=nodes, heads=[(a, b) for a, b, _ in heads], arg_nodes=arg_nodes, version=version,
                  source=source)


def loads_symbol(text: str | bytes, source: str = "<symbol>") -> Symbol:
    """``parse_symbol`` of JSON text (what ``sym.tojson()`` returns)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(source, f"it is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}; "
                            "truncated?)") from None
    except (UnicodeDecodeError, RecursionError) as exc:
        raise _fail(source, f"it is not JSON text ({type(exc).__name__})") from None
    return parse_symbol(obj, source)


def load_symbol(path: str | os.PathLike) -> Symbol:
    """A ``-symbol.json`` file as a ``Symbol``; a missing or unreadable file is a ``ModelLoadError``."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ModelLoadError(f"cannot read the MXNet symbol {os.fspath(path)}: {exc.strerror}") from None
    with reading(os.fspath(path), "not a valid MXNet symbol file"):  # what the checks in parse_symbol miss
        return loads_symbol(data, os.fspath(path))


__all__ = ["AUX_INPUTS", "Node", "Symbol", "load_symbol", "loads_symbol", "parse_attr", "parse_symbol",
]

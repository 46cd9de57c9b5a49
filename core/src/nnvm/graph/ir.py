"""The graph IR: a typed dataflow graph of operator nodes over named values.

Values are named by strings (as in ONNX), so frontends build graphs directly and passes rewrite them
by name. A ``Graph`` is immutable: passes return new graphs (``Graph.replace``). Weights are named
numpy arrays in ``params``; every value's shape and dtype is in ``types`` once inference has run.
"""

from __future__ import annotations

import base64
import io
import json
import mmap
from collections.abc import Mapping
from dataclasses import dataclass, field
from dataclasses import replace as _dc_replace

import numpy as np

from nnvm.errors import Error
from nnvm.graph.dims import Dim, is_symbolic, parse_dim
from nnvm.plugins import OpRegistry, op_registry

FORMAT_VERSION = 1


@dataclass(frozen=True)
class TensorType:
    """Shape and dtype of a value. A shape's entries are ints, or symbolic dims (``graph.dims.Dim``) where
    the size is known only at run time; ``size`` and ``nbytes`` are then dims too."""

    shape: tuple
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(d if isinstance(d, Dim) else int(d) for d in self.shape))

    @property
    def symbolic(self) -> bool:
        return is_symbolic(self.shape)

    @property
    def size(self) -> int | Dim:
        n = 1
        for d in self.shape:
            n = d * n
        return n

    @property
    def nbytes(self) -> int | Dim:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Node:
    """One operator application. ``inputs`` and ``outputs`` are value names."""

    op: str
    name: str
    inputs: tuple
    outputs: tuple
    attrs: Mapping = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))

    def replace(self, **changes) -> Node:
        return _dc_replace(self, **changes)


@dataclass(frozen=True)
class Graph:
    """A model: runtime inputs, weights, nodes in execution order, outputs, and value types."""

    nodes: tuple
    inputs: tuple
    outputs: tuple
    params: Mapping = field(default_factory=dict)
    types: Mapping = field(default_factory=dict)
    name: str = "model"
    groups: tuple = ()  # fused groups (tuples of node names, execution order), set by fuse_ops

    def __post_init__(self):
        object.__setattr__(self, "groups", tuple(tuple(g) for g in self.groups))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))

    def replace(self, **changes) -> Graph:
        return _dc_replace(self, **changes)

    # -- queries ------------------------------------------------------------------------------------
    def producers(self) -> dict:
        """value name -> node producing it."""
        return {out: node for node in self.nodes for out in node.outputs}

    def consumers(self) -> dict:
        """value name -> nodes reading it (graph outputs are not nodes; see ``outputs``)."""
        uses: dict = {}
        for node in self.nodes:
            for v in node.inputs:
                if v:
                    uses.setdefault(v, []).append(node)
        return uses

    def type_of(self, value: str) -> TensorType:
        try:
            return self.types[value]
        except KeyError:
            raise Error(f"value {value!r} has no known type; run shape inference first") from None

    def validate(self, ops: OpRegistry | None = None) -> None:
        """Check names, definitions before use, operator existence and attributes (names the node).
        ``ops``: the operators to check against (default: those the loaded plugins register)."""
        ops = op_registry() if ops is None else ops
        defined = set(self.inputs) | set(self.params)
        names = set()
        for node in self.nodes:
            if node.name in names:
                raise Error(f"node {node.name}: the name is used by two nodes")
            names.add(node.name)
            opdef = ops.get(node.op, node.name)
            for v in node.inputs:
                if v and v not in defined:
                    raise Error(f"node {node.name} ({node.op}): input {v!r} is not defined before it")
            opdef.check_attrs(node)
            for v in node.outputs:
                if v in defined:
                    raise Error(f"node {node.name} ({node.op}): output {v!r} is defined twice")
                defined.add(v)
        for v in self.outputs:
            if v not in defined:
                raise Error(f"graph output {v!r} is not produced by any node")

    # -- text ---------------------------------------------------------------------------------------
    def text(self) -> str:
        """A readable listing, one node per line, with types where known."""

        def t(v):
            ty = self.types.get(v)
            return f"%{v}: {ty}" if ty else f"%{v}"

        lines = [f"graph {self.name}("]
        for v in self.inputs:
            lines.append(f"  {t(v)},")
        lines.append(") {")
        for pname, arr in self.params.items():
            lines.append(f"  param %{pname}: {arr.dtype}[{', '.join(map(str, arr.shape))}]")
        for node in self.nodes:
            attrs = ", ".join(f"{k}={_attr_text(v)}" for k, v in sorted(node.attrs.items()))
            outs = ", ".join(t(o) for o in node.outputs)
            ins = ", ".join(f"%{i}" if i else "None" for i in node.inputs)
            lines.append(f"  {outs} = {node.op}({ins}{', ' if attrs and ins else ''}{attrs})  # {node.name}")
        lines.append(f"  return {', '.join('%' + o for o in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)

    __str__ = text

    # -- serialization ------------------------------------------------------------------------------
    def to_dict(self, include_params: bool = True) -> dict:
        out = {
            "format": "nnvm-graph",
            "version": FORMAT_VERSION,
            "name": self.name,
            "inputs": list(self.inputs),
            "outputs": list(self.outputs),
            "nodes": [
                {"op": n.op, "name": n.name, "inputs": list(n.inputs), "outputs": list(n.outputs),
                 "attrs": {k: _attr_to_json(v) for k, v in n.attrs.items()}}
                for n in self.nodes
            ],
            "types": {k: {"shape": [str(d) if isinstance(d, Dim) else d for d in v.shape], "dtype": v.dtype}
                      for k, v in self.types.items()},
            "groups": [list(g) for g in self.groups],
        }
        if include_params:
            out["params"] = {k: _array_to_json(v) for k, v in self.params.items()}
        return out

    def to_json(self, include_params: bool = True) -> str:
        return json.dumps(self.to_dict(include_params))

    @staticmethod
    def from_dict(d: dict, params: Mapping | None = None) -> Graph:
        if d.get("format") != "nnvm-graph":
            raise Error("not an nnvm graph: the 'format' field is missing or wrong")
        if d.get("version") != FORMAT_VERSION:
            raise Error(f"nnvm graph format version {d.get('version')} is not supported "
                        f"(this nnvm reads version {FORMAT_VERSION})")
        nodes = [Node(n["op"], n["name"], n["inputs"], n["outputs"],
                      {k: _attr_from_json(v) for k, v in n["attrs"].items()}) for n in d["nodes"]]
        if params is None:
            params = {k: _array_from_json(v) for k, v in d.get("params", {}).items()}
        types = {k: TensorType(tuple(parse_dim(x) if isinstance(x, str) else x for x in v["shape"]),
                               v["dtype"]) for k, v in d.get("types", {}).items()}
        return Graph(nodes, d["inputs"], d["outputs"], dict(params), types, d.get("name", "model"),
                     tuple(tuple(g) for g in d.get("groups", [])))

    @staticmethod
    def from_json(text: str) -> Graph:
        return Graph.from_dict(json.loads(text))


def _attr_text(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array({v.dtype}[{', '.join(map(str, v.shape))}])"
    return repr(v)


def _attr_to_json(v):
    if isinstance(v, np.ndarray):
        return {"__array__": _array_to_json(v)}
    if isinstance(v, tuple):
        return {"__tuple__": [_attr_to_json(x) for x in v]}
    if isinstance(v, list):
        return [_attr_to_json(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def _attr_from_json(v):
    if isinstance(v, dict) and "__array__" in v:
        return _array_from_json(v["__array__"])
    if isinstance(v, dict) and "__tuple__" in v:
        return tuple(_attr_from_json(x) for x in v["__tuple__"])
    if isinstance(v, list):
        return [_attr_from_json(x) for x in v]
    return v


def _array_to_json(a: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(a), allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _array_from_json(s: str) -> np.ndarray:
    return np.load(io.BytesIO(base64.b64decode(s)), allow_pickle=False)


def detached(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy of it when its memory is a file's mapping (a frontend's weights read in
    place): what a module keeps must not change, or vanish, when someone rewrites the model file."""
    base = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return np.array(array, order="C") if isinstance(base, mmap.mmap) else array


def save_params(params: Mapping) -> bytes:
    """Weights as one blob: a JSON header (name, dtype, shape, offset) then the raw bytes, 64-aligned."""
    header, chunks, offset = [], [], 0
    for name, arr in params.items():
        arr = np.asarray(arr, order="C")
        pad = (-offset) % 64
        chunks.append(b"\0" * pad)
        offset += pad
        header.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape), "offset": offset})
        chunks.append(arr.tobytes())
        offset += arr.nbytes
    head = json.dumps(header).encode()
    prefix = len(head).to_bytes(8, "little") + head
    pad = (-len(prefix)) % 64
    return prefix + b" " * pad + b"".join(chunks)


def load_params(blob) -> dict:
    """Inverse of ``save_params``; arrays are views into ``blob`` where possible."""
    mv = memoryview(blob)
    n = int.from_bytes(bytes(mv[:8]), "little")
    header = json.loads(bytes(mv[8:8 + n]).decode().rstrip())
    base = 8 + n + ((-(8 + n)) % 64)
    out = {}
    for h in header:
        dt = np.dtype(h["dtype"])
        count = int(np.prod(h["shape"])) if h["shape"] else 1
        arr = np.frombuffer(mv, dtype=dt, count=count, offset=base + h["offset"])
        out[h["name"]] = arr.reshape(tuple(h["shape"]))
    return out

"""What every converter works with: the node being converted, its attributes, and the graph builder.

A frontend subclasses ``ConversionContext`` for its format's specifics (ONNX's opset and attribute
protos, MXNet's string attributes) and keeps the rest: nodes emitted through ``op``/``ops`` are named
after the source node, so error messages and fused-group listings point back at the user's model;
constants are named after it too; ``error`` makes a ``ConvertError`` that names the node.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import Error
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.dims import Dim


class ConvertError(Error):
    """A node the frontend cannot convert as written (names the node and what is wrong)."""


class FailedConversionError(ConvertError):
    """A converter failed rather than declined: the builder rejected a node it emitted, or it crashed
    on a malformed node. (A frontend may retry a declined node another way; not a failed one.)"""


class ConversionContext:
    """The state of one import: the builder and the source node being converted."""

    def __init__(self, builder: GraphBuilder):
        self.b = builder
        self.name = ""  # the source node's (unique) name, used for every nnvm node it becomes
        self.op_type = ""  # its operator, as the source format spells it
        self.attrs: dict = {}

    # -- the node being converted -------------------------------------------------------------------
    def begin(self, name: str, op_type: str, attrs: dict) -> None:
        self.name, self.op_type, self.attrs = name, op_type, attrs

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def has_attr(self, key: str) -> bool:
        return key in self.attrs

    @property
    def label(self) -> str:
        """``node <name> (<OpType>)``, the start of every error about this node; formats with versions
        override it to say the version too."""
        return f"node {self.name} ({self.op_type})"

    def error(self, message: str) -> ConvertError:
        return ConvertError(f"{self.label}: {message}")

    def normalize_axis(self, axis: int, rank: int) -> int:
        """``axis`` in ``[0, rank)``; negative axes count from the end."""
        axis = int(axis)
        if not -rank <= axis < rank:
            raise self.error(f"axis {axis} is out of range for a rank-{rank} tensor")
        return axis + rank if axis < 0 else axis

    # -- values -------------------------------------------------------------------------------------
    def shape(self, v: str) -> tuple:
        return self.b.shape(v)

    def rank(self, v: str) -> int:
        return len(self.b.shape(v))

    def dtype(self, v: str) -> str:
        return self.b.dtype(v)

    def const_value(self, v: str):
        return self.b.const_value(v) if v else None

    def param(self, value, hint: str = "const") -> str:
        """A new constant value, named after the node."""
        return self.b.const(np.asarray(value), hint=f"{self.name}/{hint}")

    def scalar(self, value, like: str) -> str:
        """A scalar constant with the dtype of value ``like`` (for arithmetic with it); a symbolic dim
        (a stride or a size of a symbolic shape) is a value computed from the dims at each run."""
        if isinstance(value, Dim):
            out = self.op("dim_values", [], {"values": (value,), "shape": ()})
            return out if self.dtype(like) == "int64" else self.cast(out, self.dtype(like))
        return self.param(np.asarray(value, dtype=self.dtype(like)), "scalar")

    # -- emitting -----------------------------------------------------------------------------------
    def op(self, op: str, inputs, attrs: dict | None = None) -> str:
        """One single-output nnvm operator; returns its value."""
        return self.b.node(op, list(inputs), attrs or {}, name=self._node_name(inputs))[0]

    def ops(self, op: str, inputs, attrs: dict | None, n_outputs: int) -> list[str]:
        """A multi-output nnvm operator (``split``); returns its values."""
        outs = [f"{self.name}:{k}" for k in range(n_outputs)]
        return self.b.node(op, list(inputs), attrs or {}, name=self._node_name(inputs), outputs=outs)

    def _node_name(self, inputs) -> str:
        # Nodes on constants are folded away at once; keep the source name for the node that stays.
        if all((not v) or self.b.const_value(v) is not None for v in inputs):
            return f"{self.name}/fold"
        return self.name

    def reshape(self, v: str, shape) -> str:
        shape = tuple(d if isinstance(d, Dim) else int(d) for d in shape)
        if shape == self.shape(v):
            return v
        return self.op("reshape", [v], {"newshape": shape})

    def transpose(self, v: str, axes) -> str:
        axes = tuple(int(a) for a in axes)
        if axes == tuple(range(len(axes))):
            return v
        return self.op("transpose", [v], {"axes": axes})

    def cast(self, v: str, dtype: str) -> str:
        if self.dtype(v) == dtype:
            return v
        return self.op("cast", [v], {"dtype": dtype})

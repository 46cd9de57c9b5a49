"""The operator registry: what an operator is, independent of any frontend or backend.

Each operator declares its attributes, how output types follow from input types, its tensor-expression
compute (what is computed, never how), a numpy evaluation used for constant folding, and its fusion
pattern. Operator sets (the standard one included) are registered through the ``nnvm_register_ops``
hook, so a third-party set looks exactly like the built-in one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from nnvm.errors import NodeError
from nnvm.plugins import OpRegistry, op_registry  # noqa: F401  (OpRegistry: where operator sets find it)

REQUIRED = object()


class OpPattern(IntEnum):
    """How an operator fuses (TVM's classification; lower values fuse more freely)."""

    ELEMWISE = 0  # out[i] = f(in[i])
    BROADCAST = 1  # out[i] = f(in[broadcast(i)])
    INJECTIVE = 2  # each output element reads a computed place of the inputs (reshape, transpose, pad)
    REDUCTION = 3  # a reduction over some axes (sum, max, softmax's pieces)
    OUT_ELEMWISE_FUSABLE = 4  # heavy op whose output can take an elementwise epilogue (conv2d, dense)
    OPAQUE = 8  # never fused


@dataclass(frozen=True)
class Attr:
    """One attribute: accepted Python type(s), default (``REQUIRED`` if none) and what it means."""

    type: Any
    default: Any = REQUIRED
    doc: str = ""


@dataclass(frozen=True)
class OpDef:
    """Everything the compiler knows about one operator.

    - ``infer_type(in_types: list[TensorType], attrs: dict) -> list[TensorType]``; raise ``Error`` for
      invalid inputs (the caller adds the node name).
    - ``compute(inputs: list[te.Tensor], attrs: dict, out_types: list[TensorType]) -> list[te.Tensor]``.
    - ``evaluate(inputs: list[np.ndarray], attrs: dict) -> list[np.ndarray]`` for constant folding
      (optional; operators without it are never folded).
    """

    name: str
    infer_type: Callable
    compute: Callable | None
    pattern: OpPattern
    attrs: dict = field(default_factory=dict)
    num_inputs: tuple = (1, 1)  # (min, max); max None for variadic
    num_outputs: int = 1
    evaluate: Callable | None = None
    doc: str = ""
    # each image of the output (leading axis) is computed from the same image of each input leading with
    # the batch, whatever its stages do (Winograd tiles several images as one axis): ``nnvm.batch_loop``
    images_apart: bool = False

    def normalize_attrs(self, attrs: dict, node: str = "?") -> dict:
        """Attributes with defaults filled in, checked against the declaration."""
        out = {}
        for key in attrs:
            if key not in self.attrs:
                raise NodeError(node, self.name, f"unknown attribute {key!r}; known: "
                                f"{', '.join(sorted(self.attrs)) or 'none'}")
        for key, spec in self.attrs.items():
            if key in attrs:
                value = attrs[key]
                if spec.type is not None and not isinstance(value, spec.type):
                    raise NodeError(node, self.name, f"attribute {key}={value!r} should be of type "
                                    f"{_type_name(spec.type)}")
                out[key] = value
            elif spec.default is REQUIRED:
                raise NodeError(node, self.name, f"missing required attribute {key!r}")
            else:
                out[key] = spec.default
        return out

    def check_attrs(self, node) -> None:
        self.normalize_attrs(dict(node.attrs), node.name)
        lo, hi = self.num_inputs
        n = len(node.inputs)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo} to {hi if hi is not None else 'any number of'}"
            raise NodeError(node.name, self.name, f"takes {want} inputs, got {n}")


def _type_name(t) -> str:
    if isinstance(t, tuple):
        return " or ".join(x.__name__ for x in t)
    return t.__name__


def get_op(name: str, node: str | None = None) -> OpDef:
    """Look an operator up in the registry built from all loaded plugins."""
    return op_registry().get(name, node)

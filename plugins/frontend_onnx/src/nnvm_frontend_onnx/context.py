"""What every ONNX converter works with: the node being converted, its attributes, and the builder.

A converter is a plain function ``convert(ctx, inputs) -> value | list of values`` registered for one
or more ONNX operator types with ``@converter("Conv")``. ``inputs`` are the nnvm value names of the
node's inputs ("" for an omitted optional input); the return value gives one nnvm value per ONNX
output (a single string for single-output operators; ``None`` for an output nobody reads).
Converters emit nnvm operators through ``ctx.op``, which names them after the ONNX node, so error
messages and fused-group listings point back at the original model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnvm.errors import Error
from nnvm.graph.builder import GraphBuilder

# ONNX op_type -> converter; filled by the ``convert_*`` modules through ``@converter``.
CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str):
    """Register the decorated function as the converter of the given ONNX operator types."""

    def wrap(fn):
        for op_type in op_types:
            if op_type in CONVERTERS:
                raise RuntimeError(f"ONNX converter for {op_type} is defined twice")
            CONVERTERS[op_type] = fn
        return fn

    return wrap


class ConvertError(Error):
    """A node the frontend cannot convert as written (names the node and what is wrong)."""


def node_label(name: str, op_type: str, opset: int) -> str:
    """How every conversion error names its node: ``node conv1 (Conv, opset 13)``."""
    return f"node {name} ({op_type}, opset {opset})"


class ValueDependentError(ConvertError):
    """A converter needs the value of ``value`` (it decides a shape) but it is only known at run time.

    ``nnvm_frontend_onnx.backend`` catches it and compiles again with that input's value built in.
    """

    def __init__(self, message: str, value: str):
        super().__init__(message)
        self.value = value


class Context:
    """The state of one import: the builder, the model's opset, and the node being converted."""

    def __init__(self, builder: GraphBuilder, opset: int, consumed: set[str]):
        self.b = builder
        self.opset = opset
        self.consumed = consumed  # ONNX value names read by some node or graph output
        self.env: dict[str, str] = {}  # ONNX value name -> nnvm value, of the scope being converted
        self.node = None  # the onnx NodeProto being converted
        self.name = ""  # its (unique) name, used for every nnvm node it becomes
        self.attrs: dict = {}

    # -- the node being converted -------------------------------------------------------------------
    def begin(self, node, name: str) -> None:
        self.node = node
        self.name = name
        self.attrs = {a.name: attribute_value(a) for a in node.attribute}

    @property
    def op_type(self) -> str:
        return self.node.op_type

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    def has_attr(self, key: str) -> bool:
        return key in self.attrs

    def attr_dtype(self, key: str, default: str | None = None) -> str | None:
        """The nnvm dtype named by a ``TensorProto`` element-type attribute (``to``, ``dtype`` ...)."""
        if not self.has_attr(key):
            return default
        value = self.attr(key)
        if isinstance(value, str):  # Cast-1 spelled the type as a string ("FLOAT")
            from onnx import TensorProto

            if value.upper() not in TensorProto.DataType.keys():
                raise self.error(f"attribute {key}: unknown element type {value!r}")
            value = TensorProto.DataType.Value(value.upper())
        try:
            return onnx_dtype(int(value), f"attribute {key}")
        except Error as exc:
            raise self.error(str(exc)) from None

    def output_used(self, k: int) -> bool:
        """Whether the node's ``k``-th output exists and is read by anything."""
        outs = self.node.output
        return k < len(outs) and bool(outs[k]) and outs[k] in self.consumed

    @property
    def label(self) -> str:
        """``node <name> (<OpType>, opset <N>)``, the start of every error about this node."""
        return node_label(self.name, self.op_type, self.opset)

    def error(self, message: str) -> ConvertError:
        return ConvertError(f"{self.label}: {message}")

    # -- values -------------------------------------------------------------------------------------
    def shape(self, v: str) -> tuple:
        return self.b.shape(v)

    def rank(self, v: str) -> int:
        return len(self.b.shape(v))

    def dtype(self, v: str) -> str:
        return self.b.dtype(v)

    def const_value(self, v: str):
        return self.b.const_value(v) if v else None

    def const(self, v: str, what: str) -> np.ndarray:
        """The value of an input that decides a shape; it must be known when importing."""
        value = self.const_value(v)
        if value is None:
            raise ValueDependentError(f"{self.label}: {what} is computed at run time "
                                      f"(value-dependent shape not supported)", v)
        return value

    def const_ints(self, v: str, what: str) -> tuple:
        return tuple(int(x) for x in np.asarray(self.const(v, what)).reshape(-1))

    def param(self, value, hint: str = "const") -> str:
        """A new constant value, named after the node."""
        return self.b.const(np.asarray(value), hint=f"{self.name}/{hint}")

    def scalar(self, value, like: str) -> str:
        """A scalar constant with the dtype of value ``like`` (for arithmetic with it)."""
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
        # Nodes on constants are folded away at once; keep the ONNX name for the node that stays.
        if all((not v) or self.b.const_value(v) is not None for v in inputs):
            return f"{self.name}/fold"
        return self.name

    def reshape(self, v: str, shape) -> str:
        shape = tuple(int(d) for d in shape)
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
        if self.dtype(v) == "float64" and dtype == "float16":
            # through float32: the x86 backend's JIT has no double-to-half conversion routine and the
            # process dies (rounding twice can differ from once in the last bit, rarely)
            v = self.op("cast", [v], {"dtype": "float32"})
        return self.op("cast", [v], {"dtype": dtype})


def normalize_axis(axis: int, rank: int, ctx: Context | None = None) -> int:
    """``axis`` in ``[0, rank)``; negative axes count from the end, as in ONNX."""
    axis = int(axis)
    if not -rank <= axis < rank:
        msg = f"axis {axis} is out of range for a rank-{rank} tensor"
        raise ctx.error(msg) if ctx is not None else Error(msg)
    return axis + rank if axis < 0 else axis


def onnx_dtype(elem_type: int, where: str) -> str:
    """The nnvm dtype string of an ONNX ``TensorProto`` element type."""
    from onnx import helper

    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        dt = None
    if dt is None or dt.kind not in "biuf":
        from onnx import TensorProto

        known = elem_type in TensorProto.DataType.values()
        name = TensorProto.DataType.Name(elem_type) if known else elem_type
        raise Error(f"{where}: element type {name} is not supported")
    return str(dt)


def attribute_value(attr):
    """An ONNX attribute as plain Python: ints, floats, str, tuples of them, or numpy arrays."""
    from onnx import AttributeProto, numpy_helper

    t = attr.type
    if t == AttributeProto.INT:
        return int(attr.i)
    if t == AttributeProto.FLOAT:
        return float(attr.f)
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if t == AttributeProto.TENSOR:
        return numpy_helper.to_array(attr.t)
    if t == AttributeProto.INTS:
        return tuple(int(x) for x in attr.ints)
    if t == AttributeProto.FLOATS:
        return tuple(float(x) for x in attr.floats)
    if t == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in attr.strings)
    return attr  # graphs, sparse tensors, type protos: converters that need them look deeper

"""What every ONNX converter works with: the node being converted, its attributes, and the builder.

A converter is a plain function ``convert(ctx, inputs) -> value | list of values`` registered for one
or more ONNX operator types with ``@converter("Conv")``. ``inputs`` are the nnvm value names of the
node's inputs ("" for an omitted optional input); the return value gives one nnvm value per ONNX
output (a single string for single-output operators; ``None`` for an output nobody reads).
Converters emit nnvm operators through ``ctx.op``, which names them after the ONNX node, so error
messages and fused-group listings point back at the original model.
"""

from __future__ import annotations

import numpy as np

from nnvm.errors import DataDependentError, Error
from nnvm.frontend import ConversionContext, ConvertError, ConverterTable
from nnvm.graph.builder import GraphBuilder
from nnvm.graph.dims import Dim

__all__ = ["CONVERTERS", "Context", "ConvertError", "DataDependentOpError", "ValueDependentError",
           "converter"]

# ONNX op_type -> converter; filled by the ``convert_*`` modules through ``@converter``.
CONVERTERS = ConverterTable("ONNX")


def converter(*op_types: str):
    """Register the decorated function as the converter of the given ONNX operator types."""
    return CONVERTERS.register(*op_types)


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


class DataDependentOpError(ValueDependentError, DataDependentError):
    """A node whose output shape its input values decide (``NonZero``, ``TopK``'s k, ``Range``), those
    values computed at run time: ``nnvm.compile`` cuts the model at the node (``staging``) and runs it on
    the host; ``backend`` still specializes on the input. ``output`` is the node's first output (its ONNX
    name, unique in the graph)."""

    def __init__(self, message: str, value: str, node: str, op: str, output: str):
        ValueDependentError.__init__(self, message, value)
        self.node, self.op, self.output = node, op, output


class Context(ConversionContext):
    """The shared conversion context plus ONNX's specifics: the opset, attribute protos, and which
    outputs anything reads."""

    def __init__(self, builder: GraphBuilder, opset: int, consumed: set[str]):
        super().__init__(builder)
        self.opset = opset
        self.consumed = consumed  # ONNX value names read by some node or graph output
        self.env: dict[str, str] = {}  # ONNX value name -> nnvm value, of the scope being converted
        self.node = None  # the onnx NodeProto being converted
        # shapes computed from symbolic dims, folded at import (``shape_values``): name -> object array
        self.symbolic_values: dict[str, np.ndarray] = {}

    def begin(self, node, name: str) -> None:
        self.node = node
        super().begin(name, node.op_type, {a.name: attribute_value(a) for a in node.attribute})

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

    def const_value(self, v: str):
        if v in self.symbolic_values:
            return self.symbolic_values[v]
        return super().const_value(v)

    def const(self, v: str, what: str) -> np.ndarray:
        """The value of an input that decides a shape; it must be known when importing (its entries may
        be symbolic dims: ``shape_values``)."""
        value = self.const_value(v)
        if value is None:
            raise ValueDependentError(f"{self.label}: {what} is computed at run time "
                                      f"(value-dependent shape not supported)", v)
        return value

    def deciding(self, v: str, what: str) -> np.ndarray:
        """The value of input ``v`` of a node that can run on the host between compiled stages, when it
        is known as numbers when importing; else a ``DataDependentOpError`` (``nnvm.staged``)."""
        value = self.const_value(v)
        if value is None or np.asarray(value).dtype == object:
            first = next((o for o in self.node.output if o), "")
            raise DataDependentOpError(f"{self.label}: {what} is computed at run time (its values decide the "
                                       "output shape)", v, self.name, self.op_type, first)
        return np.asarray(value)

    def const_ints(self, v: str, what: str) -> tuple:
        """The ints of a constant input; symbolic dims stay dims."""
        return tuple(x if isinstance(x, Dim) else int(x) for x in np.asarray(self.const(v, what)).reshape(-1))


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

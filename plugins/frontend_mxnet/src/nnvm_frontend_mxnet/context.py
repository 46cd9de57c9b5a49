"""What every MXNet converter works with: the shared conversion context plus MXNet's attributes.

A converter is ``convert(ctx, inputs) -> value | list of values`` registered with
``@converter("Convolution")``; ``inputs`` are the nnvm values of the node's inputs in MXNet's order
("" for an input the operator ignores at inference, such as SoftmaxOutput's label). Attributes arrive
already parsed by ``symbol.py`` (``"(3, 3)"`` -> ``(3, 3)``, ``"True"`` -> True); ``ctx.attr_*`` read
them with MXNet's defaults and say which node is wrong when a value is not what MXNet allows.
"""

from __future__ import annotations

from nnvm.frontend import ConversionContext, ConverterTable
from nnvm.graph.builder import GraphBuilder
from nnvm_frontend_mxnet.symbol import Node, Symbol

# MXNet operator name -> converter; filled by the ``convert_*`` modules through ``@converter``.
CONVERTERS = ConverterTable("MXNet")

# Inputs an operator does not read at inference (training labels): never bound, never required.
IGNORED_INPUTS: dict[str, tuple[int, ...]] = {}


def converter(*ops: str, ignore: tuple[int, ...] = ()):
    """Register the decorated function as the converter of the given MXNet operators; ``ignore`` lists
    input positions the operator does not read at inference."""
    for op in ops:
        if ignore:
            IGNORED_INPUTS[op] = ignore
    return CONVERTERS.register(*ops)


class Context(ConversionContext):
    def __init__(self, builder: GraphBuilder, symbol: Symbol):
        super().__init__(builder)
        self.symbol = symbol
        self.node: Node | None = None

    def begin_node(self, node: Node, name: str) -> None:
        self.node = node
        self.begin(name, node.op, node.attrs)

    def attr_bool(self, key: str, default: bool) -> bool:
        value = self.attr(key, default)
        if value is None:
            return default
        if isinstance(value, str):
            if value.lower() in ("true", "1"):
                return True
            if value.lower() in ("false", "0"):
                return False
            raise self.error(f"attribute {key}={value!r} is not a boolean")
        return bool(value)

    def attr_float(self, key: str, default: float | None) -> float | None:
        value = self.attr(key, default)
        return None if value is None else float(value)

    def attr_int(self, key: str, default: int | None) -> int | None:
        value = self.attr(key, default)
        return None if value is None else int(value)

    def attr_ints(self, key: str, default: tuple | None = None, n: int | None = None) -> tuple | None:
        """A tuple attribute; a single number is one value (``"3"``), broadcast to ``n`` values."""
        value = self.attr(key, default)
        if value is None:
            return None
        if isinstance(value, int | float):
            value = (value,) * (n or 1)
        value = tuple(int(v) for v in value)
        if n is not None and len(value) == 0:
            return default
        if n is not None and len(value) == 1 and n > 1:
            value = value * n
        if n is not None and len(value) != n:
            raise self.error(f"attribute {key}={value} should have {n} values")
        return value

    def attr_str(self, key: str, default: str) -> str:
        value = self.attr(key, default)
        return default if value is None else str(value)

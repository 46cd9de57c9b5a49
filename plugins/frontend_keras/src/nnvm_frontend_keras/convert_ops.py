"""Converters of ``keras.ops`` calls recorded inside functional graphs (``ops.<Class>`` in the table).

Their arguments are tensors or Python numbers (``keras.ops.multiply(x, 0.5)``); numbers become scalar
constants of the tensor's dtype.
"""

from __future__ import annotations

from nnvm_frontend_keras.context import CONVERTERS, Context

BINARY = {"Add": "add", "Subtract": "subtract", "Multiply": "multiply", "Divide": "divide",
          "TrueDivide": "divide", "Maximum": "maximum", "Minimum": "minimum", "Power": "power"}
UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Exp": "exp", "Log": "log", "Sqrt": "sqrt",
         "Abs": "abs", "Absolute": "abs", "Negative": "negative", "Erf": "erf", "Softplus": "softplus"}


def _operands(ctx: Context, inputs) -> list:
    tensors = [v for v in inputs if isinstance(v, str)]
    if not tensors:
        raise ctx.error("has no tensor argument")
    return [v if isinstance(v, str) else ctx.scalar(float(v), tensors[0]) for v in inputs]


def _binary(op: str):
    def convert(ctx: Context, inputs):
        values = ctx.common_layout(_operands(ctx, inputs)[:2])
        return ctx.like(ctx.op(op, values), max(values, key=lambda v: v in ctx.cf))

    return convert


def _unary(op: str):
    def convert(ctx: Context, inputs):
        x = _operands(ctx, inputs)[0]
        return ctx.like(ctx.op(op, [x]), x)

    return convert


for _cls, _op in BINARY.items():
    CONVERTERS.register(f"ops.{_cls}")(_binary(_op))
for _cls, _op in UNARY.items():
    CONVERTERS.register(f"ops.{_cls}")(_unary(_op))

"""The standard operator set: every OpDef of the operator modules, registered by ``nnvm.ops.plugin``.

Operator names and attributes are a contract with frontends (which emit them) and backends (whose
schedules recognize their tags); see each module's docstring for the semantics of its operators.
"""

from __future__ import annotations

from nnvm.ops import blocked_layout, broadcast, elemwise, index, nn, pool, quant, reduce, transform
from nnvm.ops.registry import OpDef


def all_ops() -> list[OpDef]:
    """Every standard operator, each name once."""
    out: list[OpDef] = []
    for module in (elemwise, broadcast, reduce, nn, pool, transform, blocked_layout, index, quant):
        out.extend(module.ops())
    return out

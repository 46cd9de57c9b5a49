"""Registers the standard operator set through the same hook any operator-set plugin uses."""

from nnvm.hookspecs import hookimpl
from nnvm.ops import standard


@hookimpl
def nnvm_register_ops(register):
    for opdef in standard.all_ops():
        register(opdef)

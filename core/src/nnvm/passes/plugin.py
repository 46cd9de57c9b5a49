"""Registers the core's graph passes through the same hook any pass plugin uses."""

from nnvm.hookspecs import hookimpl


@hookimpl
def nnvm_register_passes(register):
    from nnvm.passes import builtin

    for p in builtin.all_passes():
        register(p)

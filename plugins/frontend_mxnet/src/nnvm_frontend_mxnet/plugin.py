"""The MXNet frontend plugin: registers the ``mxnet`` frontend through ``nnvm_register_frontends``."""

from __future__ import annotations

from nnvm.frontend import Frontend
from nnvm.hookspecs import hookimpl


def _load(model, shapes=None, params=None, **kwargs):
    from nnvm.errors import Error
    from nnvm_frontend_mxnet.importer import load_mxnet

    if kwargs:
        raise Error(f"the mxnet frontend takes no option {sorted(kwargs)[0]!r} (it takes params=)")
    return load_mxnet(model, shapes=shapes, params=params)


def _accepts(model) -> bool:
    from nnvm_frontend_mxnet.importer import looks_like_mxnet

    return looks_like_mxnet(model)


@hookimpl
def nnvm_register_frontends(register):
    register(Frontend(name="mxnet", load=_load, extensions=("-symbol.json",), accepts=_accepts,
                      description="MXNet symbol JSON + .params (read without mxnet), or an in-memory "
                                  "(symbol, arg_params, aux_params)",
                      kwargs={"params": "path of the .params file (default: the latest epoch beside "
                                        "the symbol)"}))

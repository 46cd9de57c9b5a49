"""The Keras frontend plugin: registers the ``keras`` frontend through ``nnvm_register_frontends``."""

from __future__ import annotations

from nnvm.frontend import Frontend
from nnvm.hookspecs import hookimpl


def _load(model, shapes=None, **kwargs):
    from nnvm.errors import Error
    from nnvm_frontend_keras.importer import load_keras

    if kwargs:
        raise Error(f"the keras frontend takes no option {sorted(kwargs)[0]!r}")
    return load_keras(model, shapes)


def _accepts(model) -> bool:
    from nnvm_frontend_keras.reader import looks_like_keras

    return looks_like_keras(model)


@hookimpl
def nnvm_register_frontends(register):
    register(Frontend(name="keras", load=_load, extensions=(".keras", ".h5"), accepts=_accepts,
                      description="Keras models: .keras (Keras 3) and legacy .h5 files, "
                                  "or keras.Model objects"))

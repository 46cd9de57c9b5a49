"""The CoreML frontend plugin: registers the ``coreml`` frontend through ``nnvm_register_frontends``.

Nothing here imports coremltools (its import takes seconds): ``nnvm plugins`` and ``nnvm --help`` load
this module, and only reading a model imports the protobuf classes.
"""

from __future__ import annotations

from nnvm.frontend import Frontend
from nnvm.hookspecs import hookimpl


def _load(model, shapes=None, **kwargs):
    from nnvm.errors import Error
    from nnvm_frontend_coreml.importer import load_coreml

    if kwargs:
        raise Error(f"the coreml frontend takes no option {sorted(kwargs)[0]!r}")
    return load_coreml(model, shapes)


def _accepts(model) -> bool:
    from nnvm_frontend_coreml.reader import looks_like_coreml

    return looks_like_coreml(model)


@hookimpl
def nnvm_register_frontends(register):
    register(
        Frontend(
            name="coreml",
            load=_load,
            extensions=(".mlmodel", ".mlpackage"),
            accepts=_accepts,
            description="CoreML NeuralNetwork .mlmodel and ML Program .mlpackage",
        )
    )

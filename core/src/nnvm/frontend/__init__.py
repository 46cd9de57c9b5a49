"""The frontend layer: what a frontend plugin registers, and what every frontend converts with.

- ``Frontend`` (below): how a plugin says which models it reads; ``find_frontend`` picks one.
- ``table.ConverterTable``: source operator (and version range) -> converter function.
- ``context.ConversionContext``: the node being converted; emits named nodes, constants, casts.
- ``convert``: the loop's parts: ``check_supported`` (all unsupported operators at once),
  ``call_converter`` (errors name the source node), ``bind_input`` (declared shapes and ``shapes=``).
- ``padding``: explicit, SAME_UPPER/LOWER (Keras/TF 'same'), ceil mode, MXNet 'full' pooling.
- ``channels_last``: NHWC <-> NCHW and weight transposes.
- ``reading(path, what)``: the ``with`` block a frontend reads a user's file in (h5py, zipfile,
  protobuf, json, numpy): anything the library raises there is one ``ModelLoadError`` naming the file;
  ``isolation.read_isolated``: a first read in a child process, for libraries that hang or crash (HDF5).

A frontend is then a file reader plus converter tables; ``docs/plugins.md`` shows one.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from nnvm.errors import ModelLoadError, reading
from nnvm.frontend.context import ConversionContext, ConvertError, FailedConversionError
from nnvm.frontend.convert import bind_input, call_converter, check_shape_keys, check_supported, unique_names
from nnvm.frontend.isolation import read_isolated
from nnvm.frontend.table import ConverterTable
from nnvm.plugins import frontends

__all__ = ["ConversionContext", "ConvertError", "ConverterTable", "FailedConversionError", "Frontend",
           "bind_input", "call_converter",
           "check_shape_keys", "check_supported", "find_frontend", "read_isolated", "reading", "unique_names"]


@dataclass(frozen=True)
class Frontend:
    """A model importer.

    - ``extensions``: file suffixes it reads (``.onnx``).
    - ``accepts(model) -> bool``: for in-memory objects (and files with other names); must be cheap and
      must not import the source framework unless the object already comes from it.
    - ``load(model, shapes) -> Graph``: ``shapes`` maps input names to shapes that bind symbolic
      dimensions; the graph it returns is validated and typed by the core.
    - ``quantize(model, calibration_inputs, per_channel, method, percentile, target)``, optional: the
      model quantized after calibration, in the frontend's own format (``nnvm.quantize``).
    - ``split(model, error) -> nnvm.staged.Split``, optional: the model cut at the node a
      ``DataDependentError`` names, so ``nnvm.compile`` can run that node on the host between two
      compiled stages (docs/dynamic-shapes.md, data-dependent shapes).
    """

    name: str
    load: Callable
    extensions: tuple = ()
    accepts: Callable | None = None
    description: str = ""
    kwargs: dict = field(default_factory=dict)
    quantize: Callable | None = None
    split: Callable | None = None


def find_frontend(model) -> Frontend:
    """The frontend that reads ``model`` (a path or an in-memory object)."""
    installed = [fe for _, fe in frontends().values()]
    if isinstance(model, str | os.PathLike):
        path = os.fspath(model)
        for fe in installed:
            if any(path.endswith(ext) for ext in fe.extensions):
                return fe
        for fe in installed:
            if fe.accepts is not None and fe.accepts(path):
                return fe
        known = ", ".join(sorted({e for fe in installed for e in fe.extensions}))
        known = known or "none: install a frontend"
        if not os.path.exists(path):
            raise ModelLoadError(f"{path}: no such file")
        raise ModelLoadError(f"{path}: no installed frontend reads this file (known extensions: {known})")
    for fe in installed:
        if fe.accepts is not None and fe.accepts(model):
            return fe
    names = ", ".join(sorted(fe.name for fe in installed)) or "none"
    raise ModelLoadError(f"no installed frontend accepts a {type(model).__name__} object "
                         f"(installed frontends: {names})")

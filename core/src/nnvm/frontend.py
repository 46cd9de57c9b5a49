"""What a frontend plugin registers: how to recognise a model and turn it into a ``Graph``."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from nnvm.errors import ModelLoadError


@dataclass(frozen=True)
class Frontend:
    """A model importer.

    - ``extensions``: file suffixes it reads (``.onnx``).
    - ``accepts(model) -> bool``: for in-memory objects (and files with other names); must be cheap and
      must not import the source framework unless the object already comes from it.
    - ``load(model, shapes) -> Graph``: ``shapes`` maps input names to shapes that bind symbolic
      dimensions; the graph it returns is validated and typed by the core.
    """

    name: str
    load: Callable
    extensions: tuple = ()
    accepts: Callable | None = None
    description: str = ""
    kwargs: dict = field(default_factory=dict)


def find_frontend(model) -> Frontend:
    """The frontend that reads ``model`` (a path or an in-memory object)."""
    from nnvm.plugins import frontends

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

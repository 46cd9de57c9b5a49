"""The ONNX frontend's tests run with the core and this plugin only (``NNVM_PLUGINS=onnx``)."""

from __future__ import annotations

import os

import pytest

import nnvm.plugins


@pytest.fixture(autouse=True, scope="module")
def only_this_plugin(request):
    """Load only this plugin, or the plugins a test module names in ``NNVM_PLUGINS`` (a module that
    compiles also needs a code generator: ``NNVM_PLUGINS = "onnx,llvm-x86"``)."""
    saved = {k: os.environ.get(k) for k in ("NNVM_PLUGINS", "NNVM_DISABLE_PLUGIN_AUTOLOAD")}
    os.environ["NNVM_PLUGINS"] = getattr(request.module, "NNVM_PLUGINS", "onnx")
    os.environ.pop("NNVM_DISABLE_PLUGIN_AUTOLOAD", None)
    nnvm.plugins.reset()
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    nnvm.plugins.reset()


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(0)

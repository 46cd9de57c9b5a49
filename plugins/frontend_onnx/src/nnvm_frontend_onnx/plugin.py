"""The ONNX frontend plugin: registers the ``onnx`` frontend through ``nnvm_register_frontends``."""

from __future__ import annotations

from nnvm.frontend import Frontend
from nnvm.hookspecs import hookimpl


def _load(model, shapes=None, **kwargs):
    from nnvm.errors import Error
    from nnvm_frontend_onnx.importer import load_onnx

    if kwargs:
        raise Error(f"the onnx frontend takes no option {sorted(kwargs)[0]!r}")
    return load_onnx(model, shapes)


def _accepts(model) -> bool:
    from nnvm_frontend_onnx.importer import looks_like_onnx

    return looks_like_onnx(model)


def _quantize(model, calibration_inputs, **options):
    from nnvm_frontend_onnx.quantizer import quantize_onnx

    return quantize_onnx(model, calibration_inputs, **options)


def _split(model, error):
    from nnvm_frontend_onnx.staging import split_onnx

    return split_onnx(model, error)


@hookimpl
def nnvm_register_frontends(register):
    register(Frontend(name="onnx", load=_load, extensions=(".onnx",), accepts=_accepts, quantize=_quantize,
                      split=_split,
                      description="ONNX models (opset 7 and up): files, bytes or onnx.ModelProto"))

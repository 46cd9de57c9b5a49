"""nnvm's ONNX frontend: ONNX models (opset 7 and up) to nnvm graphs.

Installed, it registers the ``onnx`` frontend, so ``nnvm.load_model("model.onnx")`` and
``nnvm.compile(onnx_model_proto, ...)`` find it. ``load_onnx`` is the same importer called directly.
"""

from nnvm_frontend_onnx.importer import load_onnx

__all__ = ["load_onnx"]

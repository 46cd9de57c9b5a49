"""The conformance suite for ``llvm``: every standard operator, two models, and the coverage check.

The tests are the suite's own (``nnvm_conformance.suite``), parametrized by its pytest plugin from the
module attributes below (``--nnvm-target`` and ``--nnvm-models`` on the command line win). Of the four
models, ResNet-18 and SqueezeNet 1.1 run here (about half a minute each to compile on two cores):
MobileNetV2 is compared with onnxruntime in ``tests/test_models.py``, and DenseNet-121 (over a minute
to compile) by ``nnvm conformance --target llvm``, which runs all four.
"""

from nnvm_conformance.suite import (  # noqa: F401 - collected here
    test_every_standard_operator_has_a_case,
    test_model,
    test_operator,
)

nnvm_conformance_targets = ["llvm"]
nnvm_conformance_models = ["resnet18", "squeezenet1_1"]

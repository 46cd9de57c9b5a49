"""The conformance suite for ``metal`` on whatever runs it here: the Mac's GPU where there is one, else the
CPU runner executing the very MSL source (compiled as C++ by clang against the address-space shim).
Every standard operator, ResNet-18 and MobileNetV2 against onnxruntime, and the coverage check.
"""

from nnvm_conformance.suite import (  # noqa: F401 - collected here
    test_every_standard_operator_has_a_case,
    test_model,
    test_operator,
)

nnvm_conformance_targets = ["metal"]
nnvm_conformance_models = ["resnet18", "mobilenet_v2"]

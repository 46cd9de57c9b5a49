"""The conformance suite for ``webgpu`` on wgpu-native: a GPU where there is one, else Mesa's lavapipe (a
CPU Vulkan driver, ``make install`` adds it). Every standard operator, ResNet-18 and MobileNetV2 against
onnxruntime, and the coverage check. float64 examples are left out (WGSL has no 64-bit float), and the
suite says so in each result.
"""

from nnvm_conformance.suite import (  # noqa: F401 - collected here
    test_every_standard_operator_has_a_case,
    test_model,
    test_operator,
)

nnvm_conformance_targets = ["webgpu"]
nnvm_conformance_models = ["resnet18", "mobilenet_v2"]

"""The conformance suite for ``cuda`` on whatever runs it here: the native GPU where one exists, else the
CPU runner executing the very CUDA source NVRTC compiled. Every standard operator, ResNet-18 and
MobileNetV2 against onnxruntime, and the coverage check; ``test_cuda_reversed_threads.py`` runs the
operators again with the threads of every block in reverse order.
"""

from nnvm_conformance.suite import (  # noqa: F401 - collected here
    test_every_standard_operator_has_a_case,
    test_model,
    test_operator,
)

nnvm_conformance_targets = ["cuda"]
nnvm_conformance_models = ["resnet18", "mobilenet_v2"]

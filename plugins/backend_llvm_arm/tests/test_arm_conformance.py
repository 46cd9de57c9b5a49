"""The conformance suite's operators on ``aarch64`` and ``armv7``, each run under qemu-user on x86.

The suite's own tests (``nnvm_conformance.suite``), parametrized by its pytest plugin from the module
attributes below. Every operator's examples compile into one module per target, so each item costs one
compile, one export and one emulator start (about 45 s of CPU per target for all ~90 operators). The
whole models are ``test_arm_models.py``'s (ResNet-18, MobileNetV2, SqueezeNet 1.1 against onnxruntime).
"""

from nnvm_conformance.suite import test_operator  # noqa: F401 - collected here

nnvm_conformance_targets = ["aarch64", "armv7"]
nnvm_conformance_models = []

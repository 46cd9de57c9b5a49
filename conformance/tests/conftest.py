"""The suite runs here for ``llvm``, the target of this tree, within ``make test``'s time budget.

Of the four models, ResNet-18 and SqueezeNet 1.1 run here (about half a minute each to compile on
two cores); MobileNetV2 is checked against onnxruntime in ``tests/test_models.py`` and DenseNet-121
(over a minute to compile) by ``nnvm conformance --target llvm``, which runs all four. Pass
``--nnvm-models`` to choose others.
"""

MODELS_IN_MAKE_TEST = "resnet18,squeezenet1_1"


def pytest_configure(config):
    if config.getoption("nnvm_models", None) is None:
        config.option.nnvm_models = MODELS_IN_MAKE_TEST

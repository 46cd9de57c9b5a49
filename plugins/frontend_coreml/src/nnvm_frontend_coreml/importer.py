"""``load_coreml``: a CoreML model (``.mlmodel``, ``.mlpackage`` or a Model protobuf) as an nnvm graph.

ML Programs go to ``mil``; NeuralNetwork models (plain, classifier or regressor) go to ``neuralnetwork``.
"""

from __future__ import annotations

from nnvm.errors import ModelLoadError
from nnvm_frontend_coreml.reader import read_model

NEURAL_NETWORKS = ("neuralNetwork", "neuralNetworkClassifier", "neuralNetworkRegressor")


def load_coreml(model, shapes=None):
    spec, weights_dir, where = read_model(model)
    kind = spec.WhichOneof("Type")
    if kind == "mlProgram":
        from nnvm_frontend_coreml.mil import convert_program

        return convert_program(spec, weights_dir, where, shapes)
    if kind in NEURAL_NETWORKS:
        from nnvm_frontend_coreml.neuralnetwork import convert_network

        return convert_network(spec, getattr(spec, kind), where, shapes)
    raise ModelLoadError(
        f"{where}: a CoreML {kind} model is not a neural network (this frontend reads "
        "ML Programs and NeuralNetwork models)"
    )

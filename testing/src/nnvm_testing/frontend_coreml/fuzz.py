"""Tiny CoreML models written with the protobuf classes alone (no coremltools converter, no venv), and
hostile variants of them, for ``tests/test_errors.py`` and ``tests/test_fuzz_coreml.py`` (issue 20).

Generators take Hypothesis's ``draw`` like those of ``nnvm_testing.frontend_onnx.fuzz``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
from hypothesis import strategies as st

from nnvm_frontend_coreml.reader import proto

WEIGHT_BIN = Path("Data") / "com.apple.CoreML" / "weights" / "weight.bin"
MODEL_FILE = Path("Data") / "com.apple.CoreML" / "model.mlmodel"


def nn_model(layers):
    """A NeuralNetwork spec with one (1, 3, 4, 4) input ``x``, the given layer kinds chained."""
    model_pb2 = proto()
    spec = model_pb2.Model(specificationVersion=4)
    inp = spec.description.input.add(name="x")
    inp.type.multiArrayType.shape.extend([1, 3, 4, 4])
    inp.type.multiArrayType.dataType = 65568  # FLOAT32
    spec.description.output.add(name="y")
    prev = "x"
    for i, kind in enumerate(layers):
        layer = spec.neuralNetwork.layers.add(name=f"l{i}", input=[prev], output=[f"t{i}"])
        getattr(layer, kind).SetInParent()
        prev = f"t{i}"
    spec.neuralNetwork.layers[-1].output[0] = "y"
    spec.neuralNetwork.arrayInputShapeMapping = 1
    return spec


def fuzz_nn_model():
    """NeuralNetwork: relu, then a 1x1 convolution with weights and bias, then a softmax."""
    spec = nn_model(["activation", "convolution", "softmax"])
    spec.neuralNetwork.layers[0].activation.ReLU.SetInParent()
    conv = spec.neuralNetwork.layers[1].convolution
    conv.outputChannels, conv.kernelChannels, conv.nGroups = 3, 3, 1
    conv.kernelSize.extend([1, 1])
    conv.stride.extend([1, 1])
    conv.dilationFactor.extend([1, 1])
    conv.valid.SetInParent()
    conv.hasBias = True
    rng = np.random.default_rng(40)
    conv.weights.floatValue.extend(rng.standard_normal(9).astype(np.float32).tolist())
    conv.bias.floatValue.extend(rng.standard_normal(3).astype(np.float32).tolist())
    return spec


def package_spec(ops=("relu",)):
    """The Model of an ML Program: y = ops(x), x of shape (2, 3), with a const ``w`` read from
    weight.bin at offset 64 (``add`` takes it as its second operand)."""
    mil = proto("MIL_pb2")
    spec = proto().Model(specificationVersion=6)
    spec.description.input.add(name="x").type.multiArrayType.shape.extend([2, 3])
    spec.description.output.add(name="y")
    fn = spec.mlProgram.functions["main"]
    fn.opset = "CoreML5"
    x = fn.inputs.add(name="x")
    x.type.tensorType.dataType = mil.FLOAT32
    x.type.tensorType.rank = 2
    for d in (2, 3):
        x.type.tensorType.dimensions.add().constant.size = d
    block = fn.block_specializations["CoreML5"]
    const = block.operations.add(type="const")
    out = const.outputs.add(name="w")
    out.type.tensorType.dataType = mil.FLOAT32
    out.type.tensorType.rank = 1
    out.type.tensorType.dimensions.add().constant.size = 3
    val = const.attributes["val"]
    val.type.CopyFrom(out.type)
    val.blobFileValue.fileName = "@model_path/weights/weight.bin"
    val.blobFileValue.offset = 64
    prev = "x"
    for i, kind in enumerate(ops):
        op = block.operations.add(type=kind)
        op.inputs["x"].arguments.add(name=prev)
        if kind == "add":
            op.inputs["y"].arguments.add(name="w")
        prev = "y" if i == len(ops) - 1 else f"t{i}"
        op.outputs.add(name=prev)
    block.outputs.append("y")
    return spec


def weight_bin(values=(1.0, 2.0, 3.0)) -> bytes:
    """A weight.bin with one float32 record at offset 64 (header, record, data at 128)."""
    w = np.asarray(values, np.float32)
    header = struct.pack("<II", 1, 2).ljust(64, b"\0")
    record = struct.pack("<IIQQ", 0xDEADBEEF, 2, w.nbytes, 128).ljust(64, b"\0")
    return header + record + w.tobytes()


MANIFEST = {"fileFormatVersion": "1.0.0", "rootModelIdentifier": "A",
            "itemInfoEntries": {"A": {"path": "com.apple.CoreML/model.mlmodel"}}}


def write_package(pkg: Path, spec=None, weights: bytes | None = None, manifest=None) -> Path:
    """An ``.mlpackage`` folder: ``spec`` (default ``package_spec()``; bytes are written as they are),
    ``weights`` (default ``weight_bin()``) and ``manifest`` (default ``MANIFEST``; a str as it is)."""
    pkg = Path(pkg)
    if pkg.exists():
        shutil.rmtree(pkg)
    (pkg / WEIGHT_BIN.parent).mkdir(parents=True)
    spec = package_spec() if spec is None else spec
    (pkg / MODEL_FILE).write_bytes(spec if isinstance(spec, bytes) else spec.SerializeToString())
    (pkg / WEIGHT_BIN).write_bytes(weight_bin() if weights is None else weights)
    manifest = MANIFEST if manifest is None else manifest
    (pkg / "Manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
    return pkg


def package(tmp_path, ops=("relu",)) -> Path:
    """A tiny ML Program package ``tmp_path/m.mlpackage`` (see ``package_spec``)."""
    return write_package(Path(tmp_path) / "m.mlpackage", package_spec(ops))


class _Models(dict):
    def __repr__(self) -> str:
        return f"<fuzz models: {', '.join(self)}>"


def base_models(folder: str) -> dict:
    """The fuzz bases: an ``.mlmodel`` (NeuralNetwork) and an ``.mlpackage`` (relu, add const) with
    their inputs, and the bytes to mutate and splice."""
    folder = Path(folder)
    nn = fuzz_nn_model()
    (folder / "base.mlmodel").write_bytes(nn.SerializeToString())
    spec = package_spec(("relu", "add"))
    pkg = write_package(folder / "base.mlpackage", spec)
    rng = np.random.default_rng(41)
    np.save(folder / "x_nn.npy", rng.standard_normal((1, 3, 4, 4)).astype(np.float32))
    np.save(folder / "x_pkg.npy", rng.standard_normal((2, 3)).astype(np.float32))
    return _Models(mlmodel=str(folder / "base.mlmodel"), mlpackage=str(pkg), nn_spec=nn, pkg_spec=spec,
                   mlmodel_bytes=nn.SerializeToString(), pkg_model_bytes=spec.SerializeToString(),
                   other_bytes=nn_model(["activation"]).SerializeToString(), weight_bin=weight_bin(),
                   x_nn=str(folder / "x_nn.npy"), x_pkg=str(folder / "x_pkg.npy"))


_BIG = st.sampled_from([0, 1, 3, 63, 64, 65, 2**31, 2**40, 2**63 - 1, 2**64 - 1])


def mutate_package(draw, models: dict, pkg: Path) -> Path:
    """``pkg`` written as the base package with one thing broken: the manifest, the weight file
    (missing, truncated, a record with a bad magic, dtype, offset or size), an op naming a missing
    input, an attribute or type of the wrong kind, or the model file's bytes."""
    from nnvm_testing.frontend_onnx.fuzz import mutate_bytes

    mil = proto("MIL_pb2")
    spec = proto().Model()
    spec.CopyFrom(models["pkg_spec"])
    block = spec.mlProgram.functions["main"].block_specializations["CoreML5"]
    weights, manifest = models["weight_bin"], None
    kind = draw(st.sampled_from(["manifest", "no_weights", "truncate_weights", "record", "blob_offset",
                                 "op_input", "op_type", "attr", "const_type", "model_bytes", "io",
                                 "opset", "weights_bytes"]))
    if kind == "manifest":
        entries = [{"A": {"path": "../../x"}}, {"A": {"path": 7}}, {"A": {}}, {"A": {"path": ""}}, []]
        manifest = draw(st.sampled_from(["{not json", "[]", "null", "{}",
                                         json.dumps({"rootModelIdentifier": 3}),
                                         json.dumps(dict(MANIFEST, rootModelIdentifier="B")),
                                         *[json.dumps(dict(MANIFEST, itemInfoEntries=e)) for e in entries]]))
    elif kind == "no_weights":
        weights = None
    elif kind == "truncate_weights":
        weights = weights[:draw(st.integers(0, len(weights) - 1))]
    elif kind == "record":
        field = draw(st.sampled_from([0, 4, 8, 16]))  # magic, dtype, size, data offset
        fmt = "<I" if field < 8 else "<Q"
        value = draw(_BIG) % (2**32 if fmt == "<I" else 2**64)
        if field == 4:
            value = draw(st.sampled_from([0, 1, 5, 8, 9, 12, 16, 255, 2**32 - 1]))
        weights = bytearray(weights)
        struct.pack_into(fmt, weights, 64 + field, value)
        weights = bytes(weights)
    elif kind == "blob_offset":
        block.operations[0].attributes["val"].blobFileValue.offset = draw(_BIG)
    elif kind == "op_input":
        op = block.operations[draw(st.integers(1, len(block.operations) - 1))]
        key = draw(st.sampled_from(["x", "y"]))
        if key in op.inputs:
            op.inputs[key].arguments[0].name = draw(st.sampled_from(["nowhere", "", "y", "w"]))
        else:
            op.inputs["x"].arguments.add(name="extra")
    elif kind == "op_type":
        block.operations[draw(st.integers(0, len(block.operations) - 1))].type = draw(
            st.sampled_from(["", "nosuchop", "const", "conv", "relu", "add", "reshape"]))
    elif kind == "attr":
        op = block.operations[draw(st.integers(0, len(block.operations) - 1))]
        val = op.attributes[draw(st.sampled_from(["val", "name", "axes"]))]
        which = draw(st.sampled_from(["string", "int", "empty", "file", "list"]))
        if which == "string":
            val.immediateValue.tensor.strings.values.append("bad")
        elif which == "int":
            val.immediateValue.tensor.ints.values.extend([1, 2, 3, 4])
        elif which == "empty":
            val.Clear()
        elif which == "file":
            val.blobFileValue.fileName = draw(st.sampled_from(["@model_path/weights/none.bin", "/etc/passwd",
                                                               "@model_path/../../x.bin", ""]))
        else:
            val.immediateValue.list.values.add().immediateValue.tensor.ints.values.append(1)
    elif kind == "const_type":
        t = block.operations[0].outputs[0].type.tensorType
        change = draw(st.sampled_from(["dtype", "rank", "dim", "negative"]))
        if change == "dtype":
            t.dataType = draw(st.sampled_from([mil.STRING, mil.INT8, mil.FLOAT16, mil.BOOL, 0, 99]))
        elif change == "rank":
            t.rank = draw(st.sampled_from([0, 3, 2**30]))
        elif change == "dim":
            t.dimensions[0].constant.size = draw(_BIG)
        else:
            t.dimensions.add().unknown.variadic = True
        if draw(st.booleans()):
            block.operations[0].attributes["val"].type.CopyFrom(block.operations[0].outputs[0].type)
    elif kind == "io":
        fn = spec.mlProgram.functions["main"]
        change = draw(st.sampled_from(["output", "input_dim", "input_dtype", "no_function"]))
        if change == "output":
            block.outputs[0] = draw(st.sampled_from(["nowhere", "", "w", "x"]))
        elif change == "input_dim":
            fn.inputs[0].type.tensorType.dimensions[0].constant.size = draw(_BIG)
        elif change == "input_dtype":
            fn.inputs[0].type.tensorType.dataType = draw(st.sampled_from([mil.STRING, 0, 99, mil.BOOL]))
        else:
            spec.mlProgram.functions["other"].CopyFrom(fn)
            del spec.mlProgram.functions["main"]
    elif kind == "opset":
        fn = spec.mlProgram.functions["main"]
        fn.opset = draw(st.sampled_from(["", "CoreML99", "CoreML7"]))
    if kind == "model_bytes":
        spec = mutate_bytes(draw, models["pkg_model_bytes"], models["other_bytes"])
    elif kind == "weights_bytes":
        weights = mutate_bytes(draw, weights, weights[:64] + weights[128:])
    pkg = write_package(pkg, spec, weights if weights is not None else b"", manifest)
    if weights is None:
        os.remove(pkg / WEIGHT_BIN)
    return pkg

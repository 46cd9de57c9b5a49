"""Tint, the browsers' WGSL compiler, accepts every kernel the webgpu target prints: those of every
conformance case (each operator's examples compiled together, as the suite compiles them) and those of
the models the WebGPU tests run (the shape models, ResNet-18 and MobileNetV2 with their int8 QDQ forms,
the symbolic BERT, GPT-2 and CNN). naga, which the other tests run the kernels with, checks less than
Tint (uniformity around barriers, constant expressions overflowing to infinity), so a kernel they pass
may still be refused in a browser. Compiling only: one Tint module per operator or model.
"""

from __future__ import annotations

import pytest

import nnvm
from nnvm_testing.tint import dawn_or_skip, refusals

TARGET = "webgpu"


@pytest.fixture(autouse=True)
def _dawn():
    dawn_or_skip()  # before the compiles: a machine without Dawn skips at once


def _source(mod) -> str:
    return mod.library.files["kernels.wgsl"]


def test_tint_accepts_the_kernels_of_every_conformance_case(tmp_path):
    from nnvm_conformance.cases import all_cases
    from nnvm_conformance.runner import compile_case

    sources = {}
    for op, case in sorted(all_cases().items()):
        mod = compile_case(case, TARGET)
        if mod is not None:  # float64 only: the suite reports it unsupported on webgpu
            sources[op] = _source(mod)
    assert len(sources) > 90, sorted(sources)
    refused = refusals(sources, tmp_path)
    assert not refused, "Tint refuses the kernels of:\n" + "\n".join(refused)


def _shape_models(tmp_path) -> dict:
    from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS, shape_model_reference

    return {name: _source(nnvm.compile(shape_model_reference(name, tmp_path)[0], target=TARGET))
            for name in sorted(SHAPE_MODELS)}


def _zoo_models() -> dict:
    from nnvm_testing.frontend_onnx.models import cached_model_path
    from nnvm_testing.frontend_onnx.quantized import quantized_model_path

    sources = {}
    for name in ("resnet18", "mobilenet_v2"):
        sources[name] = _source(nnvm.compile(cached_model_path(name), target=TARGET))
        sources[f"{name}_qdq"] = _source(nnvm.compile(quantized_model_path(name, "qdq"), target=TARGET))
    return sources


def _symbolic_models(tmp_path) -> dict:
    from nnvm.generate import Decoder
    from nnvm_testing import gpu_symbolic
    from nnvm_testing.frontend_onnx.shape_models import symbolic_batch_cnn
    from nnvm_testing.venvs import pytest_venv

    bert = gpu_symbolic.compiled_once(gpu_symbolic.bert_path(), TARGET)
    cnn = gpu_symbolic.compiled_once(symbolic_batch_cnn(size=gpu_symbolic.CNN_SIZE), TARGET,
                                     shapes={"x": ("N", 3, gpu_symbolic.CNN_SIZE, gpu_symbolic.CNN_SIZE)})
    gpt2 = pytest_venv(gpu_symbolic.torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    decoder = Decoder(gpt2, target=TARGET, tuning_log=False).module
    _, mlp = gpu_symbolic.wide_mlp(tmp_path)
    _, packed, _ = gpu_symbolic.packed_dense(tmp_path)
    return {"bert": _source(bert.specialised({"batch": 2, "seq": 9})),
            "cnn": _source(cnn.specialised({"N": 3})),
            "gpt2": _source(decoder.specialised(decoder_binding(decoder))),
            "wide_mlp": _source(mlp.specialised({"N": 5})),
            "packed_dense": _source(packed.specialised({"N": 5}))}


def decoder_binding(mod) -> dict:
    """A binding of every symbolic dim of ``mod`` (its lower bounds: the kernels are the same at any)."""
    return {dim: low for dim, (low, _) in mod.stats()["symbolic"]["dims"].items()}


def test_tint_accepts_the_kernels_of_the_models_the_webgpu_tests_run(tmp_path):
    sources = {**_shape_models(tmp_path), **_zoo_models(), **_symbolic_models(tmp_path)}
    refused = refusals(sources, tmp_path)
    assert not refused, "Tint refuses the kernels of:\n" + "\n".join(refused)


def test_a_refusal_names_the_module_the_kernel_and_tints_error(tmp_path):
    """What the tests above print when Tint refuses: softmax's kernels with a constant expression that
    overflows float32 where the printer has ``nnvm_inf()`` (as they were printed before it had)."""
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"])], "softmax",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    source = _source(nnvm.compile(model, target=TARGET))
    assert "(-nnvm_inf())" in source
    overflowing = source.replace("(-nnvm_inf())", "(-1e38f * 10.0f)")
    assert refusals({"softmax": source}, tmp_path) == []
    (refused,) = refusals({"softmax": overflowing}, tmp_path)
    assert refused.startswith("softmax: kernel(s) nnvm_k0_softmax_k") and "cannot be represented as 'f32'" \
        in refused, refused

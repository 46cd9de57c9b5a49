"""Symbolic dims on ``webgpu`` (issue 39): a small BERT with dynamic batch and sequence and a CNN with a
symbolic batch, each compiled once (kernels taking the dims, grids evaluated per binding) and matched
against onnxruntime at several bindings; GPT-2 with its KV cache decoded step by step
(``nnvm_testing.gpu_symbolic``)."""

from __future__ import annotations

import pytest

from nnvm_testing import gpu_symbolic

TARGET = "webgpu"


def test_bert_with_dynamic_axes_compiles_once_and_matches_at_every_shape():
    gpu_symbolic.check_bert(TARGET)


def test_cnn_with_a_symbolic_batch_compiles_once_and_matches_at_every_batch():
    gpu_symbolic.check_cnn(TARGET)


def test_gpt2_with_its_kv_cache_decodes_the_tokens_onnxruntime_does():
    gpu_symbolic.check_decoder(TARGET)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return gpu_symbolic.exported(TARGET, tmp_path_factory.mktemp("export"))


def test_exported_modules_run_every_binding_in_a_fresh_process(exported, tmp_path):
    gpu_symbolic.check_exported(TARGET, exported, tmp_path)


def test_exported_module_refuses_a_binding_outside_its_bounds_in_one_sentence(exported):
    gpu_symbolic.check_export_errors(exported)


def test_an_exported_module_with_a_corrupt_symbolic_section_is_one_sentence(exported, tmp_path):
    gpu_symbolic.check_corrupt_sections(exported, tmp_path)
    gpu_symbolic.check_bound_plan_with_symbolic_tables(exported, tmp_path)


def test_a_grid_of_the_dims_past_65535_workgroups_folds_into_two_axes_at_run_time():
    """BERT at (8, 512): the attention's kernels need 65536 workgroups of 64 along x, one more than WebGPU
    guarantees per axis; their grids (terms of the dims) are marked to fold, dispatched as (65535, 2, 1),
    each kernel's block index rebuilt from x and y and guarded by its grid; the output matches
    onnxruntime."""
    from nnvm.gpu.library import size_value
    from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime

    path = gpu_symbolic.bert_path()
    mod = gpu_symbolic.compiled_once(path, TARGET)
    feeds = gpu_symbolic.bert_feeds(8, 512)
    lib = mod.specialised({"batch": 8, "seq": 512}).library
    grids = [(la, size_value(la["grid"][0], {"batch": 8, "seq": 512}))
             for t in lib.tables.values() for la in t["launches"] if not isinstance(la["grid"][0], int)]
    assert max(x for _, x in grids) > 65535
    assert all(la.get("fold") for la, x in grids if x > 65535)
    (want,) = run_onnxruntime(path, feeds)
    (got,) = mod.run(**feeds)
    err = relative_error(got, want)
    assert got.shape == want.shape and err < 1e-4, f"bert at (8, 512): relative error {err:.2e}"


def test_exported_gpt2_decodes_step_by_step_from_an_empty_cache(tmp_path):
    gpu_symbolic.check_exported_decoder(TARGET, tmp_path)

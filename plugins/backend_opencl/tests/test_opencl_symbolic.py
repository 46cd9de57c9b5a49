"""Symbolic dims on ``opencl`` (issue 39): a small BERT with dynamic batch and sequence, a CNN with a
symbolic batch, each compiled once (kernels taking the dims, grids evaluated per binding) and matched
against onnxruntime at several bindings; GPT-2 with its KV cache decoded step by step
(``nnvm_testing.gpu_symbolic``)."""

from __future__ import annotations

import pytest

from nnvm_testing import gpu_symbolic

TARGET = "opencl -device=cpu"


def test_bert_with_dynamic_axes_compiles_once_and_matches_at_every_shape():
    gpu_symbolic.check_bert(TARGET)


def test_cnn_with_a_symbolic_batch_compiles_once_and_matches_at_every_batch():
    gpu_symbolic.check_cnn(TARGET)


def test_gpt2_with_its_kv_cache_decodes_the_tokens_onnxruntime_does():
    gpu_symbolic.check_decoder(TARGET)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return gpu_symbolic.exported(TARGET, tmp_path_factory.mktemp("opencl-export"))


def test_exported_modules_run_every_binding_in_a_fresh_process(exported, tmp_path):
    gpu_symbolic.check_exported(TARGET, exported, tmp_path)


def test_exported_module_refuses_a_binding_outside_its_bounds_in_one_sentence(exported):
    gpu_symbolic.check_export_errors(exported)


def test_an_exported_module_with_a_corrupt_symbolic_section_is_one_sentence(exported, tmp_path):
    gpu_symbolic.check_corrupt_sections(exported, tmp_path)
    gpu_symbolic.check_bound_plan_with_symbolic_tables(exported, tmp_path)


def test_exported_gpt2_decodes_step_by_step_from_an_empty_cache(tmp_path):
    gpu_symbolic.check_exported_decoder(TARGET, tmp_path)

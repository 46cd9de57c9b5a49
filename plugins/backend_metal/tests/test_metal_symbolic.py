"""Symbolic modules on ``metal`` (issue 39): the BERT with dynamic batch and sequence and the
symbolic-batch CNN compiled once, exported with their symbolic section (MSL source and launch terms) and
loaded back in a fresh process, where the kernels run on the CPU runner (no Mac here), matched against
onnxruntime at several bindings; GPT-2 decoded with its cache kept on the device
(``nnvm_testing.gpu_symbolic``)."""

from __future__ import annotations

import pytest

from nnvm_testing import gpu_symbolic

TARGET = "metal"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return gpu_symbolic.exported(TARGET, tmp_path_factory.mktemp("export"))


def test_exported_modules_run_every_binding_in_a_fresh_process(exported, tmp_path):
    gpu_symbolic.check_exported(TARGET, exported, tmp_path)


def test_exported_module_refuses_a_binding_outside_its_bounds_in_one_sentence(exported):
    gpu_symbolic.check_export_errors(exported)


def test_gpt2_with_its_kv_cache_decodes_the_tokens_onnxruntime_does():
    """Decoded step by step with the cache kept in the (emulated) device's memory."""
    gpu_symbolic.check_decoder(TARGET)

"""Symbolic dims on ``opencl`` (issue 39): a small BERT with dynamic batch and sequence, a CNN with a
symbolic batch, each compiled once (kernels taking the dims, grids evaluated per binding) and matched
against onnxruntime at several bindings; GPT-2 with its KV cache decoded step by step
(``nnvm_testing.gpu_symbolic``)."""

from __future__ import annotations

from nnvm_testing import gpu_symbolic

TARGET = "opencl -device=cpu"


def test_bert_with_dynamic_axes_compiles_once_and_matches_at_every_shape():
    gpu_symbolic.check_bert(TARGET)


def test_cnn_with_a_symbolic_batch_compiles_once_and_matches_at_every_batch():
    gpu_symbolic.check_cnn(TARGET)


def test_gpt2_with_its_kv_cache_decodes_the_tokens_onnxruntime_does():
    gpu_symbolic.check_decoder(TARGET)

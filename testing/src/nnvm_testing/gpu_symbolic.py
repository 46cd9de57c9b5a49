"""Symbolic models on the GPU targets (issue 39): a small BERT exported with dynamic ``batch`` and ``seq``
and a CNN with a symbolic batch, each compiled once for a GPU target and run at several bindings against
onnxruntime. Shared by the OpenCL, WebGPU and CUDA plugins' tests, so each states only its target."""

from __future__ import annotations

import numpy as np

import nnvm
from nnvm_testing.frontend_onnx import torch_models
from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime
from nnvm_testing.frontend_onnx.shape_models import symbolic_batch_cnn
from nnvm_testing.venvs import pytest_venv

BERT_SHAPES = ((1, 1), (1, 7), (4, 33))
CNN_BATCHES = (1, 3)
CNN_SIZE = 32  # the pooled 16 x 16 maps' global average: a reduction of 256 over N x 16 rows


def bert_path() -> str:
    """The 2-layer, width-64 BERT with dynamic axes (skips where the torch venv cannot be made, but
    under ``CI=true``)."""
    return pytest_venv(torch_models.hf_model_path, "bert", 1, 16, layers=2, width=64, heads=2, dynamic=True,
                       exporter="torchscript")


def compiled_once(model, target: str, **kwargs):
    """``model`` compiled for ``target`` with its dims symbolic, checked to be one compile whose kernels
    take the dims (no compile per binding, no reason for one)."""
    mod = nnvm.compile(model, target=target, tuning_log=False, **kwargs)
    info = mod.stats()["symbolic"]
    assert info["mode"] == "kernels" and info["why_per_binding"] is None, info["why_per_binding"]
    return mod


def bert_feeds(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(batch * 1000 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    return {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask}


def check_bert(target: str) -> None:
    """The BERT compiled once for ``target`` matches onnxruntime at every (batch, seq) of ``BERT_SHAPES``,
    every binding running the same kernels (one library)."""
    path = bert_path()
    mod = compiled_once(path, target)
    libraries = set()
    for batch, seq in BERT_SHAPES:
        feeds = bert_feeds(batch, seq)
        (want,) = run_onnxruntime(path, feeds)
        (got,) = mod.run(**feeds)
        assert got.shape == want.shape == (batch, seq, 64)
        err = relative_error(got, want)
        assert err < 1e-4, f"bert on {target} at ({batch}, {seq}): relative error {err:.2e}"
        libraries.add(id(mod.specialised({"batch": batch, "seq": seq}).library))
    assert len(libraries) == 1
    assert mod.stats()["symbolic"]["mode"] == "kernels"


def check_cnn(target: str) -> None:
    """The symbolic-batch CNN compiled once for ``target`` matches onnxruntime at every batch of
    ``CNN_BATCHES``; the weights go to the device once for all bindings."""
    model = symbolic_batch_cnn(size=CNN_SIZE)
    mod = compiled_once(model, target, shapes={"x": ("N", 3, CNN_SIZE, CNN_SIZE)})
    uploaded, moved = [], []
    for batch in CNN_BATCHES:
        x = np.random.default_rng(batch).standard_normal((batch, 3, CNN_SIZE, CNN_SIZE)).astype(np.float32)
        (want,) = run_onnxruntime(model, {"x": x})
        (got,) = mod.run(x=x)
        assert got.shape == want.shape == (batch, 10)
        err = relative_error(got, want)
        assert err < 1e-4, f"cnn on {target} at batch {batch}: relative error {err:.2e}"
        uploaded.append(mod.specialised({"N": batch}).library.bytes_to_device)
        moved.append(x.nbytes)
    weights = sum(v.nbytes for v in mod.specialised({"N": 1}).params.values())
    # a later binding uploads its input and its dims (8 bytes when its plan is made, 8 more for a run at
    # smaller dims than its plan's bucket), not the weights again
    extra = [b - a - n for a, b, n in zip(uploaded, uploaded[1:], moved[1:])]
    assert all(0 < e <= 16 < weights for e in extra), (uploaded, moved, weights)


def check_decoder(target: str, new_tokens: int = 6) -> None:
    """GPT-2 (2 layers, width 64) exported with its KV cache, compiled once for ``target``
    (``nnvm.generate.Decoder``) and decoded greedily after a 7-token prompt (the first step with an empty
    past): the same tokens as onnxruntime on the same file, and logits close at every step."""
    from nnvm.generate import Decoder, greedy, peer_step

    path = pytest_venv(torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    dec = Decoder(path, target=target, tuning_log=False)
    info = dec.module.stats()["symbolic"]
    assert info["mode"] == "kernels" and info["why_per_binding"] is None, info["why_per_binding"]
    ours, theirs = [], []

    def logged(step, log):
        def run(feeds):
            outs = step(feeds)
            log.append(outs[0][:, -1].copy())
            return outs
        return run

    ids = np.random.default_rng(3).integers(0, 1000, (1, 7))
    got = greedy(logged(dec.step, ours), dec.spec, ids, new_tokens)
    step, spec, _ = peer_step("onnxruntime", path, 1)
    want = greedy(logged(step, theirs), spec, ids, new_tokens)
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        err = relative_error(a, b)
        assert err < 1e-4, f"gpt2 on {target}, step {k}: relative error {err:.2e} against onnxruntime"

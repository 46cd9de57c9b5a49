"""Issue 39: CNNs with a symbolic batch compile once (no per-binding fallback), every kernel takes the
batch, and the module matches onnxruntime at batch 1, 3 and 8 (docs/dynamic-shapes.md, "A symbolic batch").

The models are ``nnvm_testing.frontend_onnx.models``' torchvision architectures with seeded random weights;
onnxruntime runs a copy whose input and output declare the batch as the dim_param ``batch``.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import nnvm
from nnvm.autotune.measure import relative_error
from nnvm_testing.frontend_onnx import models, torch_models
from nnvm_testing.venvs import pytest_venv


@pytest.mark.parametrize(("name", "how"), [("resnet18", "shapes"), ("mobilenet_v2", "bounds"),
                                           ("squeezenet1_1", "bounds"), ("densenet121", "shapes")])
def test_cnn_with_a_symbolic_batch_compiles_once_and_matches_onnxruntime(name, how, tmp_path):
    fixed = models.cached_model_path(name)
    path, inp, shape = models.dynamic_batch_copy(fixed, tmp_path / f"{name}.onnx")
    if how == "shapes":  # a file exported at batch 1, its batch named by shapes=
        mod = nnvm.compile(fixed, target="llvm", shapes={inp: ("batch", *shape[1:])}, tuning_log=False)
    else:  # the model's own dim_param, kept symbolic by bounds= (without it a leading batch is bound to 1)
        mod = nnvm.compile(path, target="llvm", bounds={"batch": (1, 64)}, tuning_log=False)
    _check(name, mod, path, inp, shape)


def test_googlenet_exported_by_pytorch_with_a_dynamic_batch():
    """The zoo's GoogLeNet (inception v1: concatenations in place over the batch), exported by torch's
    dynamo exporter with ``dynamic_shapes`` (its own shape computations for the batch)."""
    path = pytest_venv(torch_models.zoo_model_path, "googlenet", dynamic_batch=True)
    mod = nnvm.compile(path, target="llvm", bounds={"batch": (1, 64)}, tuning_log=False)
    _check("googlenet", mod, path, "data", [1, 3, 224, 224])
    concats = [n for n in mod.graph.nodes if n.op == "concatenate"]
    copied = [n.name for n in concats if not n.attrs.get("in_place")]
    assert concats and not copied, f"concatenations copied over the symbolic batch: {copied}"


def _check(name, mod, path, inp, shape):
    sym = mod.stats()["symbolic"]
    assert sym["mode"] == "kernels" and sym["why_per_binding"] is None, sym["why_per_binding"]
    assert sym["inputs"] == {inp: ["batch", *shape[1:]]}
    calls = mod.plan["calls"]
    takes = [c for c in calls if any(a.get("dim") == "batch" for a in c["args"] if isinstance(a, dict))]
    assert len(takes) == len(calls), f"{len(calls) - len(takes)} of {len(calls)} kernels miss the batch"
    # most are the batch-1 kernel looped over the images; Winograd (batch x tiles as one axis) and the
    # classifier's dense (padded rows) have symbolic schedules of their own
    stats = mod.stats()
    assert stats["batch_loop_kernels"] > stats["distinct_kernels"] // 2, stats["batch_loop_kernels"]

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    for batch in (1, 3, 8):
        x = np.random.default_rng(batch).standard_normal([batch, *shape[1:]]).astype(np.float32)
        want = sess.run(None, {inp: x})
        got = mod.run(x)
        assert [g.shape for g in got] == [w.shape for w in want], f"{name} at batch {batch}"
        err = relative_error(got, want)
        assert err < 1e-4, f"{name} at batch {batch}: max relative error {err:.2e} against onnxruntime"
    # one compile (dims None) served every batch; the later entries are memory plans of its kernels
    assert [s["dims"] is None for s in mod.stats()["symbolic"]["specialisations"]][:2] == [True, False]



@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=znver5"])
def test_each_kernel_is_the_batch_1_kernel_looped(target):
    """The compiler's choice for an explicit CPU: every SqueezeNet kernel (convolutions, Winograd, pools,
    the classifier's reshape) loops its batch-1 kernel over the images, and every concatenation lies in
    place, as in the batch-1 compile (the same kernels, so the same speed at batch 1)."""
    path = models.cached_model_path("squeezenet1_1")
    mod = nnvm.compile(path, target=target, shapes={"data": ("batch", 3, 224, 224)}, tuning_log=False)
    bound = nnvm.compile(path, target=target, tuning_log=False)
    stats, want = mod.stats(), bound.stats()
    assert stats["symbolic"]["why_per_binding"] is None
    assert stats["batch_loop_kernels"] == stats["distinct_kernels"] == want["distinct_kernels"]
    assert stats["fused_groups"] == want["fused_groups"] and stats["kernels"] == want["kernels"]

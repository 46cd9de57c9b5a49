"""Symbolic dims on ``cuda`` (issue 39): the BERT with dynamic batch and sequence and the symbolic-batch CNN
compiled once by NVRTC, every kernel of a function over dims taking their values as one more pointer
(``long long*``, before the temporaries) and launched on grids of the dims; run (on the GPU, or the
generated source on the CPU runner) against onnxruntime at several bindings; GPT-2 with its KV
cache decoded step by step; the native path through a fake driver."""

from __future__ import annotations

import re

import numpy as np
import pytest

from nnvm_backend_cuda.arguments import kernel_parameters
from nnvm_testing import gpu_symbolic
from nnvm_testing.frontend_onnx.shape_models import symbolic_batch_cnn

TARGET = "cuda -arch=sm_90"


@pytest.mark.parametrize("model", ["cnn", "bert"])
def test_kernels_take_the_dims_as_a_pointer_and_grids_are_dim_expressions(model):
    if model == "cnn":
        size = gpu_symbolic.CNN_SIZE
        mod = gpu_symbolic.compiled_once(symbolic_batch_cnn(size=size), TARGET,
                                         shapes={"x": ("N", 3, size, size)})
        binding = {"N": 2}
    else:
        mod = gpu_symbolic.compiled_once(gpu_symbolic.bert_path(), TARGET)
        binding = {"batch": 2, "seq": 5}
    lib = mod.specialised(binding).library
    assert lib.compiled.arch == "sm_90" and lib.compiled.cubin and lib.compiled.ptx
    ptx = lib.compiled.ptx.decode() if isinstance(lib.compiled.ptx, bytes) else lib.compiled.ptx
    signatures = kernel_parameters(lib.source_text())
    symbolic = [t for t in lib.tables.values() if t["params"][-1]["name"] == "nnvm_dims"]
    assert symbolic, "no function takes the dims"
    dims_grids = 0
    for table in symbolic:
        at = len(table["params"]) - 1
        for launch in table["launches"]:
            types = signatures[launch["kernel"]]
            assert len(types) == len(table["params"]) + len(table["temporaries"])
            assert types[at] == "long long*", (launch["kernel"], types)
            entry = re.search(rf"\.entry {launch['kernel']}\((.*?)\)", ptx, re.S)
            assert entry and entry.group(1).count(".param .u64") == len(types)  # every argument a pointer
            dims_grids += any(not isinstance(g, int) for g in launch["grid"])
            assert all(isinstance(b, int) for b in launch["block"])  # threads per block stay constant
    assert dims_grids, "no grid depends on the dims"


def test_bert_with_dynamic_axes_runs_once_compiled_at_every_shape():
    gpu_symbolic.check_bert(TARGET)


def test_cnn_with_a_symbolic_batch_runs_once_compiled_at_every_batch():
    gpu_symbolic.check_cnn(TARGET)


def test_the_native_path_launches_each_bindings_grid_through_the_driver():
    """The symbolic CNN's kernels on the native path (``native.CUDADevice`` against ``FakeDriver``, the
    driver's calls with the CPU runner behind them): one library for two bindings, each launch's grid the
    table's term evaluated for the run's dims (checked against the device's limits at its launch), also
    in a plan made for a larger bucket, the outputs matching onnxruntime."""
    driver = pytest.importorskip("cuda.bindings.driver")  # noqa: F841  (the fake driver's result codes)
    from nnvm.gpu.library import size_value
    from nnvm.runtime.module import Module
    from nnvm_backend_cuda.library import CUDAKernelLibrary
    from nnvm_backend_cuda.native import open_device
    from nnvm_testing.backend_cuda import FakeDriver
    from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime

    model = symbolic_batch_cnn()
    mod = gpu_symbolic.compiled_once(model, TARGET, shapes={"x": ("N", 3, 16, 16)})
    lib = mod.specialised({"N": 1}).library
    fake = FakeDriver(lib.source_text(), arch=(9, 0))
    native = CUDAKernelLibrary(list(lib.tables.values()), lib.compiled, lib.source_text(),
                               device=open_device(fake))
    for batch in (2, 5):
        one = mod.specialised({"N": batch})
        run = Module(one.plan, one.params, native, one.target, one.stats())
        x = np.random.default_rng(batch).standard_normal((batch, 3, 16, 16)).astype(np.float32)
        fake.launches.clear()
        (got,) = run.run_shaped([x], {"N": batch}, [(batch, 10)])  # 5 in the plan for a bucket of 8
        (want,) = run_onnxruntime(model, {"x": x})
        assert relative_error(got, want) < 1e-4
        grids = {la["kernel"]: [size_value(g, {"N": batch}) for g in la["grid"]]
                 for t in lib.tables.values() for la in t["launches"]}
        assert fake.launches and all(list(grid) == grids[name] for name, grid, *_ in fake.launches)


def test_gpt2_with_its_kv_cache_decodes_the_tokens_onnxruntime_does():
    gpu_symbolic.check_decoder(TARGET)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return gpu_symbolic.exported(TARGET, tmp_path_factory.mktemp("export"))


def test_exported_modules_run_every_binding_in_a_fresh_process(exported, tmp_path):
    """The cubin, PTX and source in one file with the symbolic section; loaded back, the kernels run on
    the GPU, or the same source on the CPU runner."""
    gpu_symbolic.check_exported(TARGET, exported, tmp_path)


def test_exported_module_refuses_a_binding_outside_its_bounds_in_one_sentence(exported):
    gpu_symbolic.check_export_errors(exported)

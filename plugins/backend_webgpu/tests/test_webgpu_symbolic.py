"""Symbolic dims on ``webgpu`` (issue 39): a small BERT with dynamic batch and sequence and a CNN with a
symbolic batch, each compiled once (kernels taking the dims, grids evaluated per binding) and matched
against onnxruntime at several bindings; GPT-2 with its KV cache decoded step by step
(``nnvm_testing.gpu_symbolic``)."""

from __future__ import annotations

import numpy as np
import pytest

import nnvm
from nnvm_testing import gpu_symbolic
from nnvm_testing.tint import tint_errors

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


def _kernel_text(source: str, kernel: str) -> str:
    """``kernel``'s bindings and entry point in the module ``source``: its lines up to its closing brace."""
    lines = source.splitlines(keepends=True)
    start = next(i for i, ln in enumerate(lines) if f" {kernel}_" in ln or f"fn {kernel}(" in ln)
    end = next(i for i in range(start, len(lines)) if lines[i] == "}\n")
    return "".join(lines[start:end + 1])


def test_a_barrier_kernels_grid_of_the_dims_past_65535_folds_at_run_time(tmp_path):
    """An MLP over [N, 4] rows (``N`` symbolic): each dense's kernel has barriers (tiles in workgroup
    memory) and a grid of ceil(N / 8) workgroups along y. At N = 524289 that is 65537, one past what
    WebGPU guarantees: the launch folds y into z, the kernel rebuilds its row tile from y and z, guards it
    by the grid, and reads the dims from a read-only binding so the guard is uniform (WGSL refuses a
    barrier under a guard on a read-write load). Both bindings, folded and not, match onnxruntime."""
    from nnvm.gpu.library import size_value
    from nnvm_backend_webgpu.wgsl import FOLD, fold_at_run
    from nnvm_testing.frontend_onnx.check import run_onnxruntime

    path, mod = gpu_symbolic.wide_mlp(tmp_path)
    small = mod.specialised({"N": 5}).library
    source = small.files["kernels.wgsl"]
    dense = [la for t in small.tables.values() for la in t["launches"] if "dense" in la["kernel"]]
    assert len(dense) == 2
    for la in dense:
        text = _kernel_text(source, la["kernel"])
        assert "workgroupBarrier();" in text, la["kernel"]
        assert la["fold"] == "y" and la["read_only"], la
        (binding,) = la["read_only"]
        assert f"@binding({binding}) var<storage, read> {la['kernel']}_nnvm_dims_:" in text
        assert text.count("var<storage, read>") == 1  # the others stay read_write
        assert f"(nnvm_gid.y + nnvm_gid.z * {FOLD}u)" in text
        for rows, folded in ((5, False), (gpu_symbolic.FOLD_ROWS, True)):
            grid = [size_value(g, {"N": rows}) for g in la["grid"]]
            dispatched = fold_at_run(grid, la["fold"])
            assert (dispatched != grid) == folded and max(dispatched) <= FOLD, (rows, grid, dispatched)
    for rows in (5, gpu_symbolic.FOLD_ROWS):
        x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        (want,) = run_onnxruntime(path, {"x": x})
        (got,) = mod.run(x=x)
        err = float(np.abs(got - want).max())
        assert got.shape == want.shape == (rows, 2) and err < 1e-5, f"MLP at N = {rows}: max error {err:.2e}"


def test_a_fold_whose_second_axis_passes_65535_too_is_refused_in_one_sentence(tmp_path):
    """Row tiles past 65535 x 65535 fold into (x, 65535, 65536): still more than WebGPU allows, so the launch
    is refused with the sentence an unfolded grid gets, before anything is dispatched."""
    _, mod = gpu_symbolic.wide_mlp(tmp_path)
    lib = mod.specialised({"N": 5}).library
    (launch,) = next(t for t in lib.tables.values() if "dense" in t["name"])["launches"]
    prepared = (None, None, [], launch["fold"])  # (pipeline, bind group, copies, fold): refused before use
    with pytest.raises(nnvm.InputError, match=r"^these input shapes need 65536 workgroups along one axis, "
                                              r"more than this WebGPU device allows \(65535\)"):
        lib.launch(lib.new_stream(), prepared, [1, 65535 * 65536, 1], launch["block"])


def test_a_grid_of_the_dims_along_z_stays_unfolded(tmp_path):
    """A convolution over a symbolic batch has its grid of the dims along z, with x and y taken: no axis
    to fold into, so it stays unfolded (a binding past 65535 of its workgroups is refused at launch)."""
    import onnx

    from nnvm_testing.frontend_onnx.shape_models import symbolic_batch_cnn

    path = str(tmp_path / "cnn.onnx")
    onnx.save(symbolic_batch_cnn(size=16), path)
    mod = nnvm.compile(path, target="webgpu", shapes={"x": ("N", 3, 16, 16)}, bounds={"N": (1, 4)},
                       tuning_log=False)
    lib = mod.specialised({"N": 2}).library
    convs = [la for t in lib.tables.values() for la in t["launches"] if not isinstance(la["grid"][2], int)]
    assert convs and all("fold" not in la and "read_only" not in la for la in convs), convs


def test_tint_accepts_the_folded_barrier_kernels_and_refuses_them_with_read_write_dims(tmp_path):
    """Tint, the browsers' WGSL compiler, checks WGSL's uniformity rules (naga, wgpu's, does not): it
    accepts the MLP's kernels (dense with barriers under the fold's guard, softmax's -inf), and refuses
    the same module with the dims bound read_write, as it was before: the guard is then non-uniform."""
    _, mod = gpu_symbolic.wide_mlp(tmp_path)
    source = mod.specialised({"N": 5}).library.files["kernels.wgsl"]
    assert source.count("var<storage, read> ") == 2
    read_write = source.replace("var<storage, read> ", "var<storage, read_write> ")
    errors = tint_errors({"read_only": source, "read_write": read_write}, tmp_path)
    assert errors["read_only"] == [], errors["read_only"]
    refusal = "'workgroupBarrier' must only be called from uniform control flow"
    assert errors["read_write"] and all(refusal in e for e in errors["read_write"]), errors["read_write"]

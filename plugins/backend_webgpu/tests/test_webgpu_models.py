"""Models compiled for ``webgpu`` (wgpu-native on lavapipe here) against onnxruntime: a transformer encoder,
a depthwise net and a GRU (the ONNX frontend's testing.shape_models), and the export to one file that a
fresh process loads and runs."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import numpy as np
import pytest

import nnvm
from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS, shape_model_reference


@pytest.mark.parametrize("name", sorted(SHAPE_MODELS))
def test_model_of_another_shape_matches_onnxruntime(name, tmp_path):
    path, x, want = shape_model_reference(name, tmp_path)
    got = nnvm.compile(path, target="webgpu").run(x)[0]
    err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))
    assert err < 1e-4, f"{name} on webgpu: max relative error {err:.2e} against onnxruntime"


def test_weights_stay_on_the_device_and_a_run_moves_inputs_and_outputs_only(tmp_path):
    path, x, want = shape_model_reference("transformer_encoder", tmp_path)
    mod = nnvm.compile(path, target="webgpu")
    mod.run(x)
    lib = mod.library
    before = (lib.bytes_to_device, lib.bytes_from_device)
    got = mod.run(x)[0]
    assert (lib.bytes_to_device - before[0], lib.bytes_from_device - before[1]) == (x.nbytes, want.nbytes)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_export_is_one_file_that_a_fresh_process_runs(tmp_path):
    path, x, want = shape_model_reference("depthwise_net", tmp_path)
    mod = nnvm.compile(path, target="webgpu")
    source = mod.library.source()
    assert "@compute @workgroup_size" in source and "var<workgroup>" in source
    out = tmp_path / "dw.nnvm"
    mod.export(str(out))
    with zipfile.ZipFile(out) as z:
        assert {"manifest.json", "files/kernels.wgsl", "blobs/graph", "blobs/params"} <= set(z.namelist())
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, nnvm; m = nnvm.load(sys.argv[1]); "
            "np.save(sys.argv[3], m.run(np.load(sys.argv[2]))[0])")
    proc = subprocess.run([sys.executable, "-c", code, str(out), str(tmp_path / "x.npy"),
                           str(tmp_path / "y.npy")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize(("damage", "message"), [
    (lambda d: (d / "manifest.json").write_text('{"format": "nnvm-webgpu-web", '),
     "not a readable nnvm WebGPU folder"),
    (lambda d: (d / "kernels.wgsl").write_text("fn broken("), "the WGSL compiler rejected the kernels"),
    (lambda d: (d / "weights.bin").write_bytes(b""), "lies outside weights.bin"),
])
def test_a_damaged_web_folder_is_one_error_naming_what_is_wrong(tmp_path, damage, message):
    path, _, _ = shape_model_reference("gru", tmp_path)
    folder = tmp_path / "gru.webgpu"
    nnvm.compile(path, target="webgpu").export(str(folder))
    damage(folder)
    with pytest.raises(nnvm.Error, match=message):
        nnvm.load(str(folder))


def test_int64_beyond_32_bits_is_an_error_not_a_wrong_answer():
    """WGSL computes int64 in 32 bits: values within them are exact, a value beyond them is refused."""
    from onnx import TensorProto, helper

    from nnvm.errors import InputError

    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "add",
                              [helper.make_tensor_value_info("x", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT64, [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    mod = nnvm.compile(model, target="webgpu")
    small = np.array([-(2**29), -1, 7, 2**29], np.int64)
    np.testing.assert_array_equal(mod.run(small)[0], small + small)
    with pytest.raises(InputError, match="the input .x. holds 4294967296, beyond the 32 bits"):
        mod.run(np.array([0, 1, 2, 2**32], np.int64))


def _first_arena_argument(manifest: dict) -> dict:
    return next(r for c in manifest["module"]["plan"]["calls"] for r in c["args"] if "arena" in r)


def _shrink_bindings(manifest: dict) -> None:
    for p in manifest["functions"][0]["params"]:
        p["nbytes"] = 4


def _misalign(manifest: dict) -> None:
    _first_arena_argument(manifest)["arena"] += 4


@pytest.mark.parametrize(("damage", "error", "message"), [
    # the kernels would read zeros past 4 bytes (WebGPU's bounds checks): a wrong answer, so refused at load
    (_shrink_bindings, nnvm.ModelLoadError, r"does not match its kernels \(\w+'s argument \w+ is bound as 4 "
                                            r"bytes, its tensor has \d+\)"),
    # an offset the device's alignment refuses: wgpu's validation error, as one sentence of ours
    (_misalign, nnvm.Error, r"the WebGPU device refused the buffers bound to kernel \w+: .*Buffer offset \d+ "
                            r"does not respect device's requested `min_storage_buffer_offset_alignment`"),
])
def test_a_launch_table_or_plan_the_device_cannot_run_is_one_sentence_not_an_answer(tmp_path, damage, error,
                                                                                     message):
    """A folder whose launch table or plan was tampered with: the load or the run raises one sentence
    (``nnvm.Error``, no wgpu traceback), and no output comes back."""
    import json

    path, x, _ = shape_model_reference("gru", tmp_path)
    folder = tmp_path / "gru.webgpu"
    nnvm.compile(path, target="webgpu").export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    damage(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(error, match=message) as caught:
        nnvm.load(str(folder)).run(x)
    assert "\n" not in str(caught.value) and caught.value.__cause__ is None, str(caught.value)

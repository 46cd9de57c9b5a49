"""Models exported for the web (``mod.export("model.webgpu")``) and run by ``nnvm-webgpu.js`` in Deno, whose
``navigator.gpu`` is wgpu on lavapipe here, against onnxruntime: ResNet-18, MobileNetV2 and a transformer
encoder (rel err <= 1e-4), as a web page would run them; ``nnvm.load`` runs the same folder from Python.
``make install`` installs deno from npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.environment import cache_dir
from nnvm_backend_webgpu.web import runtime_js
from nnvm_testing.frontend_onnx.models import cached_model_path
from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS

RUNNER = os.path.join(os.path.dirname(__file__), "run_model.js")


def _deno() -> str:
    found = cache_dir() / "tools" / "deno" / "node_modules" / ".bin" / "deno"
    path = str(found) if found.exists() else shutil.which("deno")
    if path is None:
        pytest.skip(f"deno is not installed ({found}): run make install")
    return path


def _model(name: str, tmp_path) -> str:
    if name in SHAPE_MODELS:
        path = str(tmp_path / f"{name}.onnx")
        onnx.save(SHAPE_MODELS[name](seed=0), path)
        return path
    return cached_model_path(name)


def run_in_deno(folder, feeds: dict, tmp_path) -> list:
    """The outputs of the exported ``folder`` on ``feeds`` (name -> array), run by nnvm-webgpu.js."""
    inputs, outputs = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    outputs.mkdir()
    for name, value in feeds.items():
        np.ascontiguousarray(value).tofile(inputs / f"{name}.bin")
    proc = subprocess.run([_deno(), "run", "--allow-read", "--allow-write", RUNNER, runtime_js(), str(folder),
                           str(inputs), str(outputs)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((folder / "manifest.json").read_text())["module"]["plan"]
    return [np.fromfile(outputs / f"{k}.bin", dtype=d["dtype"]).reshape(d["shape"])
            for k, d in enumerate(manifest["outputs"])]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "transformer_encoder"])
def test_a_model_exported_for_the_web_runs_in_deno_and_matches_onnxruntime(name, tmp_path):
    path = _model(name, tmp_path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in inp.shape])
    x = x.astype("float32")
    want = sess.run(None, {inp.name: x})[0]
    folder = tmp_path / f"{name}.webgpu"
    nnvm.compile(path, target="webgpu").export(str(folder))
    assert {p.name for p in folder.iterdir()} == {"manifest.json", "kernels.wgsl", "weights.bin",
                                                  "nnvm-webgpu.js"}
    runs = [("Deno (nnvm-webgpu.js)", run_in_deno(folder, {inp.name: x}, tmp_path))]
    if name == "transformer_encoder":  # the loader is the same for every model; a CNN's pipelines take long
        runs.append(("Python (nnvm.load of the folder)", nnvm.load(str(folder)).run(x)))
    for where, (got,) in runs:
        err = float(np.abs(got.astype("float64") - want).max() / np.abs(want).max())
        assert err <= 1e-4, f"{name} in {where}: relative error {err:.2e} against onnxruntime"


def test_a_kernel_with_more_buffers_than_a_browser_binds_reads_them_packed(tmp_path):
    """A concatenation of 6 inputs and 6 weights (13 buffers): no kernel binds more than the 8 storage buffers
    every WebGPU device gives; the runtimes copy the rest into one packed binding before the launch."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    shape = [1, 2, 3, 3]
    names = [f"x{i}" for i in range(6)]
    weights = {f"w{i}": rng.standard_normal(shape).astype("float32") for i in range(6)}
    order = [n for pair in zip(names, weights) for n in pair]
    nodes = [helper.make_node("Concat", order, ["c"], axis=1), helper.make_node("Sigmoid", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "wide_concat",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in names],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 3, 3])],
                              [numpy_helper.from_array(v, k) for k, v in weights.items()])
    path = str(tmp_path / "wide.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    feeds = {n: rng.standard_normal(shape).astype("float32") for n in names}
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    mod = nnvm.compile(path, target="webgpu")
    folder = tmp_path / "wide.webgpu"
    mod.export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["limits"]["maxStorageBuffersPerShaderStage"] <= 8
    assert any(t["packed"] for t in manifest["functions"])
    for where, (got,) in (("Python", mod.run(**feeds)), ("Deno", run_in_deno(folder, feeds, tmp_path))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"packed buffers in {where}")


def test_the_runtime_says_which_limit_the_adapter_lacks_and_which_input_is_wrong(tmp_path):
    folder = tmp_path / "gru.webgpu"
    nnvm.compile(_model("gru", tmp_path), target="webgpu").export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    (inp,) = manifest["module"]["plan"]["inputs"]
    script = tmp_path / "check.js"
    script.write_text(f"""
import * as nnvm from "{(folder / 'nnvm-webgpu.js').as_uri()}";
const m = await nnvm.load(new URL("{folder.as_uri()}/"));
try {{ await m.run({{ {inp['name']}: new Float32Array(3) }}); }} catch (e) {{ console.log(e.message); }}
""")
    proc = subprocess.run([_deno(), "run", "--allow-read", str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count = int(np.prod(inp["shape"]))
    assert f"nnvm: the input {inp['name']} must be a Float32Array of {count} elements" in proc.stdout
    manifest["limits"]["maxComputeInvocationsPerWorkgroup"] = 1 << 20
    (folder / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([_deno(), "run", "--allow-read", str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    assert "nnvm: the model needs maxComputeInvocationsPerWorkgroup = 1048576, this WebGPU adapter allows" \
        in proc.stderr

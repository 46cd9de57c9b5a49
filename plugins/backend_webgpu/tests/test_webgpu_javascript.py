"""Models exported for the web (``mod.export("model.webgpu")``) and run by ``nnvm-webgpu.js`` in Deno, whose
``navigator.gpu`` is wgpu on lavapipe here, against onnxruntime: ResNet-18, MobileNetV2 and a transformer
encoder (rel err <= 1e-4), as a web page would run them; ``nnvm.load`` runs the same folder from Python.
Modules with symbolic dims: one folder run at several shapes (an encoder, BERT, a CNN, GPT-2 with its KV
cache), and a shape that does not fit refused with the Python runtime's sentence.
``make install`` installs deno from npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.environment import cache_dir
from nnvm.gpu.library import size_value
from nnvm_backend_webgpu.web import runtime_js
from nnvm_testing import gpu_symbolic
from nnvm_testing.frontend_onnx import torch_models
from nnvm_testing.frontend_onnx.check import relative_error, run_onnxruntime
from nnvm_testing.frontend_onnx.models import cached_model_path
from nnvm_testing.frontend_onnx.shape_models import SHAPE_MODELS, dynamic_encoder, symbolic_batch_cnn
from nnvm_testing.venvs import pytest_venv

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


def _deno_run(folder, feeds: dict, tmp_path):
    """(the runner's process, its output folder) for ``feeds`` (name -> array) given to the exported
    ``folder``, with their shapes where the module has symbolic dims (folder version 2)."""
    inputs = Path(tempfile.mkdtemp(prefix="in", dir=tmp_path))
    outputs = Path(tempfile.mkdtemp(prefix="out", dir=tmp_path))
    for name, value in feeds.items():
        np.ascontiguousarray(value).tofile(inputs / f"{name}.bin")
    if json.loads((folder / "manifest.json").read_text())["module"].get("symbolic"):
        (inputs / "shapes.json").write_text(json.dumps({k: list(v.shape) for k, v in feeds.items()}))
    proc = subprocess.run([_deno(), "run", "--allow-read", "--allow-write", RUNNER, runtime_js(), str(folder),
                           str(inputs), str(outputs)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp")})
    return proc, outputs


def run_in_deno(folder, feeds: dict, tmp_path) -> list:
    """The outputs of the exported ``folder`` on ``feeds`` (name -> array), run by nnvm-webgpu.js, each with
    the shape the runtime gives it."""
    proc, outputs = _deno_run(folder, feeds, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads((folder / "manifest.json").read_text())["module"]["plan"]
    shapes = json.loads((outputs / "shapes.json").read_text())
    return [np.fromfile(outputs / f"{k}.bin", dtype=d["dtype"]).reshape(shape)
            for k, (d, shape) in enumerate(zip(plan["outputs"], shapes, strict=True))]


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


# -- modules with symbolic dims: one folder (version 2) runs every shape within the bounds ---------------
ENCODER_BOUNDS = {"batch": (1, 4), "seq": (1, 48)}
ENCODER_SHAPES = [(1, 1), (1, 7), (2, 33), (4, 48)]  # the last at the bounds: the plan's own binding


def encoder_feeds(batch: int, seq: int) -> dict:
    rng = np.random.default_rng(batch * 100 + seq)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    return {"input_ids": rng.integers(0, 100, (batch, seq)).astype(np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def symbolic_encoder(tmp_path_factory):
    """A BERT-style encoder (``dynamic_encoder``: int64 ids and mask [batch, seq]) compiled once with
    symbolic dims and exported once for the web: (onnx path, compiled module, folder)."""
    folder = tmp_path_factory.mktemp("web")
    path = str(folder / "encoder.onnx")
    onnx.save(dynamic_encoder(positions=64), path)
    mod = nnvm.compile(path, target="webgpu", bounds=ENCODER_BOUNDS, tuning_log=False)
    assert mod.stats()["symbolic"]["mode"] == "kernels"
    mod.export(str(folder / "encoder.webgpu"))
    return path, mod, folder / "encoder.webgpu"


@pytest.mark.parametrize("shape", ENCODER_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_a_symbolic_encoder_exported_once_runs_every_shape_in_deno(symbolic_encoder, shape, tmp_path):
    path, _, folder = symbolic_encoder
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["version"] == 2
    assert [d[0] for d in manifest["module"]["symbolic"]["dims"]] == ["batch", "seq"]
    feeds = encoder_feeds(*shape)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)
    runs = [("Deno (nnvm-webgpu.js)", run_in_deno(folder, feeds, tmp_path))]
    if shape == (2, 33):  # nnvm.load runs the same folder from Python
        runs.append(("Python (nnvm.load of the folder)", nnvm.load(str(folder)).run(**feeds)))
    for where, (got,) in runs:
        assert got.shape == want.shape == (*shape, 64), f"{where} at {shape}: shape {got.shape}"
        err = float(np.abs(got.astype("float64") - want).max() / np.abs(want).max())
        assert err <= 1e-4, f"the encoder in {where} at {shape}: relative error {err:.2e} against onnxruntime"


WRONG_SHAPES = {  # feeds -> what the one sentence says
    "seq-past-bound": (encoder_feeds(1, 49),
                       "input 'input_ids' dim 1 (seq) is 49, outside its bounds [1, 48]"),
    "batch-past-bound": (encoder_feeds(5, 3),
                         "input 'input_ids' dim 0 (batch) is 5, outside its bounds [1, 4]"),
    "inconsistent-seq": ({"input_ids": encoder_feeds(2, 7)["input_ids"],
                          "attention_mask": encoder_feeds(2, 9)["attention_mask"]},
                         "input 'attention_mask' dim 1 (seq) is 9, but input 'input_ids' has seq = 7"),
    "wrong-rank": ({"input_ids": np.zeros((2, 7, 1), np.int64), "attention_mask": np.ones((2, 7), np.int64)},
                   "input 'input_ids' must have rank 2 (batch, seq), got shape [2, 7, 1]"),
}


@pytest.mark.parametrize("case", list(WRONG_SHAPES))
def test_a_shape_outside_the_bounds_is_the_python_runtimes_one_sentence_in_deno(symbolic_encoder, case,
                                                                                 tmp_path):
    """nnvm-webgpu.js binds the dims as the Python runtime does: the same sentence, naming the input and the
    dim, alone on stderr (no stack trace), exit status 1."""
    _, mod, folder = symbolic_encoder
    feeds, sentence = WRONG_SHAPES[case]
    with pytest.raises(nnvm.InputError) as compiled:
        mod.run(**feeds)
    assert str(compiled.value) == sentence
    proc, _ = _deno_run(folder, feeds, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"nnvm: {sentence}"


def test_a_cnn_with_a_symbolic_batch_runs_two_batches_in_deno(tmp_path):
    model = symbolic_batch_cnn(size=32)
    path = str(tmp_path / "cnn.onnx")
    onnx.save(model, path)
    folder = tmp_path / "cnn.webgpu"
    mod = nnvm.compile(path, target="webgpu", shapes={"x": ("N", 3, 32, 32)}, bounds={"N": (1, 4)},
                       tuning_log=False)
    mod.export(str(folder))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        (want,) = sess.run(None, {"x": x})
        (got,) = run_in_deno(folder, {"x": x}, tmp_path)
        assert got.shape == want.shape == (batch, 10)
        err = float(np.abs(got.astype("float64") - want).max() / np.abs(want).max())
        assert err <= 1e-4, f"the CNN in Deno at batch {batch}: relative error {err:.2e} against onnxruntime"


def test_a_bert_exported_by_torch_with_dynamic_axes_runs_in_deno(tmp_path):
    """The 2-layer BERT of the GPU symbolic tests (torch's exporter, ``gpu_symbolic.bert_path``) exported
    for the web with bounds, run by nnvm-webgpu.js at a small binding and at the bounds."""
    path = gpu_symbolic.bert_path()
    mod = gpu_symbolic.compiled_once(path, "webgpu", bounds=gpu_symbolic.EXPORT_BOUNDS)
    folder = tmp_path / "bert.webgpu"
    mod.export(str(folder))
    for shape in [(1, 7), tuple(hi for _, hi in gpu_symbolic.EXPORT_BOUNDS.values())]:
        feeds = gpu_symbolic.bert_feeds(*shape)
        (want,) = run_onnxruntime(path, feeds)
        (got,) = run_in_deno(folder, feeds, tmp_path)
        assert got.shape == want.shape == (*shape, 64)
        err = relative_error(got, want)
        assert err <= 1e-4, f"bert in Deno at {shape}: relative error {err:.2e} against onnxruntime"


def test_a_symbolic_folder_tells_its_dims_and_wants_shapes_with_its_inputs(symbolic_encoder, tmp_path):
    """``m.dims`` and ``m.inputs`` give the bounds and the declared shapes; an input with symbolic dims given
    as a bare typed array (no shape) is one sentence naming it."""
    _, _, folder = symbolic_encoder
    script = tmp_path / "check.js"
    script.write_text(f"""
import * as nnvm from "{(folder / 'nnvm-webgpu.js').as_uri()}";
const m = await nnvm.load(new URL("{folder.as_uri()}/"));
console.log(JSON.stringify({{ dims: m.dims, inputs: m.inputs }}));
try {{ await m.run({{ input_ids: new BigInt64Array(6), attention_mask: new BigInt64Array(6) }}); }}
catch (e) {{ console.log(e.message); }}
""")
    proc = subprocess.run([_deno(), "run", "--allow-read", str(script)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    described, message = proc.stdout.strip().splitlines()
    assert json.loads(described) == {
        "dims": [{"name": "batch", "min": 1, "max": 4}, {"name": "seq", "min": 1, "max": 48}],
        "inputs": [{"name": "input_ids", "shape": ["batch", "seq"], "dtype": "int64"},
                   {"name": "attention_mask", "shape": ["batch", "seq"], "dtype": "int64"}]}
    assert message == "nnvm: the input input_ids has symbolic dims (batch, seq): give it as {data, shape}"


def test_gpt2_with_an_empty_then_a_filled_kv_cache_runs_in_deno(tmp_path):
    """GPT-2 (2 layers, width 64) with its KV cache exported for the web with bounds (``past`` from 0): the
    prompt with an empty cache (zero-element inputs), then one token with the cache onnxruntime gave, each
    output against onnxruntime; a mask whose length is not ``past + seq`` is Python's sentence."""
    path = pytest_venv(torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    bounds = {"batch": (1, 2), "seq": (1, 16), "past": (0, 32)}
    mod = gpu_symbolic.compiled_once(path, "webgpu", bounds=bounds)
    folder = tmp_path / "gpt2.webgpu"
    mod.export(str(folder))
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    _, out_names, feeds, past = torch_models.decoder_prompt(sess)
    for step in range(2):
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        want = sess.run(None, feeds)
        got = run_in_deno(folder, feeds, tmp_path)
        for name, g, w in zip(out_names, got, want, strict=True):
            assert g.shape == w.shape, f"step {step} {name}: {g.shape}, onnxruntime {w.shape}"
            err = relative_error(g, w)
            assert err <= 1e-4, f"gpt2 in Deno, step {step}, {name}: relative error {err:.2e}"
        token = np.argmax(want[0][:, -1], -1)[:, None].astype(np.int64)
        length = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": token, "attention_mask": np.ones((1, length), np.int64),
                 **{n: want[out_names.index(n.replace("past_key_values", "present"))] for n in past}}
    feeds["attention_mask"] = np.ones((1, length + 2), np.int64)
    with pytest.raises(nnvm.InputError, match=r"\(past \+ seq\) is \d+, but") as compiled:
        mod.run(**feeds)
    proc, _ = _deno_run(folder, feeds, tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip() == f"nnvm: {compiled.value}"


def test_a_folder_of_a_later_version_is_refused_in_one_sentence(symbolic_encoder, tmp_path):
    """Bound folders stay version 1, symbolic ones 2, and ones with read-only bindings 3: a version past
    them is one sentence, from Python and from nnvm-webgpu.js."""
    _, _, folder = symbolic_encoder
    later = tmp_path / "later.webgpu"
    shutil.copytree(folder, later)
    manifest = json.loads((later / "manifest.json").read_text())
    (later / "manifest.json").write_text(json.dumps({**manifest, "version": 4}))
    with pytest.raises(nnvm.ModelLoadError, match=r"folder version 4 is not supported \(expects 1 to 3\)"):
        nnvm.load(str(later))
    proc, _ = _deno_run(later, encoder_feeds(1, 2), tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().endswith("is not an nnvm WebGPU model of version 1 to 3 "
                                        "(got nnvm-webgpu-web 4)")


def test_a_requirement_of_the_model_is_checked_in_deno_as_in_python(tmp_path):
    """An encoder whose position table has 40 rows, bound to seq <= 48: the import's requirement (seq <= 40,
    a slice of the table) travels as programs and nnvm-webgpu.js checks it with Python's sentence."""
    path = str(tmp_path / "encoder40.onnx")
    onnx.save(dynamic_encoder(positions=40), path)
    mod = nnvm.compile(path, target="webgpu", bounds={"batch": (1, 2), "seq": (1, 48)}, tuning_log=False)
    folder = tmp_path / "encoder40.webgpu"
    mod.export(str(folder))
    feeds = encoder_feeds(1, 45)
    sentence = r"seq must be at most 40, and the inputs give seq = 45"
    with pytest.raises(nnvm.InputError, match=sentence) as compiled:
        mod.run(**feeds)
    proc, _ = _deno_run(folder, feeds, tmp_path)
    assert proc.returncode == 1 and proc.stderr.strip() == f"nnvm: {compiled.value}"
    (got,) = run_in_deno(folder, encoder_feeds(2, 40), tmp_path)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, encoder_feeds(2, 40))
    err = float(np.abs(got.astype("float64") - want).max() / np.abs(want).max())
    assert got.shape == want.shape and err <= 1e-4, f"at (2, 40): relative error {err:.2e}"


def test_grids_past_65535_workgroups_fold_in_deno(tmp_path):
    """BERT at (8, 512), its bounds: the attention's kernels need more than 65535 workgroups along x, marked
    to fold; nnvm-webgpu.js dispatches them as (65535, y, 1) as the Python runtime does (``fold_at_run``)."""
    path = gpu_symbolic.bert_path()
    mod = gpu_symbolic.compiled_once(path, "webgpu", bounds={"batch": (1, 8), "seq": (1, 512)})
    folder = tmp_path / "bert.webgpu"
    mod.export(str(folder))
    tables = json.loads((folder / "manifest.json").read_text())["functions"]
    folded = [size_value(la["grid"][0], {"batch": 8, "seq": 512}) for t in tables for la in t["launches"]
              if la.get("fold")]
    assert max(folded) > 65535
    feeds = gpu_symbolic.bert_feeds(8, 512)
    (want,) = run_onnxruntime(path, feeds)
    (got,) = run_in_deno(folder, feeds, tmp_path)
    err = relative_error(got, want)
    assert got.shape == want.shape and err <= 1e-4, f"bert in Deno at (8, 512): relative error {err:.2e}"


def test_a_barrier_kernels_grid_folded_at_run_time_runs_in_deno(tmp_path):
    """The MLP whose dense kernels (barriers, grids of ceil(N / 8) along y) fold y into z past 65535
    workgroups, exported for the web: version 3 (read-only dims bindings), run by nnvm-webgpu.js at a small
    N and at N = 524289 (65537 row tiles), against onnxruntime; ``nnvm.load`` runs the folder too."""
    path, mod = gpu_symbolic.wide_mlp(tmp_path)
    folder = tmp_path / "mlp.webgpu"
    mod.export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["version"] == 3
    folds = [la for t in manifest["functions"] for la in t["launches"] if la.get("fold") == "y"]
    assert len(folds) == 2 and all(la["read_only"] for la in folds)
    for rows in (3, gpu_symbolic.FOLD_ROWS):
        x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        (want,) = run_onnxruntime(path, {"x": x})
        runs = [("Deno (nnvm-webgpu.js)", run_in_deno(folder, {"x": x}, tmp_path))]
        if rows == gpu_symbolic.FOLD_ROWS:
            runs.append(("Python (nnvm.load of the folder)", nnvm.load(str(folder)).run(x=x)))
        for where, (got,) in runs:
            err = float(np.abs(got - want).max())
            assert got.shape == want.shape == (rows, 2) and err < 1e-5, f"{where} at N = {rows}: {err:.2e}"


def test_a_folder_with_corrupt_read_only_bindings_is_one_sentence(tmp_path):
    """A launch table whose read-only bindings are not a list of binding indices is refused in one
    sentence naming the kernel, by ``nnvm.load`` and by nnvm-webgpu.js, before any layout is made."""
    _, mod = gpu_symbolic.wide_mlp(tmp_path)
    folder = tmp_path / "corrupt.webgpu"
    mod.export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    launch = next(la for t in manifest["functions"] for la in t["launches"] if la.get("read_only"))
    launch["read_only"] = "dims"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    sentence = (f"kernel {launch['kernel']}: the launch table's fold 'y' or read-only bindings 'dims' are "
                "not ones this runtime knows")
    with pytest.raises(nnvm.ModelLoadError, match=sentence):
        nnvm.load(str(folder))
    proc, _ = _deno_run(folder, {"x": np.zeros((2, 4), np.float32)}, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (f"nnvm: kernel {launch['kernel']}: the launch table's fold or read-only "
                                   "bindings are not ones this runtime knows")


def test_a_folded_barrier_kernel_reading_its_dims_packed_runs_in_deno(tmp_path):
    """A dense kernel with twelve buffers reads its dims through the packed binding: that binding is the
    read-only one. Run by nnvm-webgpu.js and from Python past 65535 row tiles, against onnxruntime (the
    JavaScript runtime gave zeros here before: its dims buffer could not be copied from, and the refused
    submit was silent)."""
    path, mod, feeds = gpu_symbolic.packed_dense(tmp_path)
    folder = tmp_path / "packed.webgpu"
    mod.export(str(folder))
    manifest = json.loads((folder / "manifest.json").read_text())
    (table,) = manifest["functions"]
    (launch,) = table["launches"]
    count = len(table["params"]) + len(table["temporaries"]) - len(table["packed"]) + 1
    assert table["params"][-1]["name"] == "nnvm_dims" and table["packed"][-1][0] == len(table["params"]) - 1
    assert launch["fold"] == "y" and launch["read_only"] == [count - 1]  # the packed binding, last
    source = (folder / "kernels.wgsl").read_text()
    assert f"@binding({count - 1}) var<storage, read> {launch['kernel']}_packed: array<u32>;" in source
    for rows in (3, gpu_symbolic.FOLD_ROWS):
        (want,) = run_onnxruntime(path, feeds(rows))
        for where, (got,) in (("Deno", run_in_deno(folder, feeds(rows), tmp_path)),
                              ("Python", mod.run(**feeds(rows)))):
            err = float(np.abs(got - want).max())
            assert got.shape == want.shape == (rows, 2) and err < 1e-5, f"{where} at N = {rows}: {err:.2e}"
    # a command WebGPU refuses (a packed copy overrunning the dims buffer) is one sentence, not zeros
    table["packed"][-1][2] = 4096
    (folder / "manifest.json").write_text(json.dumps(manifest))
    proc, _ = _deno_run(folder, feeds(3), tmp_path)
    assert proc.returncode == 1 and proc.stderr.startswith("nnvm: WebGPU refused the run: "), proc.stderr

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
    past): the same tokens as onnxruntime on the same file, and logits close at every step. The cache
    stays on the device (``run_resident``): each one-token step moves the token, the mask and the dims to
    the device and the logits back, nothing of the cache, whose last ``present`` matches onnxruntime's."""
    import pytest

    from nnvm.generate import Decoder, greedy, peer_step
    from nnvm.gpu.library import DeviceTensor

    path = pytest_venv(torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    dec = Decoder(path, target=target, tuning_log=False)
    info = dec.module.stats()["symbolic"]
    assert info["mode"] == "kernels" and info["why_per_binding"] is None, info["why_per_binding"]
    ours, theirs, moved = [], [], []

    def logged(step, log, last):
        def run(feeds):
            outs = step(feeds)
            log.append(outs[0][:, -1].copy())
            last[:] = outs
            return outs
        return run

    def counted(feeds):
        before = _moved(dec)
        outs = dec.step(feeds)
        after = _moved(dec)
        moved.append((after[0] - before[0], after[1] - before[1], outs))
        return outs

    ids = np.random.default_rng(3).integers(0, 1000, (1, 7))
    last_ours, last_theirs = [], []
    got = greedy(logged(counted, ours, last_ours), dec.spec, ids, new_tokens)
    step, spec, _ = peer_step("onnxruntime", path, 1)
    want = greedy(logged(step, theirs, last_theirs), spec, ids, new_tokens)
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        err = relative_error(a, b)
        assert err < 1e-4, f"gpt2 on {target}, step {k}: relative error {err:.2e} against onnxruntime"
    present = [i for i, n in enumerate(dec.spec.outputs) if n.startswith("present")]
    for k, (to_device, from_device, outs) in enumerate(moved[1:], 1):  # the one-token steps
        assert all(isinstance(outs[i], DeviceTensor) for i in present), [type(o) for o in outs]
        assert from_device == outs[dec.spec.logits].nbytes, (k, from_device)
        assert to_device < 512, f"step {k} moved {to_device} bytes to the device"
    for i in present:
        err = relative_error(np.asarray(last_ours[i]), last_theirs[i])
        assert err < 1e-4, f"gpt2 on {target}: {dec.spec.outputs[i]} relative error {err:.2e}"
    # the cache's buffers alternate: the last step's held (by ``last_ours``), the step before's given back
    # for the next; those of the buckets it outgrew freed
    assert len(dec.module._whole.library._resident) <= len(present)
    with pytest.raises(nnvm.InputError, match="keep= names 'logit', which is no output of the model"):
        dec.module.run_resident(dec.spec.first_feeds(ids), keep=["logit"])


def _moved(dec) -> tuple[int, int]:
    """(bytes to the device, bytes from it) so far by the library of the decoder's one compile."""
    lib = dec.module._whole.library  # every bucket's module shares it
    return lib.bytes_to_device, lib.bytes_from_device


# -- exported symbolic modules (one file, one plan for the upper bounds) ---------------------------------
EXPORT_BOUNDS = {"batch": (1, 4), "seq": (1, 48)}
EXPORT_BERT_SHAPES = ((1, 1), (2, 9), (4, 48))  # the last at the bounds: the plan's own binding
EXPORT_CNN_BATCHES = (1, 3, 4)
PLUGINS = {"opencl": "opencl", "cuda": "cuda", "metal": "metal", "webgpu": "webgpu"}  # entry point names


def exported(target: str, folder) -> dict:
    """The BERT (``EXPORT_BOUNDS``) and the CNN (batch 1 to 4) compiled once for ``target`` and exported:
    ``{"bert": (model, module, file), "cnn": (...)}``, for a test module's fixture to share."""
    out = {}
    bert = bert_path()
    mod = compiled_once(bert, target, bounds=EXPORT_BOUNDS)
    mod.export(folder / "bert.so")
    out["bert"] = (bert, mod, folder / "bert.so")
    cnn = symbolic_batch_cnn(size=CNN_SIZE)
    mod = compiled_once(cnn, target, shapes={"x": ("N", 3, CNN_SIZE, CNN_SIZE)}, bounds={"N": (1, 4)})
    mod.export(folder / "cnn.so")
    out["cnn"] = (cnn, mod, folder / "cnn.so")
    return out


def export_feeds() -> dict:
    """The bindings each exported model runs at: ``{"bert": [feeds, ...], "cnn": [...]}``."""
    cnn = [{"x": np.random.default_rng(b).standard_normal((b, 3, CNN_SIZE, CNN_SIZE)).astype(np.float32)}
           for b in EXPORT_CNN_BATCHES]
    return {"bert": [bert_feeds(b, s) for b, s in EXPORT_BERT_SHAPES], "cnn": cnn}


def fresh_process_outputs(target: str, files: dict, feeds: dict, tmp) -> dict:
    """``nnvm.load(file).run(**feeds)``'s first output for every model's feeds, in a new process that
    loads the target's backend plugin alone (no frontend): ``{model: [output, ...]}``. Also checks
    that the loaded module is the exported symbolic one and says so in its stats."""
    import os
    import subprocess
    import sys
    import textwrap

    for model, many in feeds.items():
        for k, f in enumerate(many):
            np.savez(tmp / f"{model}-feeds{k}.npz", **f)
    script = textwrap.dedent(f"""
        import sys, numpy as np, nnvm
        for model, path, count in {[(m, str(files[m]), len(f)) for m, f in feeds.items()]!r}:
            mod = nnvm.load(path)
            assert mod.stats()["symbolic"]["mode"] == "exported", mod.stats()
            for k in range(count):
                got = mod.run(**dict(np.load({str(tmp)!r} + f"/{{model}}-feeds{{k}}.npz")))[0]
                np.save({str(tmp)!r} + f"/{{model}}-got{{k}}.npy", got)
        assert "nnvm_frontend_onnx" not in sys.modules, "the frontend was loaded"
    """)
    env = dict(os.environ, NNVM_PLUGINS=PLUGINS[target.split()[0]])
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    return {m: [np.load(tmp / f"{m}-got{k}.npy") for k in range(len(f))] for m, f in feeds.items()}


def check_exported(target: str, files: dict, tmp) -> None:
    """Each exported file, loaded in a fresh process (``fresh_process_outputs``), matches onnxruntime at
    every binding of ``export_feeds``, smaller ones run in the plan made for the bounds."""
    feeds = export_feeds()
    got = fresh_process_outputs(target, {m: f[2] for m, f in files.items()}, feeds, tmp)
    for model, many in feeds.items():
        for f, g in zip(many, got[model]):
            (want,) = run_onnxruntime(files[model][0], f)
            shapes = {k: v.shape for k, v in f.items()}
            assert g.shape == want.shape, f"{model} on {target} at {shapes}: {g.shape}, not {want.shape}"
            err = relative_error(g, want)
            assert err < 1e-4, f"exported {model} on {target} at {shapes}: relative error {err:.2e}"


OUT_OF_BOUNDS = [
    {"input_ids": np.zeros((1, 49), np.int64), "attention_mask": np.ones((1, 49), np.int64)},
    {"input_ids": np.zeros((5, 3), np.int64), "attention_mask": np.ones((5, 3), np.int64)},
    {"input_ids": np.zeros((2, 7), np.int64), "attention_mask": np.ones((2, 9), np.int64)},
]


def check_export_errors(files: dict) -> None:
    """A binding above the bounds or inconsistent between inputs: the compiled module's one sentence
    (naming the input and the dim), word for word from the loaded file."""
    import pytest

    _, mod, path = files["bert"]
    loaded = nnvm.load(path)
    for feeds in OUT_OF_BOUNDS:
        with pytest.raises(nnvm.InputError) as compiled:
            mod.run(**feeds)
        message = str(compiled.value)
        assert "input '" in message and "dim " in message, message
        with pytest.raises(nnvm.InputError) as again:
            loaded.run(**feeds)
        assert str(again.value) == message


def rewritten(path, folder, name: str, manifest=None, graph=None) -> str:
    """A copy of the exported GPU module ``path`` with its manifest and/or graph section changed by the
    functions given, re-zipped with a digest that matches (a crafted file, not a damaged one)."""
    import json
    import zipfile

    from nnvm.gpu.library import content_digest

    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    meta = json.loads(members["manifest.json"])
    files = {n[len("files/"):]: d for n, d in members.items() if n.startswith("files/")}
    blobs = {n[len("blobs/"):]: d for n, d in members.items() if n.startswith("blobs/")}
    if manifest is not None:
        manifest(meta)
    if graph is not None:
        section = json.loads(blobs["graph"])
        graph(section)
        blobs["graph"] = json.dumps(section).encode()
    meta["digest"] = content_digest(meta, files, blobs)
    out = folder / name
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("manifest.json", json.dumps(meta))
        for n, d in files.items():
            z.writestr(f"files/{n}", d)
        for n, d in blobs.items():
            z.writestr(f"blobs/{n}", d)
    return str(out)


def _first_symbolic_launch(meta: dict) -> dict:
    return next(la for f in meta["functions"] for la in f["launches"] if not isinstance(la["grid"][0], int))


def check_corrupt_sections(files: dict, folder) -> None:
    """A symbolic file whose section or launch terms are wrong is refused at ``nnvm.load`` with one
    sentence naming the file: bounds above the plan's dims (the kernels would run past the arena), a
    malformed dims section, a grid term with an unknown operation or naming a dim the plan lacks, and a
    byte changed after export (the digest)."""
    import zipfile

    import pytest

    from nnvm.errors import ModelLoadError

    path = files["bert"][2]

    def widen(section):  # seq up to 4096, the plan made for 48
        section["symbolic"]["dims"] = [[d, lo, 4096 if d == "seq" else hi]
                                       for d, lo, hi in section["symbolic"]["dims"]]

    def bad_op(meta):
        _first_symbolic_launch(meta)["grid"][0] = ["pow", ["dim", "seq"], 2]

    def other_dim(meta):
        _first_symbolic_launch(meta)["grid"][0] = ["dim", "heads"]

    cases = [
        (rewritten(path, folder, "wide.so", graph=widen),
         "symbolic dims section is corrupt (dim 'seq' goes up to 4096, above the 48 its plan is made for)"),
        (rewritten(path, folder, "nodims.so", graph=lambda s: s["symbolic"].pop("dims")),
         "symbolic dims section is corrupt"),
        (rewritten(path, folder, "op.so", manifest=bad_op), "manifest is corrupt"),
        (rewritten(path, folder, "dim.so", manifest=other_dim), "a dim 'heads' that the plan does not bind"),
    ]
    data = bytearray(open(path, "rb").read())
    damaged = folder / "damaged.so"
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("blobs/graph")
    data[info.header_offset + 30 + len(info.filename) + 5] ^= 0xFF  # inside the graph blob's data
    damaged.write_bytes(bytes(data))
    for bad, words in cases:
        with pytest.raises(ModelLoadError) as exc:
            nnvm.load(bad)
        message = str(exc.value)
        assert message.startswith(str(bad)) and words in message and "\n" not in message, message
    with pytest.raises(ModelLoadError, match="damaged|corrupt|not a readable"):
        nnvm.load(damaged)


def check_bound_plan_with_symbolic_tables(files: dict, folder) -> None:
    """A file whose launch tables take the dims but whose graph section binds none (its symbolic section
    and the plan's dims removed, the digest rewritten) is refused at loading, before any launch."""
    import pytest

    from nnvm.errors import ModelLoadError

    def unbind(section):
        section.pop("symbolic")
        section["version"] = 3
        section["plan"].pop("dims")
        for call in section["plan"]["calls"]:
            call["args"] = [a for a in call["args"] if "dim" not in a]

    bad = rewritten(files["cnn"][2], folder, "unbound.so", graph=unbind)
    with pytest.raises(ModelLoadError, match="launch sizes depend on symbolic dims, and the plan binds none"):
        nnvm.load(bad)


def check_exported_decoder(target: str, folder, steps: int = 3) -> None:
    """GPT-2 (2 layers, width 64) with its KV cache, compiled once for ``target`` with bounds, exported
    and loaded back: the prompt with an empty cache (``past`` = 0, empty inputs), then one token a step
    with ``present`` kept on the device and fed back as ``past`` (``run_resident``); every output matches
    onnxruntime at every step, and a mask whose length is not ``past + seq`` is the compiled module's
    sentence."""
    import onnxruntime as ort
    import pytest

    from nnvm.gpu.library import DeviceTensor

    path = pytest_venv(torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    mod = compiled_once(path, target, bounds={"batch": (1, 2), "seq": (1, 16), "past": (0, 32)})
    mod.export(folder / "gpt2.so")
    loaded = nnvm.load(folder / "gpt2.so")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names, out_names, feeds, past = torch_models.decoder_prompt(sess)
    for step in range(steps):
        want = sess.run(None, {k: np.asarray(v) for k, v in feeds.items()})
        kept = loaded.run_resident(feeds, keep=[n for n in out_names if n.startswith("present")])
        assert all(isinstance(g, DeviceTensor) for g, n in zip(kept, out_names) if n.startswith("present"))
        got = [np.asarray(g) for g in kept]
        for name, g, w in zip(out_names, got, want):
            assert g.shape == w.shape, f"step {step} {name}: {g.shape}, onnxruntime {w.shape}"
            err = relative_error(g, w)
            assert err < 1e-4, f"exported gpt2 on {target}, step {step}, {name}: relative error {err:.2e}"
        token = np.argmax(got[0][:, -1], -1)[:, None].astype(np.int64)
        # the cache fed back where it is (DeviceTensors); the mask sentence below with arrays
        present = {n: kept[out_names.index(n.replace("past_key_values", "present"))] for n in past}
        length = feeds["attention_mask"].shape[1] + 1
        feeds = {"input_ids": token, "attention_mask": np.ones((1, length), np.int64), **present}
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    feeds["attention_mask"] = np.ones((1, length + 2), np.int64)
    with pytest.raises(nnvm.InputError, match=r"\(past \+ seq\) is \d+, but") as compiled:
        mod.run(**feeds)
    with pytest.raises(nnvm.InputError) as again:
        loaded.run(**feeds)
    assert str(again.value) == str(compiled.value)


# A dense's row tiles are 8 rows a workgroup along y: this many rows need 65537 of them, past the 65535
# WebGPU guarantees per axis (its kernel has barriers: data and weight tiles in workgroup memory).
FOLD_ROWS = 8 * 65535 + 9


def wide_mlp(folder) -> tuple:
    """(onnx path, module): ``dynamic_mlp`` with 4 features, 8 hidden and 2 classes (little work per row),
    compiled once for ``webgpu`` with ``N`` up to past ``FOLD_ROWS``."""
    import onnx

    from nnvm_testing.frontend_onnx.shape_models import dynamic_mlp

    path = str(folder / "wide_mlp.onnx")
    onnx.save(dynamic_mlp(features=4, hidden=8, classes=2), path)
    return path, compiled_once(path, "webgpu", bounds={"N": (1, FOLD_ROWS + 7)})


def packed_dense(folder) -> tuple:
    """(onnx path, module, feeds(rows)): a Gemm over x [N, 4] followed by seven adds and multiplies of
    inputs [2], fused into the dense's kernel: twelve buffers, so its last read-only ones, the dims
    among them, are read through one packed binding (``wgsl.pack_plan``); compiled once for ``webgpu``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h0"])]
    for i in range(1, 8):
        nodes.append(helper.make_node("Add" if i % 2 else "Mul", [f"h{i - 1}", f"c{i}"], [f"h{i}"]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])]
    inputs += [helper.make_tensor_value_info(f"c{i}", TensorProto.FLOAT, [2]) for i in range(1, 8)]
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("w", (4, 2)), ("b", (2,)))]
    graph = helper.make_graph(nodes, "nnvm_packed_dense", inputs,
                              [helper.make_tensor_value_info("h7", TensorProto.FLOAT, ["N", 2])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = str(folder / "packed_dense.onnx")
    onnx.save(model, path)
    consts = {f"c{i}": rng.uniform(0.5, 1.5, 2).astype(np.float32) for i in range(1, 8)}

    def feeds(rows: int) -> dict:
        return {"x": np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32), **consts}

    return path, compiled_once(path, "webgpu", bounds={"N": (1, FOLD_ROWS + 7)}), feeds

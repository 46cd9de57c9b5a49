"""A staged module (a model cut at data-dependent nodes, ``nnvm.staged``) exports to one file
(``nnvm.runtime.staged_file``) that a fresh process with the core alone loads and runs: for each operator
the ONNX frontend stages, outputs bit-equal to the in-process module's and equal to onnxruntime's, on
inputs giving different data-dependent sizes (an empty one included); a model staged twice; ``nnvm
compile`` writing the file and ``nnvm run`` running it; a damaged or newer file and the C runtime each
refused in one sentence."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper

import nnvm
from nnvm.runtime import artifact, staged_file
from nnvm.runtime.crt import build_runtime, runtime_target
from nnvm.staged import StagedModule
from nnvm_testing.frontend_onnx.check import run_onnxruntime
from nnvm_testing.frontend_onnx.shape_models import mask_select


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "staged", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _mask_select_feeds():
    out = []
    for n, seed in [(23, 0), (5, 1), (40, 2)]:
        rng = np.random.default_rng(seed)
        out.append({"boxes": rng.standard_normal((n, 4)).astype(np.float32),
                    "scores": rng.random(n).astype(np.float32)})
    out[1]["scores"][:] = 0.0  # NonZero of all zeros: nothing selected
    return out


def _topk():
    """TopK with k an input, its values scaled after it."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("TopK", ["r", "k"], ["v", "i"], axis=1, largest=1),
             helper.make_node("Mul", ["v", "two"], ["y"])]
    model = _model(nodes, [_vi("x", T.FLOAT, [3, 10]), _vi("k", T.INT64, [1])],
                   [_vi("y", T.FLOAT, None), _vi("i", T.INT64, None)],
                   [helper.make_tensor("two", T.FLOAT, [], [2.0])])
    rng = np.random.default_rng(3)
    feeds = [{"x": rng.standard_normal((3, 10)).astype(np.float32), "k": np.array([k], np.int64)}
             for k in (4, 0, 10)]
    return model, {}, feeds


def _range():
    """Range over computed bounds (the inputs doubled), cast and shifted after it."""
    nodes = [helper.make_node("Add", ["start", "start"], ["s2"]),
             helper.make_node("Add", ["limit", "limit"], ["l2"]),
             helper.make_node("Range", ["s2", "l2", "delta"], ["r"]),
             helper.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
             helper.make_node("Add", ["rf", "half"], ["y"])]
    model = _model(nodes, [_vi("start", T.INT64, []), _vi("limit", T.INT64, []), _vi("delta", T.INT64, [])],
                   [_vi("y", T.FLOAT, None)], [helper.make_tensor("half", T.FLOAT, [], [0.5])])
    feeds = [{"start": np.array(a, np.int64), "limit": np.array(b, np.int64), "delta": np.array(c, np.int64)}
             for a, b, c in [(0, 8, 3), (5, 2, 1), (7, -1, -2)]]
    return model, {"bounds": {"range_0": (0, 32)}}, feeds


def _compress_unique():
    """Compress by a computed condition, then Unique of a computed tensor: the rest cut twice."""
    nodes = [helper.make_node("Greater", ["c", "zero"], ["cond"]),
             helper.make_node("Compress", ["x", "cond"], ["kept"], axis=0),
             helper.make_node("Relu", ["kept"], ["kept_relu"]),
             helper.make_node("Add", ["ids", "ids"], ["ids2"]),
             helper.make_node("Unique", ["ids2"], ["u", "first", "inverse", "counts"], sorted=1),
             helper.make_node("Mul", ["u", "counts"], ["weighted"])]
    model = _model(nodes, [_vi("x", T.FLOAT, [8, 3]), _vi("c", T.FLOAT, [8]), _vi("ids", T.INT64, [12])],
                   [_vi("kept_relu", T.FLOAT, None), _vi("weighted", T.INT64, None),
                    _vi("first", T.INT64, None), _vi("inverse", T.INT64, None)],
                   [helper.make_tensor("zero", T.FLOAT, [], [0.0])])
    feeds = []
    for seed in range(3):
        rng = np.random.default_rng(10 + seed)
        feeds.append({"x": rng.standard_normal((8, 3)).astype(np.float32),
                      "c": rng.standard_normal(8).astype(np.float32),
                      "ids": rng.integers(0, 2 + 4 * seed, 12).astype(np.int64)})
    feeds[0]["c"][:] = -1.0  # nothing kept
    feeds[2]["c"][:] = 1.0  # everything kept
    return model, {}, feeds


CASES = {
    "nonzero": lambda: (mask_select(), {"bounds": {"count": (1, 64)}}, _mask_select_feeds()),
    "topk": _topk,
    "range": _range,
    "compress_unique": _compress_unique,
}


def _core_only(script: str) -> subprocess.CompletedProcess:
    """``script`` in a fresh process with no plugin loaded; it asserts the frontend was never imported."""
    script += "\nassert 'nnvm_frontend_onnx' not in sys.modules and 'llvmlite' not in sys.modules\n"
    env = dict(os.environ, NNVM_DISABLE_PLUGIN_AUTOLOAD="1")
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each case compiled, exported, its inputs saved, and every file run in ONE core-only process."""
    tmp = tmp_path_factory.mktemp("staged_export")
    cases = {}
    for name, make in CASES.items():
        model, kwargs, feeds = make()
        mod = nnvm.compile(model, target="llvm", tuning_log=False, **kwargs)
        assert isinstance(mod, StagedModule), name
        path = tmp / f"{name}.so"
        mod.export(str(path))
        for k, feed in enumerate(feeds):
            np.savez(tmp / f"{name}_in{k}.npz", **feed)
        cases[name] = (model, mod, feeds, path)
    script = textwrap.dedent(f"""
        import sys, numpy as np, nnvm
        for name, n in {[(name, len(c[2])) for name, c in cases.items()]!r}:
            mod = nnvm.load({str(tmp)!r} + f"/{{name}}.so")
            for k in range(n):
                feed = dict(np.load({str(tmp)!r} + f"/{{name}}_in{{k}}.npz"))
                outs = mod.run(**feed)
                np.savez({str(tmp)!r} + f"/{{name}}_out{{k}}.npz", *outs)
    """)
    proc = _core_only(script)
    assert proc.returncode == 0, proc.stderr
    return tmp, cases


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_staged_module_exported_runs_with_the_core_alone(exported, name):
    tmp, cases = exported
    model, mod, feeds, _ = cases[name]
    sizes = set()
    for k, feed in enumerate(feeds):
        loaded = np.load(tmp / f"{name}_out{k}.npz")
        got = [loaded[f"arr_{j}"] for j in range(len(loaded.files))]
        mine = mod.run(**feed)
        want = run_onnxruntime(model, feed)
        assert len(got) == len(mine) == len(want), name
        for j, (g, m, w) in enumerate(zip(got, mine, want)):
            where = f"{name}, inputs {k}, output {j}"
            assert g.dtype == m.dtype and g.shape == m.shape and np.array_equal(g, m), \
                f"{where}: the loaded file gives {g.dtype}{g.shape}, the in-process module {m.dtype}{m.shape}"
            assert g.shape == w.shape and g.dtype == w.dtype, f"{where}: {g.shape}, onnxruntime {w.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=where)
        sizes.add(got[0].shape)
    assert len(sizes) == len(feeds), f"{name}: the inputs give sizes {sizes}, not {len(feeds)} different ones"
    assert any(0 in s for s in sizes), f"{name}: no input gives an empty result ({sizes})"


def test_a_module_staged_twice_keeps_both_host_ops(exported):
    tmp, cases = exported
    loaded = nnvm.load(str(tmp / "compress_unique.so"))
    loaded.run(**cases["compress_unique"][2][1])
    hosts = list(_host_stages(loaded.stats()["symbolic"]["stages"]))
    assert [(s["op"], s["dim"]) for s in hosts] == [("Compress", "compress_0"), ("Unique", "unique_0")]
    assert all(s["last"] is not None for s in hosts)
    loaded.export(str(tmp / "again.so"))  # a loaded file exports again, each stage as its module does
    feed = cases["compress_unique"][2][2]
    for g, m in zip(nnvm.load(str(tmp / "again.so")).run(**feed), loaded.run(**feed)):
        assert g.shape == m.shape and np.array_equal(g, m)


def _host_stages(stages):
    for s in stages:
        if s["kind"] == "host":
            yield s
        yield from _host_stages(s.get("stages", []))


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "nnvm.cli", *args], capture_output=True, text=True,
                          timeout=600)


def _one_sentence(proc, expected: str, what: str) -> None:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, f"{what}: {proc.stderr!r}"
    assert len(lines) == 1 and expected in lines[0], f"{what}: {proc.stderr!r}"


def test_nnvm_compile_writes_a_staged_file_and_nnvm_run_runs_it(tmp_path):
    model = mask_select()
    onnx.save(model, str(tmp_path / "select.onnx"))
    out = tmp_path / "select.nnvm"  # nnvm run knows a staged file by its magic, not its name
    proc = _cli("compile", str(tmp_path / "select.onnx"), "--target", "llvm", "-o", str(out))
    _one_sentence(proc, f"cannot export {out} (stage 0): the module has symbolic dims (count), and 'count' "
                        "has no upper bound", "no bound")
    proc = _cli("compile", str(tmp_path / "select.onnx"), "--target", "llvm", "-o", str(out),
                "--bound", "count=1:64", "--stats")
    assert proc.returncode == 0, proc.stderr
    assert "  kernels: " in proc.stdout and "  nodes_before: " in proc.stdout, proc.stdout
    _one_sentence(_cli("compile", str(tmp_path / "select.onnx"), "--target", "llvm", "--bound", "count=64"),
                  "--bound 'count=64' should look like NAME=LO:HI", "a bad --bound")
    feeds = _mask_select_feeds()[0]
    args = []
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    proc = _cli("run", str(out), *args, "--output", str(tmp_path / "out.npz"))
    assert proc.returncode == 0, proc.stderr
    got = np.load(tmp_path / "out.npz")
    for name, want in zip(("scaled", "area", "nz"), run_onnxruntime(model, feeds)):
        assert got[name].shape == want.shape, (name, got[name].shape, want.shape)
        np.testing.assert_allclose(got[name], want, rtol=1e-5, err_msg=name)


def test_a_damaged_or_newer_staged_file_is_one_sentence(exported, tmp_path):
    tmp, _ = exported
    data = (tmp / "nonzero.so").read_bytes()
    truncated, corrupted, newer = (tmp_path / f"{n}.so" for n in ("truncated", "corrupted", "newer"))
    truncated.write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF
    corrupted.write_bytes(bytes(flipped))
    tail = data[16:]  # a well-formed file of a later version: its own checksum right
    newer.write_bytes(data[:8] + struct.pack("<II", staged_file.STAGED_FORMAT_VERSION + 1, zlib.crc32(tail))
                      + tail)
    damaged = "checksum or size mismatch: the staged module file is truncated or corrupted"
    for path, expected in [(truncated, damaged), (corrupted, damaged),
                           (newer, f"staged module format v{staged_file.STAGED_FORMAT_VERSION + 1} is newer "
                                   "than this nnvm reads")]:
        proc = _cli("run", str(path), "--input", f"scores={tmp_path / 's.npy'}")
        _one_sentence(proc, f"{path}: {expected}", path.name)


def test_the_c_runtime_refuses_a_staged_file_naming_the_node(exported):
    tmp, _ = exported
    nnvm_run = build_runtime(runtime_target("llvm"))["nnvm-run"]
    path = tmp / "nonzero.so"
    proc = subprocess.run([nnvm_run, str(path), "--info"], capture_output=True, text=True, timeout=120)
    _one_sentence(proc, f"{path}: node NonZero_1 (NonZero) has an output shape decided at run time and runs "
                        "on the host between the module's compiled stages, which the C runtime does not do; "
                        "run this file from Python", "nnvm-run")


@pytest.mark.parametrize("target,plugin", [("opencl -device=cpu", "opencl"), ("cuda", "cuda"),
                                           ("metal", "metal")])
def test_a_staged_module_for_a_gpu_target_exports_and_loads_without_the_frontend(target, plugin, tmp_path):
    """A GPU target's stages are its own export files (kernels, plan, weights); a fresh process with only
    that backend (PoCL's CPU device; CUDA and Metal kernels run on the CPU where there is no such GPU), no
    frontend, runs the file bit-equal to the in-process module."""
    model = mask_select()
    mod = nnvm.compile(model, target=target, bounds={"count": (1, 64)}, tuning_log=False)
    path = tmp_path / "select_cl.so"
    mod.export(str(path))
    feeds = _mask_select_feeds()
    for k, feed in enumerate(feeds):
        np.savez(tmp_path / f"in{k}.npz", **feed)
    script = textwrap.dedent(f"""
        import sys, numpy as np, nnvm
        mod, tmp = nnvm.load({str(path)!r}), {str(tmp_path)!r}
        for k in range({len(feeds)}):
            np.savez(tmp + f"/out{{k}}.npz", *mod.run(**np.load(tmp + f"/in{{k}}.npz")))
        assert 'nnvm_frontend_onnx' not in sys.modules
    """)
    env = dict(os.environ, NNVM_PLUGINS=plugin)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    for k, feed in enumerate(feeds):
        loaded = np.load(tmp_path / f"out{k}.npz")
        for j, (m, w) in enumerate(zip(mod.run(**feed), run_onnxruntime(model, feed))):
            g = loaded[f"arr_{j}"]
            assert g.shape == m.shape and np.array_equal(g, m), f"inputs {k}, output {j}: {g.shape} {m.shape}"
            np.testing.assert_allclose(g, w, rtol=1e-5, err_msg=f"inputs {k}, output {j}")


def test_a_staged_module_for_webgpu_refuses_the_web_folder_in_one_sentence(tmp_path):
    """A ``.webgpu`` export is nnvm-webgpu.js's folder, which runs no host step between stages."""
    mod = nnvm.compile(mask_select(), target="webgpu", bounds={"count": (1, 64)}, tuning_log=False)
    path = tmp_path / "m.webgpu"
    with pytest.raises(nnvm.Error, match=r"^cannot export .*m\.webgpu: its stages are written as folders "
                                         r"for another runtime \(a \.webgpu export\), which has no place for "
                                         r"the host step between them; export to a file nnvm.load reads "
                                         r"\(m.so\)$"):
        mod.export(str(path))
    assert not path.exists()


def test_a_stage_for_a_cpu_this_one_lacks_is_refused_naming_the_file_and_the_stage(exported, tmp_path):
    """The stages keep their own checks: stage 0's library sealed as needing an extension no CPU has."""
    tmp, _ = exported
    data = (tmp / "nonzero.so").read_bytes()
    _, version, _, head, note, _ = staged_file.PREFIX.unpack_from(data)
    base = staged_file.PREFIX.size + note + head
    desc = json.loads(data[staged_file.PREFIX.size + note:base])
    blobs = [data[base + at:base + at + n] for at, n in desc["blobs"]]
    stage = tmp_path / "stage0.so"
    stage.write_bytes(blobs[0])
    artifact.seal(str(stage), "llvm", {"nosuchext": "cpuinfo:nosuchext"})
    blobs[0] = stage.read_bytes()
    desc["blobs"] = [[sum(map(len, blobs[:k])), len(b)] for k, b in enumerate(blobs)]
    text = json.dumps(desc).encode()
    tail = struct.pack("<QII", len(text), note, 0) + data[32:32 + note] + text + b"".join(blobs)
    bad = tmp_path / "bad.so"
    bad.write_bytes(staged_file.MAGIC + struct.pack("<II", version, zlib.crc32(tail)) + tail)
    with pytest.raises(nnvm.ModelLoadError, match=rf"^{re.escape(str(bad))} \(stage 0\): compiled for a CPU "
                                                  r"with nosuchext, which this CPU lacks"):
        nnvm.load(str(bad))

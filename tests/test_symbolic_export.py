"""Exported symbolic modules (issue 39): one file runs every binding within the bounds, from Python and C.

``SymbolicModule.export`` writes the kernels (which take the dims), one memory plan for every dim at its
upper bound and the shapes as programs over the dims (format v4). ``nnvm.load`` in a fresh process with
the core alone, the C runtime's ``nnvm_module_run_shaped`` and ``nnvm-run`` run it at any binding, checked
against onnxruntime: a small Hugging Face BERT with dynamic ``batch`` and ``seq``, a GPT-2 with its KV
cache (``attention_mask`` is ``past + seq``, ``past`` may be 0), an MLP with a symbolic batch (also for
aarch64 and armv7 under qemu). A shape outside the bounds or inconsistent between inputs is the same
sentence from the compiled module, the loaded one and ``nnvm-run`` (exit 1).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnvm
from nnvm.runtime import artifact
from nnvm.runtime.crt import build_runtime, runtime_target
from nnvm_testing.frontend_onnx import torch_models
from nnvm_testing.frontend_onnx.shape_models import dynamic_mlp
from nnvm_testing.venvs import pytest_venv

BINDINGS = ((1, 1), (1, 7), (4, 33))
QEMU = {"aarch64": ["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"],
        "armv7": ["qemu-arm", "-L", "/usr/arm-linux-gnueabihf"]}


def nnvm_run(kind: str = "llvm") -> list[str]:
    """The command prefix of ``nnvm-run`` for ``kind`` (under qemu for the Arm targets)."""
    exe = build_runtime(runtime_target(kind))["nnvm-run"]
    return QEMU.get(kind, []) + [exe]


def run_c(module: Path, feeds: dict, order: list, out_names: list, tmp: Path, kind: str = "llvm"):
    """``nnvm-run`` on ``feeds`` (saved as .npy in ``order``): (the process, the outputs or None)."""
    ins = []
    for k, name in enumerate(order):
        ins.append(str(tmp / f"in{k}.npy"))
        np.save(ins[-1], feeds[name])
    outs = [str(tmp / f"out{k}.npy") for k in range(len(out_names))]
    proc = subprocess.run([*nnvm_run(kind), str(module), *ins, "-o", *outs], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, NNVM_NUM_THREADS="2"))
    return proc, ([np.load(p) for p in outs] if proc.returncode == 0 else None)


def fresh_process(module: Path, feeds_list: list, tmp: Path) -> list:
    """The first output of ``nnvm.load(module).run(**feeds)`` for each of ``feeds_list``, in a new process
    with no plugin loaded (the core alone: no frontend, no LLVM)."""
    for k, feeds in enumerate(feeds_list):
        np.savez(tmp / f"feeds{k}.npz", **feeds)
    script = textwrap.dedent(f"""
        import sys, numpy as np, nnvm
        mod = nnvm.load({str(module)!r})
        for k in range({len(feeds_list)}):
            feeds = dict(np.load({str(tmp)!r} + f"/feeds{{k}}.npz"))
            np.save({str(tmp)!r} + f"/got{{k}}.npy", mod.run(**feeds)[0])
        assert 'nnvm_frontend_onnx' not in sys.modules and 'llvmlite' not in sys.modules, sorted(sys.modules)
    """)
    env = dict(os.environ, NNVM_DISABLE_PLUGIN_AUTOLOAD="1")
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    return [np.load(tmp / f"got{k}.npy") for k in range(len(feeds_list))]


def close(got, want, what: str) -> None:
    assert got.shape == want.shape, f"{what}: shape {got.shape}, onnxruntime {want.shape}"
    err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
    assert err < 1e-4, f"{what}: max relative error {err:.2e} against onnxruntime"


def tokens(batch: int, seq: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq // 2 + 1:] = 0  # padded rows after the first
    return {"input_ids": rng.integers(0, 30522, (batch, seq)).astype(np.int64), "attention_mask": mask}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    path = pytest_venv(torch_models.hf_model_path, "bert", 1, 16, layers=2, width=64, heads=2, dynamic=True,
                       exporter="torchscript")
    mod = nnvm.compile(path, target="llvm", bounds={"batch": (1, 4), "seq": (1, 64)}, tuning_log=False)
    assert mod.stats()["symbolic"]["mode"] == "kernels", mod.stats()["symbolic"]["why_per_binding"]
    out = tmp_path_factory.mktemp("bert") / "bert.so"
    mod.export(out)
    return path, mod, out


def test_bert_export_runs_every_binding_in_a_fresh_process_and_from_c(bert, tmp_path):
    path, _, module = bert
    assert artifact.check(str(module))["version"] == 4  # a v3 reader refuses it as newer
    feeds_list = [tokens(b, s, seed=b * 100 + s) for b, s in BINDINGS]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    wants = [sess.run(None, feeds)[0] for feeds in feeds_list]
    for (b, s), got, want in zip(BINDINGS, fresh_process(module, feeds_list, tmp_path), wants):
        close(got, want, f"nnvm.load at ({b}, {s})")
    for (b, s), feeds, want in zip(BINDINGS, feeds_list, wants):
        proc, outs = run_c(module, feeds, ["input_ids", "attention_mask"], ["y"], tmp_path)
        assert proc.returncode == 0, proc.stderr
        close(outs[0], want, f"nnvm-run at ({b}, {s})")


@pytest.mark.parametrize("feeds", [
    {"input_ids": np.zeros((1, 65), np.int64), "attention_mask": np.ones((1, 65), np.int64)},
    {"input_ids": np.zeros((5, 3), np.int64), "attention_mask": np.ones((5, 3), np.int64)},
    {"input_ids": np.zeros((2, 7), np.int64), "attention_mask": np.ones((2, 9), np.int64)},
    {"input_ids": np.zeros((3, 7), np.int64), "attention_mask": np.ones((2, 7), np.int64)},
], ids=["seq-above-bounds", "batch-above-bounds", "seq-inconsistent", "batch-inconsistent"])
def test_a_shape_that_does_not_fit_is_one_sentence_everywhere(bert, feeds, tmp_path):
    """The compiled module's sentence (naming the input and the dim), word for word from the loaded file
    and from nnvm-run (exit 1, no output written)."""
    _, mod, module = bert
    with pytest.raises(nnvm.InputError) as compiled:
        mod.run(**feeds)
    message = str(compiled.value)
    assert "input '" in message and "dim " in message, message
    with pytest.raises(nnvm.InputError) as loaded:
        nnvm.load(module).run(**feeds)
    assert str(loaded.value) == message
    proc, _ = run_c(module, feeds, ["input_ids", "attention_mask"], ["y"], tmp_path)
    assert proc.returncode == 1 and proc.stderr == f"nnvm-run: {module}: {message}\n", proc.stderr


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    path = pytest_venv(torch_models.hf_decoder_path, "gpt2", layers=2, width=64, heads=2)
    mod = nnvm.compile(path, target="llvm", bounds={"batch": (1, 2), "seq": (1, 16), "past": (0, 32)},
                       tuning_log=False)
    out = tmp_path_factory.mktemp("gpt2") / "gpt2.so"
    mod.export(out)
    return path, mod, out


def test_decoder_with_past_runs_from_c_step_by_step(gpt2, tmp_path):
    """The prompt with an empty cache (past = 0), then one token with ``present`` fed back as ``past``:
    every output (logits and the cache) matches onnxruntime; a mask whose length is not ``past + seq`` is
    the compiled module's sentence."""
    path, mod, module = gpt2
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names, out_names, feeds, past = torch_models.decoder_prompt(sess)
    for step in range(2):
        want = sess.run(None, feeds)
        proc, got = run_c(module, feeds, names, out_names, tmp_path)
        assert proc.returncode == 0, proc.stderr
        for name, g, w in zip(out_names, got, want):
            close(g, w, f"step {step} {name}")
        token = np.argmax(want[0][:, -1], -1)[:, None].astype(np.int64)
        length = feeds["attention_mask"].shape[1] + 1
        present = {n: want[out_names.index(n.replace("past_key_values", "present"))] for n in past}
        feeds = {"input_ids": token, "attention_mask": np.ones((1, length), np.int64), **present}
    feeds["attention_mask"] = np.ones((1, length + 2), np.int64)
    with pytest.raises(nnvm.InputError, match=r"\(past \+ seq\) is 9, but") as compiled:
        mod.run(**feeds)
    proc, _ = run_c(module, feeds, names, out_names, tmp_path)
    c_message = proc.stderr.removeprefix(f"nnvm-run: {module}: ").strip()
    assert proc.returncode == 1 and c_message == str(compiled.value), proc.stderr


C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "nnvm_runtime.h"

/* argv: symbolic module, bound module (the same MLP at N = 2), x.npy data as raw float32 of 3 x 32 */
int main(int argc, char **argv) {
  nnvm_module *m = nnvm_module_load(argv[1]);
  if (!m) { printf("load: %s\n", nnvm_last_error()); return 1; }
  nnvm_tensor_info in, out;
  nnvm_module_input(m, 0, &in);
  nnvm_module_output(m, 0, &out);
  printf("input %s (%lld, %lld) output (%lld, %lld)\n", in.name, (long long)in.shape[0],
         (long long)in.shape[1], (long long)out.shape[0], (long long)out.shape[1]);
  int64_t shape[2];
  nnvm_module_output_shape(m, 0, shape);
  printf("largest (%lld, %lld)\n", (long long)shape[0], (long long)shape[1]);
  static float x[3 * 32], y[8 * 10];
  FILE *f = fopen(argv[3], "rb");
  if (!f || fread(x, sizeof x, 1, f) != 1) return 2;
  fclose(f);
  const void *ins[] = {x};
  void *outs[] = {y};
  if (nnvm_module_run(m, ins, outs) != 0) printf("run: %s\n", nnvm_last_error());
  int64_t s3[] = {3, 32}, s9[] = {9, 32}, s31[] = {3, 31};
  const int64_t *shapes[] = {s3};
  if (nnvm_module_run_shaped(m, shapes, ins, outs) != 0) {
    printf("shaped: %s\n", nnvm_last_error());
    return 1;
  }
  nnvm_module_output_shape(m, 0, shape);
  printf("ran (%lld, %lld)\n", (long long)shape[0], (long long)shape[1]);
  f = fopen(argv[4], "wb");
  fwrite(y, sizeof(float), 3 * 10, f);
  fclose(f);
  shapes[0] = s9;
  if (nnvm_module_run_shaped(m, shapes, ins, outs) != 0) printf("above: %s\n", nnvm_last_error());
  shapes[0] = s31;
  if (nnvm_module_run_shaped(m, shapes, ins, outs) != 0) printf("static: %s\n", nnvm_last_error());
  nnvm_module_free(m);
  nnvm_module *b = nnvm_module_load(argv[2]);
  int64_t s2[] = {2, 32};
  shapes[0] = s2;
  if (!b || nnvm_module_run_shaped(b, shapes, ins, outs) != 0) {
    printf("bound: %s\n", nnvm_last_error());
    return 1;
  }
  f = fopen(argv[5], "wb");
  fwrite(y, sizeof(float), 2 * 10, f);
  fclose(f);
  shapes[0] = s3;
  if (nnvm_module_run_shaped(b, shapes, ins, outs) != 0) printf("bound: %s\n", nnvm_last_error());
  nnvm_module_free(b);
  return 0;
}
"""


def test_c_api_runs_a_symbolic_batch_and_a_bound_module_shaped(tmp_path):
    """``nnvm_runtime.h`` itself: -1 for the symbolic axis, the largest output before any run, the run's
    output shape after it, ``nnvm_module_run`` refusing a symbolic module, and a bound module through
    ``nnvm_module_run_shaped`` with its own shapes (another shape: one sentence)."""
    model = dynamic_mlp()
    sym = tmp_path / "mlp.so"
    nnvm.compile(model, target="llvm", bounds={"N": (1, 8)}, tuning_log=False).export(sym)
    bound = tmp_path / "mlp2.so"
    nnvm.compile(model, target="llvm", shapes={"x": (2, 32)}, tuning_log=False).export(bound)
    paths = build_runtime(runtime_target("llvm"))
    exe = tmp_path / "api"
    (tmp_path / "api.c").write_text(C_PROGRAM)
    cc = subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-o", str(exe), str(tmp_path / "api.c"),
                         f"-I{os.path.dirname(paths['nnvm_runtime.h'])}", paths["libnnvm_runtime.a"], "-ldl",
                         "-lpthread"], capture_output=True, text=True, timeout=120)
    assert cc.returncode == 0 and "warning" not in cc.stderr, cc.stderr
    x = np.random.default_rng(7).standard_normal((3, 32)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    proc = subprocess.run([str(exe), str(sym), str(bound), str(tmp_path / "x.bin"), str(tmp_path / "y3.bin"),
                           str(tmp_path / "y2.bin")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == [
        "input x (-1, 32) output (-1, 10)",
        "largest (8, 10)",
        f"run: {sym}: the model has symbolic dims (N); run it with nnvm_module_run_shaped, giving the "
        "inputs' shapes",
        "ran (3, 10)",
        "above: input 'x' dim 0 (N) is 9, outside its bounds [1, 8]",
        "static: input 'x' dim 1 must be 32 (N, 32), got 31",
        "bound: input 'x' dim 0 must be 2, got 3",
    ], proc.stdout
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (3, 2):
        got = np.fromfile(tmp_path / f"y{n}.bin", np.float32).reshape(n, 10)
        close(got, sess.run(None, {"x": x[:n]})[0], f"N = {n}")
    again = tmp_path / "again.so"  # a loaded symbolic module exported again stays one
    nnvm.load(sym).export(again)
    assert artifact.check(str(again))["version"] == 4 and artifact.check(str(bound))["version"] == 3
    close(nnvm.load(again).run(x)[0], sess.run(None, {"x": x})[0], "exported again, N = 3")


def test_what_cannot_be_exported_is_one_sentence(tmp_path):
    model = dynamic_mlp()
    open_ended = nnvm.compile(model, target="llvm", shapes={"x": ("N", 32)}, tuning_log=False)
    with pytest.raises(nnvm.Error, match=r"'N' has no upper bound: an exported module plans its memory once"):
        open_ended.export(tmp_path / "a.so")
    conv = onnx.helper.make_graph(
        [onnx.helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])], "pool",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 8, 16, 16])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 8, 8, 8])])
    pool = onnx.helper.make_model(conv, opset_imports=[onnx.helper.make_opsetid("", 13)], ir_version=8)
    mod = nnvm.compile(pool, target="llvm", bounds={"N": (1, 4)}, tuning_log=False)
    if mod.stats()["symbolic"]["mode"] == "per binding":  # until pooling kernels take a symbolic batch
        with pytest.raises(nnvm.Error, match=r"compiles once per binding .*needs kernels that take the dims"):
            mod.export(tmp_path / "b.so")


@pytest.mark.parametrize("kind", sorted(QEMU))
def test_arm_export_under_qemu(kind, tmp_path):
    """The same file format for another CPU (64- and 32-bit): nnvm-run of its runtime under qemu takes
    any batch, and the module runs from Python too (exported once, run emulated)."""
    model = dynamic_mlp()
    mod = nnvm.compile(model, target=kind, bounds={"N": (1, 8)}, tuning_log=False)
    module = tmp_path / f"mlp-{kind}.so"
    mod.export(module)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 5):
        x = np.random.default_rng(n).standard_normal((n, 32)).astype(np.float32)
        proc, outs = run_c(module, {"x": x}, ["x"], ["y"], tmp_path, kind=kind)
        assert proc.returncode == 0, proc.stderr
        want = sess.run(None, {"x": x})[0]
        close(outs[0], want, f"{kind} nnvm-run at N = {n}")
        close(mod.run(x)[0], want, f"{kind} in-memory module at N = {n}")
        close(nnvm.load(module).run(x)[0], want, f"{kind} loaded module at N = {n}")
    proc, _ = run_c(module, {"x": np.zeros((9, 32), np.float32)}, ["x"], ["y"], tmp_path, kind=kind)
    assert proc.returncode == 1 and "input 'x' dim 0 (N) is 9, outside its bounds [1, 8]" in proc.stderr


def test_nnvm_run_command_on_a_symbolic_export(tmp_path):
    """``nnvm run model.so --input x=X.npy``: any batch within the bounds; one above them is one sentence."""
    model = dynamic_mlp()
    module = tmp_path / "mlp.so"
    nnvm.compile(model, target="llvm", bounds={"N": (1, 8)}, tuning_log=False).export(module)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n, rc in ((5, 0), (9, 1)):
        x = np.random.default_rng(n).standard_normal((n, 32)).astype(np.float32)
        np.save(tmp_path / "x.npy", x)
        proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "run", str(module), "--input",
                               f"x={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npz")],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == rc, proc.stderr
        if rc == 0:
            close(np.load(tmp_path / "y.npz")["y"], sess.run(None, {"x": x})[0], f"nnvm run at N = {n}")
        else:
            assert proc.stderr.count("\n") == 1 and "input 'x' dim 0 (N) is 9, outside its bounds [1, 8]" \
                in proc.stderr, proc.stderr

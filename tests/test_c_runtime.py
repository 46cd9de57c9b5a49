"""The C deploy runtime (``nnvm_runtime.h``) on every CPU target, through the examples of docs/deploy.md.

The C example (written only against ``nnvm_runtime.h``) loads ResNet-18 exported for ``llvm``, runs it
from two threads at once on two different inputs, and both outputs match onnxruntime; the same for
``aarch64`` and ``armv7`` under qemu-user (statically linked, as the doc shows). The C++ example runs a
small model against numpy. A module for another CPU, a truncated, corrupted or newer-format file: the
program prints one sentence and exits 1 (``nnvm_module_load`` returned NULL). ``nnvm runtime build``
writes the four files and prints their sizes; the x86-64 ``nnvm-run`` stays under 300 KiB.
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.runtime import artifact
from nnvm.runtime.crt import build_runtime, compiler_for, runtime_target

ROOT = Path(__file__).resolve().parents[1]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
ARM = {"aarch64": ("qemu-aarch64", "/usr/aarch64-linux-gnu"),  # emulator, sysroot
       "armv7": ("qemu-arm", "/usr/arm-linux-gnueabihf")}


def doc_program(lang: str) -> str:
    """The ``lang`` block of docs/deploy.md that holds a ``main``."""
    blocks = re.findall(rf"```{re.escape(lang)}\n(.*?)```", DEPLOY_DOC.read_text(), re.S)
    mains = [b for b in blocks if "int main(" in b]
    assert len(mains) == 1, f"docs/deploy.md should have one ```{lang} program, found {len(mains)}"
    return mains[0]


def runtime_for(kind: str) -> tuple[dict, str]:
    """(the runtime's file paths, the C compiler) for ``kind``; skips when the cross tools are missing
    (a failure under CI=true, where make install provides them)."""
    kind, cc = compiler_for(kind)
    tools = [cc] + ([ARM[kind][0]] if kind in ARM else [])
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.skip(f"the {kind} C runtime needs {', '.join(missing)} (make install installs them)")
    return build_runtime(runtime_target(kind)), cc


def compile_example(kind: str, lang: str, out_dir: Path) -> list[str]:
    """The doc's example for ``kind``, linked statically with the runtime; the command prefix to run it."""
    paths, cc = runtime_for(kind)
    source = out_dir / f"example.{lang}"
    source.write_text(doc_program(lang))
    exe = out_dir / f"example-{lang}-{kind}"
    compiler = cc if lang == "c" else shutil.which("c++") or "g++"
    flags = ["-std=c11"] if lang == "c" else ["-std=c++17"]
    cmd = [compiler, *flags, "-O2", "-Wall", "-o", str(exe), str(source),
           f"-I{os.path.dirname(paths['nnvm_runtime.h'])}", paths["libnnvm_runtime.a"], "-ldl", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"compiling the {lang} example of docs/deploy.md failed: {proc.stderr}"
    assert "warning" not in proc.stderr, proc.stderr
    return ([ARM[kind][0], "-L", ARM[kind][1]] if kind in ARM else []) + [str(exe)]


def run(cmd: list, timeout: int = 600, threads: int = 1) -> subprocess.CompletedProcess:
    env = dict(os.environ, NNVM_NUM_THREADS=str(threads))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def dense_model(seed: int = 5):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((10, 32)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["z"], transB=1),
             helper.make_node("Relu", ["z"], ["y"])]
    graph = helper.make_graph(nodes, "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, lambda x: np.maximum(x.astype(np.float64) @ w.T.astype(np.float64) + b, 0)


@pytest.fixture(scope="module")
def dense(tmp_path_factory):
    """{kind: exported dense module} for llvm and aarch64, the input and numpy's output."""
    model, ref = dense_model()
    out = tmp_path_factory.mktemp("dense")
    files = {}
    for kind in ("llvm", "aarch64"):
        files[kind] = out / f"dense-{kind}.so"
        nnvm.compile(model, target=kind).export(files[kind])
    x = np.random.default_rng(11).standard_normal((3, 32)).astype(np.float32)
    return files, x, ref(x)


def check_resnet18_two_threads(kind: str, tmp_path: Path, threads: int) -> None:
    import onnxruntime as ort

    from nnvm_testing.frontend_onnx.models import cached_model_path

    onnx_path = cached_model_path("resnet18")
    module = tmp_path / f"resnet18-{kind}.so"
    nnvm.compile(onnx_path, target=kind).export(module)
    example = compile_example(kind, "c", tmp_path)
    xs = [np.random.default_rng(seed).standard_normal((1, 3, 224, 224)).astype(np.float32) for seed in (0, 1)]
    args = []
    for k, x in enumerate(xs):
        x.tofile(tmp_path / f"x{k}.bin")
        args += [str(tmp_path / f"x{k}.bin"), str(tmp_path / f"y{k}.bin")]
    proc = run([*example, str(module), *args], timeout=1200, threads=threads)
    assert proc.returncode == 0, f"{kind}: {proc.stderr}"
    assert "finished 2 run(s) on 2 thread(s)" in proc.stdout, proc.stdout
    assert "input data float32, 4 dims; output" in proc.stdout, proc.stdout
    session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
    for k, x in enumerate(xs):
        (want,) = session.run(None, {session.get_inputs()[0].name: x})
        got = np.fromfile(tmp_path / f"y{k}.bin", dtype=np.float32).reshape(want.shape)
        err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
        assert err < 1e-4, f"ResNet-18 on {kind}, thread {k}: relative error {err:.3g} against onnxruntime"


def test_resnet18_from_two_c_threads_llvm(tmp_path):
    check_resnet18_two_threads("llvm", tmp_path, threads=2)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ARM))
def test_resnet18_from_two_c_threads_arm_under_qemu(kind, tmp_path):
    # One pool thread per calling thread: under the emulator more only adds contention.
    check_resnet18_two_threads(kind, tmp_path, threads=1)


def test_cpp_example(dense, tmp_path):
    files, x, want = dense
    example = compile_example("llvm", "cpp", tmp_path)
    x.tofile(tmp_path / "x.bin")
    proc = run([*example, str(files["llvm"]), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "y: 30 outputs written", proc.stdout
    got = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _bad_copies(path: Path, tmp_path: Path) -> dict:
    data = path.read_bytes()
    out = {}

    def write(name, content):
        out[name] = tmp_path / f"{name}.so"
        out[name].write_bytes(content)

    write("truncated", data[: len(data) // 2])
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0x10
    write("corrupted", bytes(flipped))
    newer = bytearray(data)
    struct.pack_into("<I", newer, len(data) - 64 + 8, 99)
    write("newer", bytes(newer))
    write("unknown feature", data)  # a probe this runtime cannot read (a newer nnvm's): not assumed
    artifact.seal(str(out["unknown feature"]), "llvm", {**artifact.check(str(path))["probes"],
                                                        "future-ext": "newkind:7"})
    return out


EXPECTED = {"truncated": "no nnvm module footer", "corrupted": "checksum mismatch",
            "newer": f"module format v99 is newer than this runtime reads (v{artifact.FORMAT_VERSION})",
            "unknown feature": "compiled for a CPU with future-ext, which this CPU lacks"}


def _one_sentence(proc: subprocess.CompletedProcess, expected: str, what: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, f"{what}: exit {proc.returncode}, stderr {proc.stderr!r}"
    assert len(lines) == 1 and expected in lines[0], f"{what}: {proc.stderr!r}"


def test_bad_modules_are_one_sentence_and_null(dense, tmp_path):
    files, x, _ = dense
    example = compile_example("llvm", "c", tmp_path)
    x.tofile(tmp_path / "x.bin")
    io = [str(tmp_path / "x.bin"), str(tmp_path / "y.bin")]
    proc = run([*example, str(files["aarch64"]), *io])
    _one_sentence(proc, "a module for the aarch64 target (aarch64), but this runtime runs llvm modules",
                  "an aarch64 module on x86-64")
    for name, path in _bad_copies(files["llvm"], tmp_path).items():
        _one_sentence(run([*example, str(path), *io]), EXPECTED[name], f"the {name} module")
    nnvm_run = build_runtime(runtime_target("llvm"))["nnvm-run"]
    _one_sentence(run([nnvm_run, str(tmp_path / "corrupted.so"), "--info"]), "checksum mismatch", "nnvm-run")
    # C and Python read the same probes: every extension this CPU has loads, each it lacks is refused
    # by name
    from nnvm_backend_llvm_x86.isa import FEATURE_PROBES

    has = {n: p for n, p in FEATURE_PROBES.items() if not artifact.host_lacks({n: p})}
    lacked = {n: p for n, p in FEATURE_PROBES.items() if n not in has}
    for name, features in [("all it has", has), *((n, {**has, n: p}) for n, p in lacked.items())]:
        copy = tmp_path / "features.so"
        copy.write_bytes(files["llvm"].read_bytes())
        artifact.seal(str(copy), "llvm", features)
        proc = run([nnvm_run, str(copy), "--info"])
        if features is has:
            assert proc.returncode == 0, f"{name}: {proc.stderr!r}"
        else:
            _one_sentence(proc, f"compiled for a CPU with {name}, which this CPU lacks", name)
    ok = run([*example, str(files["llvm"]), *io])
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("kind", sorted(ARM))
def test_arm_runtime_refuses_an_x86_module(dense, kind):
    paths, _ = runtime_for(kind)
    files = dense[0]
    emulator, sysroot = ARM[kind]
    proc = run([emulator, "-L", sysroot, paths["nnvm-run"], str(files["llvm"]), "--info"], timeout=120)
    _one_sentence(proc, f"a module for the llvm target (x86-64), but this runtime runs {kind} modules",
                  f"an x86-64 module on the {kind} runtime")


def test_nnvm_runtime_build_cli(tmp_path):
    out = tmp_path / "rt"
    proc = subprocess.run([sys.executable, "-m", "nnvm.cli", "runtime", "build", "--target", "llvm", "-o",
                           str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for name in ("nnvm_runtime.h", "libnnvm_runtime.a", "libnnvm_runtime.so", "nnvm-run"):
        size = (out / name).stat().st_size
        assert f"  {name}: {size} bytes" in proc.stdout, proc.stdout
    size = (out / "nnvm-run").stat().st_size
    assert size <= 300 * 1024, f"nnvm-run for x86-64 is {size} bytes, over 300 KiB"
    header = (out / "nnvm_runtime.h").read_text()
    for name in ("nnvm_module_load", "nnvm_last_error", "nnvm_module_num_inputs", "nnvm_module_num_outputs",
                 "nnvm_module_input", "nnvm_module_output", "nnvm_module_run", "nnvm_module_free"):
        assert re.search(rf"[ *]{name}\(", header), f"nnvm_runtime.h lacks {name}"
    bad = subprocess.run([sys.executable, "-m", "nnvm.cli", "runtime", "build", "--target", "opencl", "-o",
                          str(tmp_path / "x")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1 and "the C runtime is for the CPU targets" in bad.stderr, bad.stderr


def mlp_model(seed: int = 9):
    """x[64, 256] -> dense 512 + relu -> dense 10: parallel kernels and an intermediate in the arena."""
    rng = np.random.default_rng(seed)
    w1 = (rng.standard_normal((512, 256)) / 16).astype(np.float32)
    w2 = (rng.standard_normal((10, 512)) / 22).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"], transB=1), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "mlp",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 10])],
                              [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    return model, lambda x: np.maximum(x.astype(np.float64) @ w1.T, 0) @ w2.T


@pytest.mark.parametrize("kind, threads, runs", [("llvm", 8, 20), ("aarch64", 4, 2), ("armv7", 4, 2)])
def test_many_threads_at_once(kind, threads, runs, tmp_path):
    """tests/c/stress_threads.c: THREADS callers, each its own input, RUNS times, pool teams of 2
    inside the kernels; every output checked, and each thread's last error is its own."""
    paths, cc = runtime_for(kind)
    exe = tmp_path / "stress"
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-o", str(exe), str(ROOT / "tests" / "c" / "stress_threads.c"),
           f"-I{os.path.dirname(paths['nnvm_runtime.h'])}", paths["libnnvm_runtime.a"], "-ldl", "-lpthread",
           "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    model, ref = mlp_model()
    module = tmp_path / f"mlp-{kind}.so"
    nnvm.compile(model, target=kind).export(module)
    xs = np.random.default_rng(4).standard_normal((threads, 64, 256)).astype(np.float32)
    xs.tofile(tmp_path / "in.bin")
    np.stack([ref(x) for x in xs]).astype(np.float32).tofile(tmp_path / "want.bin")
    prefix = [ARM[kind][0], "-L", ARM[kind][1]] if kind in ARM else []
    done = run([*prefix, str(exe), str(module), str(tmp_path / "in.bin"), str(tmp_path / "want.bin"),
                str(threads), str(runs)], threads=2)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok: {threads} threads x {runs} runs", done.stdout


def test_c_example_against_the_shared_library(dense, tmp_path):
    """The doc's first build line: -lnnvm_runtime from the folder ``nnvm runtime build`` wrote."""
    files, x, want = dense
    paths, cc = runtime_for("llvm")
    rt = os.path.dirname(paths["libnnvm_runtime.so"])
    (tmp_path / "example.c").write_text(doc_program("c"))
    exe = tmp_path / "example"
    cmd = [cc, "-std=c11", "-O2", "-o", str(exe), str(tmp_path / "example.c"), f"-I{rt}", f"-L{rt}",
           "-lnnvm_runtime", "-ldl", "-lpthread", f"-Wl,-rpath,{rt}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    needed = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True).stdout
    assert "libnnvm_runtime.so" in needed, needed
    x.tofile(tmp_path / "x.bin")
    done = run([str(exe), str(files["llvm"]), str(tmp_path / "x.bin"), str(tmp_path / "y.bin")])
    assert done.returncode == 0 and "finished 1 run(s) on 1 thread(s)" in done.stdout, done.stderr
    got = np.fromfile(tmp_path / "y.bin", dtype=np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

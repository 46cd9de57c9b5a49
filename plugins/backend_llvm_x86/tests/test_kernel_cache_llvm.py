"""The kernel cache and parallel kernel compiles with the LLVM backend: a warm compile reads every
kernel and compiles none, and gives bit-identical outputs to a cold one, a serial one, an exported one
and onnxruntime's (to float tolerance); the key changes with the target's CPU; a corrupt entry is
rebuilt; ``NNVM_KERNEL_CACHE_DIR`` reaches ``nnvm compile`` in a new process."""

import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.kernel_cache import KernelCache

SHAPE = [1, 8, 12, 12]


def _model():
    """conv-relu-conv-relu-pool-dense plus a second conv branch of the first's shape (a shared kernel)."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2, "w1b"),
             numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.1, "w2"),
             numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32), "w3")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w1b"], ["c1b"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1b"], ["r1b"]),
             helper.make_node("Conv", ["r1b", "w2"], ["c2"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "w3"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "cached", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


@pytest.fixture(scope="module")
def case():
    model = _model()
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return model, x, session.run(None, {"x": x})[0]


def _compile(model, cache, jobs=1, target="llvm"):
    mod = nnvm.compile(model, target=target, kernel_cache=cache, jobs=jobs, tuning_log=False)
    return mod, mod.stats()["kernel_cache"]


def test_warm_compile_reads_every_kernel_and_gives_the_same_outputs(tmp_path, case):
    model, x, expected = case
    cold, counts = _compile(model, tmp_path)
    assert counts["cached"] == 0 and counts["compiled"] == cold.stats()["distinct_kernels"] >= 4
    assert counts["deduplicated"] >= 1, "the two same-shaped conv groups did not share a kernel"
    warm, again = _compile(model, tmp_path)
    assert again["compiled"] == 0 and again["cached"] == counts["compiled"]
    (y_cold,), (y_warm,) = cold.run(x), warm.run(x)
    np.testing.assert_allclose(y_cold, expected, rtol=1e-4, atol=1e-4)
    assert np.array_equal(y_cold, y_warm), f"cached kernels differ: max {np.abs(y_cold - y_warm).max()}"
    assert warm.library.source() and "define" in warm.library.source()
    assert warm.library.unoptimized_ir == cold.library.unoptimized_ir


def test_parallel_compile_gives_the_serial_kernels(tmp_path, case):
    model, x, _ = case
    serial, _ = _compile(model, tmp_path / "serial", jobs=1)
    parallel, counts = _compile(model, tmp_path / "parallel", jobs=2)
    assert counts["jobs"] == 2
    assert [u.object_code for u in serial.library.units] == [u.object_code for u in parallel.library.units]
    assert np.array_equal(serial.run(x)[0], parallel.run(x)[0])


def test_no_cache_and_a_cached_export(tmp_path, case):
    model, x, expected = case
    plain, counts = _compile(model, False)
    assert counts["cache_dir"] is None and counts["cached"] == 0
    _compile(model, tmp_path / "k")
    warm, _ = _compile(model, tmp_path / "k")
    warm.export(str(tmp_path / "m.so"))
    loaded = nnvm.load(str(tmp_path / "m.so"))
    assert np.array_equal(loaded.run(x)[0], plain.run(x)[0])
    np.testing.assert_allclose(loaded.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_key_changes_with_the_target_cpu(tmp_path, case):
    model, _, _ = case
    _compile(model, tmp_path, target="llvm -mcpu=haswell")
    _, counts = _compile(model, tmp_path, target="llvm -mcpu=skylake-avx512")
    assert counts["cached"] == 0, "kernels for AVX2 served a compile for AVX-512"
    _, counts = _compile(model, tmp_path, target="llvm -mcpu=haswell")
    assert counts["compiled"] == 0
    _, counts = _compile(model, tmp_path, target="llvm -mcpu=haswell -mattr=-fma")
    assert counts["cached"] == 0, "kernels with FMA served a compile without"


def test_key_changes_with_a_schedule_switch(tmp_path, case, cpu_switch):
    model, x, expected = case
    _compile(model, tmp_path)
    cpu_switch("conv_schedule", "0")
    mod, counts = _compile(model, tmp_path)
    assert counts["compiled"] > 0, "a compile with another conv schedule was served the old kernels"
    np.testing.assert_allclose(mod.run(x)[0], expected, rtol=1e-4, atol=1e-4)


def test_corrupt_entries_are_rebuilt(tmp_path, case):
    model, x, expected = case
    _compile(model, tmp_path)
    entries = KernelCache(tmp_path).entries()
    for k, (_, size, path) in enumerate(entries):  # every way of breaking one, in turn
        data = path.read_bytes()
        path.write_bytes([data[:size // 3], data[:-1] + bytes([data[-1] ^ 0xFF]), b"", data[:60]][k % 4])
    mod, counts = _compile(model, tmp_path)
    assert counts["compiled"] == len(entries) and counts["cached"] == 0
    np.testing.assert_allclose(mod.run(x)[0], expected, rtol=1e-4, atol=1e-4)
    _, counts = _compile(model, tmp_path)
    assert counts["compiled"] == 0, "the rebuilt entries were not written back"


def test_cli_stats_show_the_cache_in_a_new_process(tmp_path, case):
    model, _, _ = case
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    env = {**os.environ, "NNVM_KERNEL_CACHE_DIR": str(tmp_path / "cli-cache")}
    cmd = [sys.executable, "-m", "nnvm.cli", "compile", str(path), "--target", "llvm",
           "-o", str(tmp_path / "o.so"), "--stats", "--json"]
    runs = [json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
            for _ in range(2)]
    assert runs[0]["kernel_cache"]["compiled"] > 0 and runs[0]["kernel_cache"]["cached"] == 0
    assert runs[1]["kernel_cache"]["compiled"] == 0 and runs[1]["kernel_cache"]["cached"] > 0
    assert runs[1]["kernel_cache"]["cache_dir"] == str(tmp_path / "cli-cache")
    text = subprocess.run(cmd[:-1], env=env, capture_output=True, text=True, check=True).stdout
    assert "kernels:" in text and "from cache" in text, text


def test_a_model_without_kernels_exports(tmp_path):
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "none",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)
    mod, counts = _compile(model, tmp_path / "k")
    assert mod.stats()["kernels"] == 0 and counts["compiled"] == 0
    mod.export(str(tmp_path / "none.so"))
    x = np.arange(2, dtype=np.float32)
    assert np.array_equal(nnvm.load(str(tmp_path / "none.so")).run(x)[0], x)

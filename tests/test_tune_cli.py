"""Tuning for real: candidates built and timed in a child process, logs applied by ``nnvm.compile``,
and ``nnvm tune`` on the command line. No timing asserts: what is checked is what got measured,
logged, resumed and applied, and that tuned modules compute the same numbers as onnxruntime.

The templates come from ``nnvm_testing.autotune_templates`` (a matmul factory with fault knobs, and a plugin
offering a ``dense`` template), so these tests do not depend on which templates the backends ship.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
import nnvm_testing.autotune_templates as testing_templates
from nnvm import plugins
from nnvm.autotune import Measurer, TuningLogs, extract_tasks, task_from_factory, tune
from nnvm.autotune import log as logmod
from nnvm.cli import main
from nnvm.target import parse_target


@pytest.fixture
def dense_templates(monkeypatch, cpu_switch):
    """The ``testing.dense`` template plugin registered by hand (the measuring child registers it too)."""
    monkeypatch.setenv("NNVM_NUM_THREADS", "1")
    # Keep the Gemms as ``dense`` groups: at opt level 3 the x86 layout pass would make them
    # ``dense_packed`` (a constant weight packed for streaming), which ``testing.dense`` does not serve.
    cpu_switch("layout", "0")
    plugins.reset()
    plugins.manager().register(testing_templates, name="nnvm-autotune-testing")
    yield
    plugins.reset()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> str:
    """x[4, 32] -> Gemm(64) -> Relu -> Gemm(16): two dense groups of different workloads."""
    rng = np.random.default_rng(0)
    arrays = {"w1": rng.standard_normal((64, 32)) * 0.2, "b1": rng.standard_normal(64),
              "w2": rng.standard_normal((16, 64)) * 0.2, "b2": rng.standard_normal(16)}
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], transB=1)]
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in arrays.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    path = tmp_path_factory.mktemp("tune") / "mlp.onnx"
    onnx.save(model, str(path))
    return str(path)


def onnxruntime_output(path: str, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def test_crashing_hanging_and_failing_candidates_are_errors_and_measuring_goes_on(monkeypatch):
    monkeypatch.setenv("NNVM_NUM_THREADS", "1")
    task = task_from_factory("nnvm_testing.autotune_templates:matmul_template", n=32, faults=True)
    faults = ["none", "raise", "exit", "segfault", "hang", "none"]
    with Measurer(timeout=4, repeat=1, min_repeat_ms=1) as measurer:
        results = measurer.measure(task, [dict(task.fallback, fault=f) for f in faults])
    by_fault = dict(zip(faults[1:5], results[1:5]))
    assert results[0].error is None and results[0].seconds > 0, results[0]
    assert results[5].error is None and results[5].seconds > 0, f"no recovery after faults: {results[5]}"
    assert "fault=raise" in by_fault["raise"].error
    assert "died (status 3)" in by_fault["exit"].error
    assert "died (signal 11)" in by_fault["segfault"].error
    assert "timed out after 4 s" in by_fault["hang"].error
    assert all(r.seconds is None for r in by_fault.values())


def test_tune_then_compile_applies_the_best_configs_and_matches_onnxruntime(mlp, dense_templates, tmp_path,
                                                                             monkeypatch):
    tasks = extract_tasks(mlp, target="llvm")
    assert [t.template for t in tasks] == ["testing.dense", "testing.dense"]
    assert len({t.workload for t in tasks}) == 2 and all(t.weight == 1 for t in tasks)
    log = tmp_path / "tune.jsonl"
    with Measurer(timeout=20, repeat=1, min_repeat_ms=1) as measurer:
        summaries = tune(tasks, trials=4, log=log, tuner="random", measurer=measurer, progress=False)
    recs = logmod.read(log)
    assert len(recs) == 8 and all(r.ok for r in recs), [r.error for r in recs if not r.ok]
    assert all(s.best_config is not None and s.trials == 4 for s in summaries)

    logs = TuningLogs([log])
    for task, summary in zip(tasks, summaries):
        assert logs.best(task.template, task.workload, "llvm").config == summary.best_config
    x = np.random.default_rng(1).standard_normal((4, 32)).astype(np.float32)
    want = onnxruntime_output(mlp, x)
    tuned = nnvm.compile(mlp, target="llvm", tuning_log=str(log))
    untuned = nnvm.compile(mlp, target="llvm", tuning_log=False)
    assert tuned.stats()["tuned_kernels"] == 2 and untuned.stats()["tuned_kernels"] == 0
    for mod in (tuned, untuned):
        (got,) = mod.run(x)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)

    # the backend's shipped logs are consulted when no log is given
    backend = type(parse_target("llvm").backend)
    monkeypatch.setattr(backend, "default_tuning_logs", lambda self, target: [str(log)])
    assert nnvm.compile(mlp, target="llvm").stats()["tuned_kernels"] == 2
    assert nnvm.compile(mlp, target="llvm", tuning_log=False).stats()["tuned_kernels"] == 0
    monkeypatch.undo()
    # records carry the measuring machine's signature, team size included: resume with the same one
    monkeypatch.setenv("NNVM_NUM_THREADS", "1")

    # resuming: the same budget measures nothing new
    with Measurer(timeout=20) as measurer:
        again = tune(tasks, trials=4, log=log, tuner="random", measurer=measurer, progress=False)
    assert [s.measured for s in again] == [0, 0] and len(logmod.read(log)) == 8


def test_a_missing_tuning_log_is_a_user_error(mlp):
    with pytest.raises(nnvm.Error, match=r"tuning log .*nope.jsonl: no such file"):
        nnvm.compile(mlp, target="llvm", tuning_log="nope.jsonl")


def test_nnvm_tune_command_reports_each_task_and_resumes(mlp, dense_templates, tmp_path, capsys):
    log = tmp_path / "cli.jsonl"
    args = ["tune", mlp, "--target", "llvm", "--trials", "2", "--log", str(log), "--tuner", "grid",
            "--threads", "1", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "2 task(s)" in captured.out
    lines = [ln for ln in captured.err.splitlines() if ln.startswith("[task")]
    assert len(lines) == 2 and all("GFLOP/s" in ln and "2 trials" in ln for ln in lines), captured.err
    report = json.loads(captured.out[captured.out.index("["):])
    assert [r["measured"] for r in report] == [2, 2] and all(r["best_gflops"] > 0 for r in report)
    assert len(logmod.read(log)) == 4

    assert main(args) == 0
    report = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert [r["measured"] for r in report] == [0, 0] and len(logmod.read(log)) == 4


def test_nnvm_tune_user_mistakes_exit_1_with_one_sentence(mlp, tmp_path, capsys):
    broken = tmp_path / "broken.jsonl"
    broken.write_text("not json\n{}\n")
    cases = [(["--trials", "0", "--log", str(tmp_path / "a.jsonl")], "--trials must be at least 1"),
             (["--trials", "2", "--log", str(broken)], "line 1: not a tuning record")]
    for extra, message in cases:
        assert main(["tune", mlp, "--target", "llvm", *extra]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert main(["tune", str(tmp_path / "missing.onnx"), "--trials", "2", "--log", str(broken)]) == 1
    assert "missing.onnx" in capsys.readouterr().err


def test_shipped_logs_are_well_formed_signed_and_offered_to_every_cpu():
    """Every log in the x86 plugin's ``tuned/`` folder parses, each record carries the signature of the
    CPU it is named after, and all of them are offered for any CPU (the compiler keeps what fits)."""
    import nnvm_backend_llvm_x86

    folder = Path(nnvm_backend_llvm_x86.__file__).parent / "tuned"
    backend = parse_target("llvm").backend
    paths = sorted(str(p) for p in folder.glob("*.jsonl"))
    assert paths
    for path in paths:
        recs = logmod.read(path)
        assert recs and all(r.target.split()[0] == "llvm" for r in recs), path
        assert all(r.signature is not None and r.signature.cpu == Path(path).stem for r in recs), path
    for cpu in ("cascadelake", "btver2", "goldmont", "znver5"):
        assert backend.default_tuning_logs(parse_target(f"llvm -mcpu={cpu}")) == paths

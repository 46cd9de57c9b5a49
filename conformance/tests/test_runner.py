"""The suite's own machinery: seeded examples, the comparison rule, and each outcome it reports.

Outcomes are produced for real: a wrong reference gives ``fail`` with the failing example and its
error; a backend that declines an operator gives ``unsupported``; an operator without a case gives
``no case``. The backend used for ``unsupported`` is the llvm one behind a target that refuses ``erf``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import nnvm
from nnvm import plugins
from nnvm.backend import Backend
from nnvm.hookspecs import hookimpl
from nnvm_conformance import cases, report
from nnvm_conformance.case import Tolerance, compare
from nnvm_conformance.cli import run_suite
from nnvm_conformance.runner import FAIL, NO_CASE, PASS, UNSUPPORTED, draw_examples, run_op


def test_examples_are_seeded_and_distinct():
    case = cases.all_cases()["conv2d"]
    first, again = draw_examples(case), draw_examples(case)
    assert len(first) == case.count
    assert [e.describe() for e in first] == [e.describe() for e in again]
    assert all(np.array_equal(a, b) for x, y in zip(first, again) for a, b in zip(x.inputs, y.inputs))
    assert len({e.describe() for e in first}) > 1  # a range of shapes and attributes, not one example


SAMPLE = ("conv2d", "strided_slice", "cast", "sum", "scatter_elements", "pad")


def test_examples_are_the_same_in_a_fresh_process():
    """Reruns are identical: another interpreter (another hash seed) draws the same examples."""
    import hashlib
    import os
    import subprocess
    import sys

    code = ("import hashlib; from nnvm_conformance.cases import all_cases; "
            "from nnvm_conformance.runner import draw_examples; h = hashlib.sha256(); "
            "[h.update(e.describe().encode() + b''.join(a.tobytes() for a in e.inputs)) "
            f"for op in {SAMPLE!r} for e in draw_examples(all_cases()[op])]; print(h.hexdigest())")
    env = dict(os.environ, PYTHONHASHSEED="123")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    here = hashlib.sha256()
    for op in SAMPLE:
        for e in draw_examples(cases.all_cases()[op]):
            here.update(e.describe().encode() + b"".join(a.tobytes() for a in e.inputs))
    assert out.stdout.strip() == here.hexdigest()


def test_every_case_draws_examples_its_reference_accepts():
    """References run on every example without errors, giving one array per output."""
    for op, case in cases.all_cases().items():
        for ex in draw_examples(case, 2):
            wants = case.reference(list(ex.inputs), dict(ex.attrs))
            assert wants and all(isinstance(np.asarray(w), np.ndarray) for w in wants), op


def test_compare_rule():
    tol = Tolerance(4, 4, "test")
    eps = np.finfo(np.float32).eps
    want = np.array([1.0, -2.0, 0.0])
    assert compare(np.array([1.0, -2.0, 0.0], np.float32), want, "float32", tol, 1.0).ok
    near = np.array([1 + 3 * eps, -2.0, 3 * eps], np.float32)
    assert compare(near, want, "float32", tol, 1.0).ok
    far = compare(np.array([1.01, -2.0, 0.0], np.float32), want, "float32", tol, 1.0)
    assert not far.ok and "flat index 0" in far.detail and far.max_abs_error == pytest.approx(0.01, rel=1e-3)
    assert not compare(np.array([1, 2]), np.array([1, 3]), "int64", tol, 1.0).ok
    assert not compare(np.zeros(3, np.float64), want, "float32", tol, 1.0).ok  # wrong dtype
    nan = compare(np.array([np.nan], np.float32), np.array([1.0]), "float32", tol, 1.0)
    assert not nan.ok


def test_wrong_numbers_fail_with_the_example_and_the_error():
    case = dataclasses.replace(cases.all_cases()["negative"], reference=lambda xs, a: [xs[0]], count=3)
    result = run_op(case, "llvm")
    assert result.status == FAIL and result.max_error > 0
    assert result.failing.startswith("(") and "[" in result.failing  # dtype and shape of the inputs
    assert "max abs error" in result.message or "elements differ" in result.message
    assert "FAIL" in report.format_table([result])


class _RefusesErf(Backend):
    """Target ``noerf``: the llvm backend, except that it declines kernels computing ``erf`` (raising
    ``UnsupportedOperatorError``, the class the suite classifies by)."""

    name = "noerf"
    target_kinds = ("noerf",)
    keys, device = ("cpu",), "cpu"

    def build(self, funcs, target):
        refused = [f.name for f in funcs if "erf" in f.name]
        if refused:
            raise nnvm.UnsupportedOperatorError("noerf target", {"erf": refused})
        from nnvm.target import parse_target

        llvm = parse_target("llvm")
        return llvm.backend.build(funcs, llvm)


class _NoErfPlugin:
    @hookimpl
    def nnvm_register_backends(self, register):
        register(_RefusesErf())


@pytest.fixture
def noerf_target():
    plugins.reset()
    plugins.manager().register(_NoErfPlugin(), name="noerf-test")
    yield "noerf"
    plugins.reset()


def test_unsupported_is_reported_not_passed(noerf_target, capsys):
    results, missing = run_suite([noerf_target], ops=["erf", "relu"], models=[])
    by = {r.name: r for r in results}
    assert by["erf"].status == UNSUPPORTED and "unsupported operator: erf" in by["erf"].message
    assert by["relu"].status == PASS and not missing
    table = report.format_table(results)
    assert "erf" in table and "unsupported" in table and "1 pass, 0 fail, 1 unsupported" in table


@pytest.mark.parametrize("exc", [nnvm.Error("target x: erf is not supported"), RuntimeError("unsupported")])
def test_only_the_unsupported_class_declines(exc, monkeypatch):
    """An error of another class is a failure whatever its message says: the words alone never hide a
    crash as "unsupported"."""
    from nnvm_conformance import runner

    def refuse(graph, target):
        raise exc

    monkeypatch.setattr(runner, "_compile", refuse)
    result = run_op(cases.all_cases()["relu"], "llvm", count=2)
    assert result.status == FAIL and type(exc).__name__ in result.message
    assert runner.is_unsupported(nnvm.UnsupportedOperatorError("t", {"relu": ["e0"]}))


def test_cli_exit_status_counts_unsupported(noerf_target, capsys):
    from nnvm.cli import main

    assert main(["conformance", "--target", noerf_target, "--ops", "erf", "--no-models", "--quiet"]) == 1
    assert "unsupported" in capsys.readouterr().out
    assert main(["conformance", "--target", noerf_target, "--ops", "erf", "--no-models", "--quiet",
                 "--allow-unsupported"]) == 0


def test_an_operator_without_a_case_is_listed(monkeypatch):
    everything, before = cases.all_cases(), cases.missing_cases()
    monkeypatch.setattr(cases, "all_cases", lambda: {k: v for k, v in everything.items()
                                                     if k not in ("relu", "tile")})
    assert cases.missing_cases() == sorted(before + ["relu", "tile"])
    results, missing = run_suite(["llvm"], ops=["relu"], models=[])
    assert [r.status for r in results] == [NO_CASE] and missing == ["relu"]


def test_user_mistakes_are_one_sentence(capsys):
    from nnvm.cli import main

    assert main(["conformance", "--target", "nosuchtarget", "--no-models"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("nnvm: error:") and "nosuchtarget" in err and len(err.strip().splitlines()) == 1
    assert main(["conformance", "--no-models"]) == 1
    assert "needs a target" in capsys.readouterr().err
    assert main(["conformance", "--target", "llvm", "--models", "alexnet"]) == 1
    assert "unknown model alexnet" in capsys.readouterr().err
    assert main(["conformance", "--target", "llvm", "--ops", "relu,frobnicate"]) == 1
    assert "unknown operator frobnicate" in capsys.readouterr().err


def test_core_cli_without_the_suite(monkeypatch, capsys):

    from nnvm.cli import main

    # as if the package were missing: its entry point (which adds the subcommand) is not loaded
    monkeypatch.setenv("NNVM_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reset()
    try:
        assert main(["conformance", "--target", "llvm"]) == 1
    finally:
        monkeypatch.delenv("NNVM_DISABLE_PLUGIN_AUTOLOAD")
        plugins.reset()
    assert "pip install nnvm-conformance" in capsys.readouterr().err


class _NoFloat64(_RefusesErf):
    """Target ``nof64``: the llvm backend declaring float64 a type it has no type for, and failing loudly
    if an example in it reaches the compiler anyway."""

    name = "nof64"
    target_kinds = ("nof64",)
    unsupported_dtypes = ("float64",)

    def build(self, funcs, target):
        from nnvm.target import parse_target

        assert all("float64" not in repr(b) for f in funcs for b in f.params), "a float64 example was run"
        llvm = parse_target("llvm")
        return llvm.backend.build(funcs, llvm)


class _NoFloat64Plugin:
    @hookimpl
    def nnvm_register_backends(self, register):
        register(_NoFloat64())


def test_examples_in_a_dtype_the_target_lacks_are_left_out_and_counted():
    plugins.reset()
    plugins.manager().register(_NoFloat64Plugin(), name="nof64-test")
    try:
        case = cases.all_cases()["add"]
        from nnvm_conformance.runner import draw_examples

        total = len(draw_examples(case))
        result = run_op(case, "nof64")
    finally:
        plugins.reset()
    assert result.status == PASS, result.message
    assert 0 < result.examples < total
    note = f"{total - result.examples} example(s) in float64 left out: nof64 has no such type"
    assert note in result.message


def test_constant_weights_reach_the_optimizing_pipeline(monkeypatch):
    """qconv2d/qdense examples with ``constants`` hold those inputs as graph weights, and such a graph
    compiles at opt_level 3 (so alter_op_layout packs the weights); an inputs-only graph stays at 0."""
    from nnvm_conformance import runner

    levels = []
    real = nnvm.compile

    def recording(graph, **kwargs):
        levels.append((sorted(graph.params), kwargs["opt_level"]))
        return real(graph, **kwargs)

    monkeypatch.setattr(nnvm, "compile", recording)
    for op in ("qconv2d", "qdense"):
        case = cases.all_cases()[op]
        examples = draw_examples(case)
        held = [k for k, e in enumerate(examples) if e.constants == (1,)]
        assert held and len(held) < len(examples), f"{op}: constant weights in {len(held)} of {len(examples)}"
        assert run_op(case, "llvm").status == PASS
        params, level = levels[-1]
        assert params == [f"e{k}_w1" for k in held] and level == 3, levels[-1]
    one = dataclasses.replace(examples[0], constants=())
    graph, _ = runner._build_graph("qdense", [one], [case.reference(list(one.inputs), dict(one.attrs))])
    assert not graph.params
    runner._compile(graph, "llvm")
    assert levels[-1][1] == 0

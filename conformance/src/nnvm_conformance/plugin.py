"""The pytest plugin (entry point ``pytest11``): the suite as pytest items, for any installed target.

    pytest --nnvm-target foo                      the whole suite on target foo (no path needed)
    pytest --nnvm-target llvm --nnvm-target foo   both, one item per operator (or model) and target
    pytest --pyargs nnvm_conformance.suite --nnvm-target foo -n auto    the same, in parallel (xdist)

A backend's own tests run the suite by importing its tests into a module that names the targets
(and, optionally, the models and operators) with module attributes; the command line still wins::

    from nnvm_conformance.suite import *  # noqa: F401,F403
    nnvm_conformance_targets = ["opencl"]
    nnvm_conformance_models = ["resnet18", "mobilenet_v2"]

Installed with the package, so pytest loads it in every session; it stays inert unless the suite's
tests (``nnvm_conformance.suite``) are collected, or ``--nnvm-target`` is given without a path, in
which case it adds the suite itself. Items: ``test_operator[target-op]``, ``test_model[target-model]``
and ``test_every_standard_operator_has_a_case``. An unsupported operator fails its item with the
reason (``--nnvm-allow-unsupported`` turns that into an expected failure, still listed); the terminal
summary ends with the operator x target table, and ``--nnvm-json PATH`` writes the results.
"""

from __future__ import annotations

import json
import os

import pytest

RESULTS_KEY = "nnvm_conformance"


def pytest_addoption(parser):
    group = parser.getgroup("nnvm-conformance", "the nnvm conformance suite")
    group.addoption("--nnvm-target", action="append", default=[], metavar="TARGET",
                    help="target to run the conformance suite on (repeatable; default llvm)")
    group.addoption("--nnvm-models", default=None, metavar="NAMES",
                    help="comma-separated models to check (default: all four; 'none' for none)")
    group.addoption("--nnvm-ops", default=None, metavar="NAMES",
                    help="comma-separated operators to check (default: the whole standard set)")
    group.addoption("--nnvm-allow-unsupported", action="store_true",
                    help="an unsupported operator is an expected failure instead of a failure")
    group.addoption("--nnvm-json", default=None, metavar="PATH", help="write the results as JSON to PATH")


def pytest_load_initial_conftests(early_config, parser, args):
    """``pytest --nnvm-target foo`` with no path runs the installed suite."""
    ns = early_config.known_args_namespace
    if getattr(ns, "nnvm_target", None) and not getattr(ns, "file_or_dir", None):
        here = os.path.dirname(os.path.abspath(__file__))
        suite = os.path.join(here, "suite.py")
        # conftest files above the installed package (a checkout's own) are not the vendor's: stop there
        ns.confcutdir, ns.file_or_dir = here, [suite]
        args.extend(["--confcutdir", here, suite])


def pytest_configure(config):
    config.addinivalue_line("markers", "nnvm_conformance: an item of the nnvm conformance suite")
    config.pluginmanager.register(_Results(config), "nnvm-conformance-results")


class _Results:
    """Collects the results from the items' reports (which xdist carries to the controller) and prints
    the table at the end of the session."""

    def __init__(self, config):
        self.config = config
        self.results: list[dict] = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.results += [value for key, value in report.user_properties if key == RESULTS_KEY]

    def pytest_terminal_summary(self, terminalreporter):
        if not self.results:
            return
        from nnvm_conformance import report
        from nnvm_conformance.runner import Result

        results = [Result(**r) for r in self.results]
        terminalreporter.section("nnvm conformance")
        for line in report.format_table(results).splitlines():
            terminalreporter.write_line(line)
        path = self.config.getoption("nnvm_json")
        if path:
            from nnvm_conformance.cases import missing_cases

            with open(path, "w") as f:
                json.dump(report.to_json(results, missing_cases()), f, indent=2)
            terminalreporter.write_line(f"wrote {path}")


def targets(config, module=None) -> list[str]:
    """``--nnvm-target`` values, else the test module's ``nnvm_conformance_targets``, else ``llvm``."""
    out: list[str] = []
    given = config.getoption("nnvm_target") or getattr(module, "nnvm_conformance_targets", None) or ["llvm"]
    for value in given:
        out += [t.strip() for t in value.split(",") if t.strip()]
    return list(dict.fromkeys(out))


def _names(config, option: str, module, attr: str, default: list[str]) -> list[str]:
    """A comma-separated option, else the test module's list ``attr``, else ``default``."""
    value = config.getoption(option)
    if value is None:
        return list(getattr(module, attr, default))
    return [] if value.strip() == "none" else [v.strip() for v in value.split(",") if v.strip()]


def pytest_generate_tests(metafunc):
    """Parametrize the suite's tests by target and operator (or model), read from the registry now."""
    names = metafunc.fixturenames
    if "nnvm_target" not in names:
        return
    from nnvm_conformance.cases import ops_to_check
    from nnvm_conformance.models import MODELS

    config, module = metafunc.config, metafunc.module
    combos = []
    if "nnvm_op" in names:
        ops = _names(config, "nnvm_ops", module, "nnvm_conformance_ops", ops_to_check())
        combos = [(t, op) for t in targets(config, module) for op in ops]
        metafunc.parametrize(("nnvm_target", "nnvm_op"), combos, ids=[f"{t}-{op}" for t, op in combos])
    elif "nnvm_model" in names:
        models = _names(config, "nnvm_models", module, "nnvm_conformance_models", list(MODELS))
        combos = [(t, m) for t in targets(config, module) for m in models]
        metafunc.parametrize(("nnvm_target", "nnvm_model"), combos, ids=[f"{t}-{m}" for t, m in combos])


def pytest_collection_modifyitems(session, config, items):
    """Drop suite tests left with nothing to run (``--nnvm-models none``), as visible deselections."""
    def has_nothing(item) -> bool:
        skip = item.get_closest_marker("skip")
        return skip is not None and "empty parameter set" in str(skip.kwargs.get("reason", ""))

    empty = [item for item in items if item.get_closest_marker("nnvm_conformance") and has_nothing(item)]
    if empty:
        config.hook.pytest_deselected(items=empty)
        items[:] = [item for item in items if item not in empty]


def record(request, result) -> None:
    """Attach a result to the item's report (xdist carries ``user_properties`` to the controller)."""
    request.node.user_properties.append((RESULTS_KEY, result.to_json()))


def conclude(request, result) -> None:
    """Record ``result`` and turn it into the item's outcome: only ``pass`` passes."""
    from nnvm_conformance.runner import PASS, UNSUPPORTED

    record(request, result)
    if result.status == PASS:
        return
    text = f"{result.name} on {result.target}: {result.summary()}"
    if result.status == UNSUPPORTED and request.config.getoption("nnvm_allow_unsupported"):
        pytest.xfail(text)
    pytest.fail(text, pytrace=False)

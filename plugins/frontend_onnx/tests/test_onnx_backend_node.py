"""ONNX's own node test suite, through ONNX's own runner (``onnx.backend.test.BackendTest``), against
``nnvm_frontend_onnx.backend`` compiling for ``llvm``.

The cases come from the cache that ``node_cases.node_cases_dir()`` writes once (the onnx wheel ships no
node data); only the eligible ones run (``node_cases.ineligible_reason``), on the CPU device. Cases in
``expected_failures.EXPECTED_FAILURES`` are marked as expected failures: a listed case that passes
fails the suite ("unexpected success"), so the list only shrinks; an unlisted case that fails, fails.
"""

from __future__ import annotations

import json
import os
import re
from unittest import mock

import pytest

onnx_backend_test = pytest.importorskip("onnx.backend.test")

from nnvm_frontend_onnx import backend  # noqa: E402
from nnvm_testing.frontend_onnx import node_cases  # noqa: E402
from nnvm_testing.frontend_onnx.expected_failures import EXPECTED_FAILURES  # noqa: E402

NNVM_PLUGINS = "onnx,llvm-x86"  # the backend compiles: the x86 code generator too (see conftest)


def _cached_node_tests(root: str) -> list:
    """``TestCase`` records for the cached cases, read from disk by the runner's data-driven path."""
    from onnx.backend.test.case.test_case import TestCase

    out = []
    node = os.path.join(root, "node")
    for name in sorted(os.listdir(node)):
        with open(os.path.join(node, name, "data.json")) as f:
            tol = json.load(f)
        out.append(TestCase(name=name, model_name=name, url=None, model_dir=os.path.join(node, name),
                            model=None, data_sets=None, kind="node", rtol=tol["rtol"], atol=tol["atol"]))
    return out


def _backend_test_cases() -> dict:
    """The runner's unittest classes for the eligible cases on the CPU device.

    Only eligible cases are given to the runner (its ``include`` would turn the others into skips,
    which fail under CI=true), and the CUDA variants it generates are removed for the same reason:
    this backend does not support that device.
    """
    root = node_cases.node_cases_dir()
    eligible = set(node_cases.eligible_cases(root))
    cases = [c for c in _cached_node_tests(root) if c.name in eligible]

    def load(data_dir=None, kind=None):  # only the node cases, from our cache
        return cases if kind == "node" else []

    with mock.patch("onnx.backend.test.runner.load_model_tests", load):
        runner = onnx_backend_test.BackendTest(backend, __name__)
    for name in EXPECTED_FAILURES:
        runner.xfail(f"^{re.escape(name)}_cpu$")
    classes = runner.test_cases
    for cls in classes.values():
        for attr in [a for a in vars(cls) if a.startswith("test_") and not a.endswith("_cpu")]:
            delattr(cls, attr)
    return classes


globals().update(_backend_test_cases())


def test_expected_failures_name_eligible_cases_with_reasons():
    eligible = set(node_cases.eligible_cases())
    stale = sorted(set(EXPECTED_FAILURES) - eligible)
    assert not stale, f"expected failures that are not eligible node cases: {stale[:10]}"
    blank = [n for n, why in EXPECTED_FAILURES.items() if not why.strip()]
    assert not blank, f"expected failures without a reason: {blank[:10]}"

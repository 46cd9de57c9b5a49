"""The conformance suite's tests. The plugin (``nnvm_conformance.plugin``) parametrizes them by target
and operator or model; a backend's own test folder can import them to run the suite as part of its
tests (``from nnvm_conformance.suite import *``).
"""

from __future__ import annotations

import pytest

from nnvm_conformance.plugin import conclude

pytestmark = pytest.mark.nnvm_conformance

__all__ = ["test_operator", "test_model", "test_every_standard_operator_has_a_case"]


def test_operator(request, nnvm_target, nnvm_op):
    """One operator's seeded examples compiled for the target and compared with numpy."""
    from nnvm_conformance.cases import all_cases
    from nnvm_conformance.runner import no_case, run_op

    case = all_cases().get(nnvm_op)
    conclude(request, run_op(case, nnvm_target) if case is not None else no_case(nnvm_op, nnvm_target))


def test_model(request, nnvm_target, nnvm_model):
    """A whole model compiled for the target against onnxruntime (relative error < 1e-4)."""
    from nnvm_conformance.models import run_model

    conclude(request, run_model(nnvm_model, nnvm_target))


def test_every_standard_operator_has_a_case():
    """Every operator of the standard set, as registered now, has a case: all missing ones listed."""
    from nnvm_conformance.cases import missing_cases

    missing = missing_cases()
    assert not missing, f"no conformance case for {len(missing)} standard operator(s): {', '.join(missing)}"

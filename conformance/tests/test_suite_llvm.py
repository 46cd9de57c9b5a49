"""The conformance suite for ``llvm``: every standard operator, two models, and the coverage check.

The tests are the suite's own (``nnvm_conformance.suite``), parametrized by its pytest plugin with
the targets of ``--nnvm-target`` (``llvm`` when none is given).
"""

from nnvm_conformance.suite import (  # noqa: F401 - collected here
    test_every_standard_operator_has_a_case,
    test_model,
    test_operator,
)

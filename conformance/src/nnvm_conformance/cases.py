"""Every operator case, by operator name, and the operators of the standard set they must cover.

The standard set is read from the operator registry at run time (the operators registered by the
core's ``nnvm-std-ops`` plugin), so an operator added to the core without a case here shows up as
``no case`` in the table and fails the coverage check, instead of going untested.
"""

from __future__ import annotations

from nnvm_conformance.case import OpCase

STANDARD_SET = "nnvm-std-ops"  # the plugin name the core registers its operators under


def all_cases() -> dict[str, OpCase]:
    """operator name -> its case."""
    from nnvm_conformance import cases_elementwise, cases_layout, cases_nn, cases_quant, cases_tensor

    out: dict[str, OpCase] = {}
    for module in (cases_elementwise, cases_nn, cases_tensor, cases_layout, cases_quant):
        for case in module.cases():
            if case.op in out:
                raise ValueError(f"two conformance cases for operator {case.op!r}")
            out[case.op] = case
    return out


def standard_ops() -> list[str]:
    """The names of the standard operator set, as registered now."""
    from nnvm.plugins import op_registry

    registry = op_registry()
    return [name for name in registry.names() if registry.owner(name) == STANDARD_SET]


def ops_to_check() -> list[str]:
    """The registered operators the suite runs: the standard set, plus any other registered operator
    it has a case for. A case whose operator is not registered (an older core) is not run."""
    from nnvm.plugins import op_registry

    cases, standard = all_cases(), set(standard_ops())
    return [op for op in op_registry().names() if op in standard or op in cases]


def missing_cases() -> list[str]:
    """Operators of the standard set with no case."""
    cases = all_cases()
    return [op for op in standard_ops() if op not in cases]

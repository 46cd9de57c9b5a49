"""Eligible ONNX node test cases that nnvm does not pass yet, each with the reason.

``tests/test_onnx_backend_node.py`` marks these as expected failures: a listed case that starts to
pass fails the suite, so entries are removed as they are fixed and the list only shrinks. Regenerate
the docs table with ``scripts/gen_onnx_coverage.py`` after changing it.
"""

EXPECTED_FAILURES: dict[str, str] = {
}
